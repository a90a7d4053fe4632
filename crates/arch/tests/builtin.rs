//! The builtin database: every chip loads, ids and device semantics are as
//! documented, and every number in a chip file carries a source comment.

use tpusim_arch::{
    builtin, builtin_ids, builtin_source, by_id, chips_table_rows, from_toml_str, ArchError,
    ChipKind, ChipSummary, MatmulDtype, Topology,
};

const IDS: [&str; 10] = [
    "v2", "v3", "v4", "v5e", "v5p", "v6e", "tpu7x", "a100", "h100", "h200",
];

#[test]
fn every_builtin_chip_loads_and_validates() {
    assert_eq!(builtin_ids(), IDS);
    let chips = builtin();
    assert_eq!(chips.len(), IDS.len());
    for (chip, id) in chips.iter().zip(IDS) {
        assert_eq!(chip.id, id, "file chips/{id}.toml declares another id");
        let text = builtin_source(id).unwrap();
        let reparsed = from_toml_str(text, id).unwrap();
        assert_eq!(&reparsed, chip);
        assert_eq!(by_id(id).unwrap(), *chip);
    }
}

#[test]
fn lookup_is_case_insensitive_and_unknown_ids_list_the_valid_ones() {
    assert_eq!(by_id("V5E").unwrap().id, "v5e");
    let err = by_id("v9").unwrap_err();
    assert!(matches!(err, ArchError::UnknownChip { .. }));
    let msg = err.to_string();
    assert!(msg.contains("`v9`"), "{msg}");
    for id in IDS {
        assert!(msg.contains(id), "{msg} lacks {id}");
    }
}

#[test]
fn what_one_device_is_follows_the_reference() {
    // (id, devices per chip, TensorCores per device, MXU edge)
    let tpus = [
        ("v2", 2, 1, 128),
        ("v3", 2, 1, 128),
        ("v4", 1, 2, 128),
        ("v5e", 1, 1, 128),
        ("v5p", 1, 2, 128),
        ("v6e", 1, 1, 256),
        ("tpu7x", 2, 1, 256),
    ];
    for (id, devices, cores, mxu) in tpus {
        let chip = by_id(id).unwrap();
        assert_eq!(chip.kind, ChipKind::Tpu, "{id}");
        assert_eq!(chip.devices_per_chip, devices, "{id}");
        assert_eq!(chip.tensorcores_per_device(), Some(cores), "{id}");
        assert_eq!(chip.mxu_dim(), Some(mxu), "{id}");
    }
    for id in ["a100", "h100", "h200"] {
        let chip = by_id(id).unwrap();
        assert_eq!(chip.kind, ChipKind::Gpu, "{id}");
        assert_eq!(chip.devices_per_chip, 1);
        assert_eq!(chip.mxu_dim(), None);
        assert_eq!(chip.tensorcores_per_device(), None);
        assert!(matches!(
            chip.ici.topology,
            Topology::Switch { domain_chips: 8 }
        ));
    }
}

#[test]
fn per_device_figures_split_chip_totals() {
    // §2.1: TPU7x 2307 TF bf16, 192 GB, 7380 GB/s per chip, 2 devices per chip.
    let ironwood = by_id("tpu7x").unwrap();
    let per_chip = |x: f64| x * f64::from(ironwood.devices_per_chip);
    assert!((per_chip(ironwood.peak_flops(MatmulDtype::Bf16)) - 2.307e15).abs() < 1e12);
    assert_eq!(ironwood.memory.hbm_bytes * 2, 192_000_000_000);
    assert!((per_chip(ironwood.memory.hbm_bandwidth_bytes_per_s) - 7.38e12).abs() < 1e9);
    // §2.2: v5p VMEM is 64 MiB per TensorCore, two TensorCores per device.
    assert_eq!(
        by_id("v5p").unwrap().vmem_bytes_per_device(),
        Some(128 << 20)
    );
}

#[test]
fn unsupported_dtypes_fall_back_to_the_widened_rate() {
    let v5e = by_id("v5e").unwrap();
    assert_eq!(v5e.native_peak_flops(MatmulDtype::Fp8), None);
    assert_eq!(v5e.peak_flops(MatmulDtype::Fp8), 1.97e14);
    assert_eq!(v5e.peak_flops(MatmulDtype::Int4), 7.88e14);
    let ironwood = by_id("tpu7x").unwrap();
    assert_eq!(ironwood.native_peak_flops(MatmulDtype::Int8), None);
    assert_eq!(
        ironwood.peak_flops(MatmulDtype::Int4),
        ironwood.peak_flops(MatmulDtype::Bf16)
    );
    assert_eq!(ironwood.peak_flops(MatmulDtype::Fp8), 2.307e15);
    let a100 = by_id("a100").unwrap();
    assert_eq!(a100.native_peak_flops(MatmulDtype::Fp8), None);
    assert_eq!(a100.peak_flops(MatmulDtype::Tf32), 1.56e14);
    assert_eq!(
        v5e.peak_flops(MatmulDtype::Tf32),
        v5e.matmul.f32_flops_per_s
    );
}

#[test]
fn wraparound_rules_follow_the_reference() {
    // §2.3: v5e/v6e wrap only on an axis of size 16.
    let v5e = by_id("v5e").unwrap().ici.topology;
    assert!(v5e.axis_wraps(&[16, 16], 0));
    assert!(!v5e.axis_wraps(&[4, 4], 0));
    assert!(v5e.axis_wraps(&[8, 16], 1) && !v5e.axis_wraps(&[8, 16], 0));
    // §2.3: v4/v5p wrap on slices of whole 4x4x4 cubes; 2x2x4 has none.
    for id in ["v4", "v5p"] {
        let topo = by_id(id).unwrap().ici.topology;
        assert!(topo.axis_wraps(&[4, 4, 4], 2), "{id}");
        assert!(topo.axis_wraps(&[4, 4, 8], 0), "{id}");
        assert!(!topo.axis_wraps(&[2, 2, 4], 2), "{id}");
        assert!(!topo.axis_wraps(&[4, 4, 4], 3), "{id}: axis out of range");
    }
    // §2.1 / §3: largest topologies (v5p: the whole 16x20x28 pod).
    assert_eq!(by_id("v5p").unwrap().max_slice_chips(), 8960);
    assert_eq!(by_id("v4").unwrap().max_slice_chips(), 4096);
    assert_eq!(by_id("tpu7x").unwrap().max_slice_chips(), 9216);
    assert_eq!(by_id("v2").unwrap().max_slice_chips(), 256);
}

#[test]
fn chips_table_has_one_row_per_chip() {
    let rows = chips_table_rows();
    assert_eq!(rows.len(), IDS.len());
    let v5e = rows.iter().find(|r| r.id == "v5e").unwrap();
    assert_eq!(v5e.peak_bf16_flops_per_s, 1.97e14);
    let cells = v5e.cells();
    assert_eq!(cells.len(), ChipSummary::HEADER.len());
    assert_eq!(cells[3], "197 TFLOP/s");
    assert_eq!(cells[4], "14.9 GiB");
    assert_eq!(cells[5], "820 GB/s");
    assert_eq!(cells[6], "ICI 4×45 GB/s/dir, 2D torus ≤16x16");
    let h100 = rows.iter().find(|r| r.id == "h100").unwrap();
    assert_eq!(h100.ici, "NVLink 4 18×25 GB/s/dir, switch, 8 per domain");
}

/// The brief for the database: every number has a source. A value line holding
/// a digit must have a `# source:` comment in its block (the run of non-blank
/// lines above it, up to a table header).
#[test]
fn every_number_in_a_chip_file_has_a_source_comment() {
    for id in IDS {
        let lines: Vec<&str> = builtin_source(id).unwrap().lines().collect();
        for (i, line) in lines.iter().enumerate() {
            let line = line.trim();
            let is_value = !line.starts_with('#') && !line.starts_with('[') && line.contains('=');
            let value = line.split_once('=').map_or("", |(_, v)| v.trim());
            let value = value.split('#').next().unwrap();
            // Strings (ids, names) are not figures.
            if !is_value || value.starts_with('"') || !value.chars().any(|c| c.is_ascii_digit()) {
                continue;
            }
            let has_source = lines[..i]
                .iter()
                .rev()
                .map(|l| l.trim())
                .take_while(|l| !l.is_empty() && !l.starts_with('['))
                .any(|l| l.starts_with('#') && l.contains("source:"));
            assert!(
                has_source,
                "chips/{id}.toml:{}: `{line}` has no `# source:` comment",
                i + 1
            );
        }
    }
}
