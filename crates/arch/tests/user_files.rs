//! User-written chip files: the example loads; mistakes are rejected with the
//! file, `line:col` and field named.

use std::path::Path;

use tpusim_arch::{builtin_source, from_path, from_toml_str, ArchError, Location, MatmulDtype};

const EXAMPLE: &str = include_str!("../testdata/example_chip.toml");

fn v5e_with(from: &str, to: &str) -> String {
    let text = builtin_source("v5e").unwrap();
    assert!(text.contains(from), "v5e.toml has no `{from}`");
    text.replacen(from, to, 1)
}

/// Loads `text`, expects an error, and returns it with its message.
fn error(text: &str) -> (ArchError, String) {
    let err = from_toml_str(text, "my.toml").expect_err("should be rejected");
    let msg = err.to_string();
    (err, msg)
}

/// 1-based line:col where `part` starts inside the line that begins with
/// `line_start` (searched at line starts only, so comments never match).
fn position_of(text: &str, line_start: &str, part: &str) -> Location {
    let line_at = text
        .match_indices(line_start)
        .map(|(i, _)| i)
        .find(|&i| i == 0 || text.as_bytes()[i - 1] == b'\n')
        .unwrap_or_else(|| panic!("no line starting with `{line_start}`"));
    let at = line_at + text[line_at..].find(part).unwrap();
    Location {
        line: text[..at].matches('\n').count() + 1,
        column: text[line_at..at].chars().count() + 1,
    }
}

#[test]
fn the_example_chip_file_loads_and_is_in_the_readme() {
    let chip = from_toml_str(EXAMPLE, "example_chip.toml").unwrap();
    assert_eq!(chip.id, "v5e-hbm3");
    assert_eq!(chip.memory.hbm_bandwidth_bytes_per_s, 1.64e12);
    let ridge = chip.ridge_point_flops_per_byte(MatmulDtype::Bf16);
    assert!((ridge - 120.1).abs() < 0.1, "{ridge}");
    let readme = include_str!("../README.md");
    assert!(
        readme.contains(EXAMPLE),
        "README.md must show testdata/example_chip.toml verbatim"
    );
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/example_chip.toml");
    assert_eq!(from_path(&path).unwrap(), chip);
}

#[test]
fn a_wrong_type_names_the_field_and_its_position() {
    let text = v5e_with("hbm_bytes = 16_000_000_000", "hbm_bytes = \"16 GB\"");
    let (err, msg) = error(&text);
    assert!(matches!(err, ArchError::Parse { .. }));
    assert_eq!(err.field(), Some("memory.hbm_bytes"));
    let loc = position_of(&text, "hbm_bytes", "\"16 GB\"");
    assert_eq!(err.location(), Some(loc));
    assert!(
        msg.starts_with(&format!(
            "my.toml:{}:{}: `memory.hbm_bytes`:",
            loc.line, loc.column
        )),
        "{msg}"
    );
}

#[test]
fn unknown_fields_are_rejected_at_every_level() {
    // Top level, a table, the nested topology table, and the inline wraparound table.
    for (from, to, field, line) in [
        (
            "clock_hz = 1.5e9",
            "clock_hz = 1.5e9\nclock_ghz = 1.5",
            "clock_ghz",
            "clock_ghz",
        ),
        ("hbm_bytes =", "hbm_byts =", "memory.hbm_byts", "hbm_byts"),
        (
            "dims = 2",
            "dims = 2\ndimensions = 2",
            "ici.topology.dimensions",
            "dimensions",
        ),
        (
            "axis_len = 16",
            "axis_length = 16",
            "ici.topology.wraparound.axis_length",
            "wraparound",
        ),
    ] {
        let text = v5e_with(from, to);
        let typo = field.rsplit('.').next().unwrap();
        let (err, msg) = error(&text);
        assert_eq!(err.field(), Some(field), "{msg}");
        assert_eq!(
            err.location(),
            Some(position_of(&text, line, typo)),
            "{msg}"
        );
        assert!(msg.contains(&format!("unknown field `{typo}`")), "{msg}");
    }
}

#[test]
fn a_missing_field_is_named() {
    let (err, msg) = error(&v5e_with("mxu_dim = 128\n", ""));
    assert_eq!(err.field(), Some("tpu.mxu_dim"), "{msg}");
    assert!(msg.contains("missing field `mxu_dim`"), "{msg}");
    let (err, msg) = error(&v5e_with("axis_len = 16", ""));
    assert_eq!(
        err.field(),
        Some("ici.topology.wraparound.axis_len"),
        "{msg}"
    );
}

#[test]
fn schema_rules_name_the_field_and_position() {
    let cases = [
        (
            "mxu_dim = 128",
            "mxu_dim = 192",
            "tpu.mxu_dim",
            "192",
            "128 or 256",
        ),
        (
            "clock_hz = 1.5e9",
            "clock_hz = 1.5",
            "clock_hz",
            "1.5",
            "write Hz",
        ),
        (
            "hop_latency_s = 1.0e-6",
            "hop_latency_s = 1",
            "ici.hop_latency_s",
            "1",
            "write seconds",
        ),
        (
            "hbm_bandwidth_bytes_per_s = 8.2e11",
            "hbm_bandwidth_bytes_per_s = -8.2e11",
            "memory.hbm_bandwidth_bytes_per_s",
            "-8.2e11",
            "positive",
        ),
        (
            "bf16_flops_per_s = 1.97e14",
            "bf16_flops_per_s = 3.0e14",
            "matmul.bf16_flops_per_s",
            "3.0e14",
            "mxu_dim² × 2 × clock_hz",
        ),
        (
            "int8_ops_per_s = 3.94e14",
            "int8_ops_per_s = 1.0e14",
            "matmul.int8_ops_per_s",
            "1.0e14",
            "exceeds",
        ),
        (
            "max_slice_shape = [16, 16]",
            "max_slice_shape = [16, 16, 16]",
            "ici.topology.max_slice_shape",
            "[16, 16, 16]",
            "dims = 2",
        ),
        (
            "hbm_efficiency = 0.77",
            "hbm_efficiency = 1.5",
            "tensorcore.hbm_efficiency",
            "1.5",
            "fraction",
        ),
        (
            "dcn_efficiency = 0.25",
            "dcn_efficiency = 0",
            "host.dcn_efficiency",
            "0",
            "fraction",
        ),
        (
            "kernel_launch_s = 9.0e-7",
            "kernel_launch_s = 0.9",
            "tensorcore.kernel_launch_s",
            "0.9",
            "write seconds",
        ),
        (
            "vpu_alus_per_lane = 4",
            "vpu_alus_per_lane = 8",
            "vector.f32_flops_per_s",
            "6.144e12",
            "vpu_lanes",
        ),
    ];
    for (from, to, field, value, hint) in cases {
        let text = v5e_with(from, to);
        let (err, msg) = error(&text);
        assert!(matches!(err, ArchError::Invalid { .. }), "{msg}");
        assert_eq!(err.field(), Some(field), "{msg}");
        let key = field.rsplit('.').next().unwrap();
        let loc = position_of(&text, &format!("{key} = {value}"), value);
        assert_eq!(err.location(), Some(loc), "{msg}");
        assert!(msg.contains(hint), "{msg} lacks `{hint}`");
        assert!(msg.starts_with("my.toml:"), "{msg}");
    }
}

#[test]
fn kind_and_core_table_must_agree() {
    let (err, msg) = error(&v5e_with("kind = \"tpu\"", "kind = \"gpu\""));
    assert_eq!(err.field(), Some("kind"), "{msg}");
    assert!(msg.contains("[gpu]"), "{msg}");
    let (err, msg) = error(&v5e_with(
        "[tpu]",
        "[gpu]\nsm_count = 1\nsmem_bytes_per_sm = 65536\nl2_bytes = 65536\n\n[tpu]",
    ));
    assert_eq!(err.field(), Some("gpu"), "{msg}");
}

#[test]
fn syntax_errors_have_a_position_but_no_field() {
    let (err, msg) = error(&v5e_with("[memory]", "[memory"));
    assert!(matches!(err, ArchError::Parse { .. }));
    assert_eq!(err.field(), None, "{msg}");
    assert!(err.location().is_some(), "{msg}");
}

#[test]
fn a_missing_file_is_an_io_error_naming_the_path() {
    let err = from_path(Path::new("/nonexistent/chip.toml")).unwrap_err();
    assert!(matches!(err, ArchError::Io { .. }));
    assert!(
        err.to_string()
            .starts_with("/nonexistent/chip.toml: cannot read chip file"),
        "{err}"
    );
}
