//! Literal values that are easy to get wrong: signed zeros, non-finite values,
//! and integers at the edges of their types.

use tpusim_hlo::literal::{Literal, LiteralData};
use tpusim_hlo::{parse_module, print_module, Opcode};

fn constant(ty_and_value: &str) -> (LiteralData, String) {
    let text = format!("HloModule m\n\nENTRY e {{\n  ROOT c = {ty_and_value}\n}}\n");
    let m = parse_module(&text).unwrap();
    let c = m.instr(m.entry().root);
    assert_eq!(c.opcode, Opcode::Constant);
    let Some(Literal::Array(data)) = c.literal.clone() else {
        panic!("not an array literal")
    };
    (data, print_module(&m))
}

#[test]
fn negative_zero_keeps_its_sign_and_prints_as_xla_does() {
    for text in ["f32[2] constant({-0, 1})", "f32[2] constant({-0.0, 1})"] {
        let (data, printed) = constant(text);
        let LiteralData::Float(v) = data else {
            panic!()
        };
        assert!(v[0] == 0.0 && v[0].is_sign_negative(), "{text}: {v:?}");
        assert!(printed.contains("constant({-0, 1})"), "{printed}");
    }
}

#[test]
fn non_finite_values_round_trip() {
    let (data, printed) = constant("f32[4] constant({inf, -inf, nan, -nan})");
    let LiteralData::Float(v) = data else {
        panic!()
    };
    assert!(
        v[0].is_infinite()
            && v[1] == f64::NEG_INFINITY
            && v[2].is_nan()
            && v[3].is_nan()
            && v[3].is_sign_negative()
    );
    assert!(
        printed.contains("constant({inf, -inf, nan, -nan})"),
        "{printed}"
    );
}

#[test]
fn integer_edges() {
    let (data, printed) = constant("u64[2] constant({18446744073709551615, 0})");
    assert_eq!(
        data,
        LiteralData::Int(vec![-1, 0]),
        "u64 max is kept as its bit pattern"
    );
    assert!(printed.contains("18446744073709551615"), "{printed}");
    let (data, _) = constant("s8[2] constant({-128, 127})");
    assert_eq!(data, LiteralData::Int(vec![-128, 127]));
    let text = "HloModule m\n\nENTRY e {\n  ROOT c = s8[] constant(128)\n}\n";
    assert!(parse_module(text)
        .unwrap_err()
        .message
        .contains("out of range"));
}
