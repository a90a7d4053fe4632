//! One negative test per kind of diagnostic the parser emits. Each input is a
//! small file in `testdata/errors/`; its rendered error (`path:line:col`, the
//! source line, a caret under the offending token, and a hint where one helps)
//! is snapshotted in `tests/snapshots/`. Review changes with `cargo insta review`
//! (or accept them with `INSTA_UPDATE=always cargo test --test diagnostics`).

use std::path::Path;
use tpusim_hlo::error::line_col;
use tpusim_hlo::parse_modules;

fn errors_dir() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/errors")
}

/// Parses `testdata/errors/<name>.hlo`, which must fail, and renders the error.
fn render(name: &str) -> String {
    let path = errors_dir().join(format!("{name}.hlo"));
    let source = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let e = match parse_modules(&source) {
        Ok(_) => panic!("{name}.hlo parsed without an error"),
        Err(e) => e,
    };
    let shown = format!("testdata/errors/{name}.hlo");
    let rendered = e.render(&shown, &source);
    let (line, col) = line_col(&source, e.offset);
    assert!(
        rendered.contains(&format!("{shown}:{line}:{col}")),
        "{rendered}"
    );
    assert!(rendered.contains('^'), "no caret:\n{rendered}");
    rendered
}

macro_rules! cases {
    ($($name:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                insta::assert_snapshot!(stringify!($name), render(stringify!($name)));
            }
        )*

        const CASES: &[&str] = &[$(stringify!($name)),*];
    };
}

cases!(
    bad_bool,
    bad_dim_labels,
    bad_enum_value,
    bad_float,
    bad_layout_attribute,
    bad_metadata_field,
    bad_padding,
    constant_of_buffer,
    declared_result_mismatch,
    duplicate_attribute,
    duplicate_computation,
    duplicate_instruction,
    duplicate_module_attribute,
    duplicate_parameter,
    empty_computation,
    entry_layout_mismatch,
    inline_computation,
    integer_out_of_range,
    integer_too_wide,
    iota_transpose,
    layout_rank_mismatch,
    literal_nested_too_deep,
    missing_close_brace,
    missing_equals,
    missing_module_name,
    missing_shape,
    negative_dimension,
    nesting_too_deep,
    no_computations,
    non_ascii_character,
    not_an_attribute,
    operand_shape_mismatch,
    parameter_out_of_range,
    replica_groups_mismatch,
    shape_too_large,
    swapped_letters_opcode,
    sharding_device_without_maximal,
    sharding_no_type,
    sharding_tile_count,
    too_few_elements,
    too_many_elements,
    trailing_garbage,
    two_entries,
    two_roots,
    undefined_operand,
    unexpected_character,
    unknown_computation,
    unknown_element_type,
    unknown_result_type,
    unknown_escape,
    unknown_opcode,
    unknown_window_field,
    unterminated_comment,
    unterminated_string,
    window_rank_mismatch,
    wrong_operand_count,
);

/// Every file in `testdata/errors/` has a test above, and vice versa.
#[test]
fn every_error_file_is_tested() {
    let mut files: Vec<String> = std::fs::read_dir(errors_dir())
        .expect("testdata/errors")
        .filter_map(|e| {
            let p = e.ok()?.path();
            (p.extension()? == "hlo").then(|| p.file_stem()?.to_str().map(str::to_string))?
        })
        .collect();
    files.sort();
    let mut cases: Vec<String> = CASES.iter().map(|s| s.to_string()).collect();
    cases.sort();
    assert_eq!(files, cases);
}
