//! Shardy's constant splitter: each use of a constant expression (or of a
//! broadcast scalar) by another op gets its own copy, so that propagation
//! cannot tie unrelated users together through it.

mod common;

use tpusim_hlo::passes::{merge_constant_copies, remove_dead_code, split_constants};
use tpusim_hlo::{parse_module, print_module, verifier::verify, Module};

fn split(text: &str) -> (Module, usize) {
    let mut m = parse_module(text).unwrap();
    let stats = split_constants(&mut m);
    assert_eq!(stats.left, 0);
    common::assert_verifies_and_reprints(&m, "<split>");
    (m, stats.copies)
}

/// The operand each named instruction of the entry reads at `k`.
fn operand_of(m: &Module, name: &str, k: usize) -> String {
    let i = m
        .entry()
        .instrs
        .iter()
        .copied()
        .find(|&i| m.instr(i).name == name)
        .expect("named instruction");
    m.instr(m.instr(i).operands[k]).name.clone()
}

#[test]
fn each_user_of_a_constant_expression_gets_its_own_copy() {
    let (m, copies) = split(
        r#"HloModule m

ENTRY e {
  x = f32[8,8] parameter(0)
  y = f32[8,8] parameter(1)
  i = s32[8,8] iota(), iota_dimension=0
  z = f32[8,8] convert(i)
  a = f32[8,8] multiply(x, z)
  b = f32[8,8] multiply(y, z)
  s = f32[] constant(2)
  t = f32[8,8] broadcast(s), dimensions={}
  c = f32[8,8] add(a, t)
  d = f32[8,8] add(b, t)
  ROOT r = (f32[8,8], f32[8,8]) tuple(c, d)
}
"#,
    );
    // The iota and its convert copied for the second product; the
    // broadcast scalar for the second add (the scalar itself is shared).
    assert_eq!(copies, 3);
    assert_eq!(operand_of(&m, "a", 1), "z");
    assert_ne!(operand_of(&m, "b", 1), "z");
    assert_eq!(operand_of(&m, "c", 1), "t");
    assert_ne!(operand_of(&m, "d", 1), "t");
}

#[test]
fn a_value_computed_from_a_parameter_is_not_copied() {
    let (_, copies) = split(
        r#"HloModule m

ENTRY e {
  x = f32[8] parameter(0)
  n = f32[8] negate(x)
  a = f32[8] add(n, n)
  ROOT b = f32[8] multiply(a, n)
}
"#,
    );
    assert_eq!(copies, 0);
}

/// Merging after the split gives back one copy of each constant: the
/// program has as many instructions as before, both users reading one.
#[test]
fn merging_undoes_the_split_where_the_copies_are_identical() {
    let text = r#"HloModule m

ENTRY e {
  x = f32[8] parameter(0)
  i = s32[8] iota(), iota_dimension=0
  z = f32[8] convert(i)
  a = f32[8] multiply(x, z)
  b = f32[8] add(x, z)
  ROOT r = f32[8] subtract(a, b)
}
"#;
    let (mut m, copies) = split(text);
    assert_eq!(copies, 2);
    assert_eq!(merge_constant_copies(&mut m), 2);
    remove_dead_code(&mut m);
    verify(&m).unwrap_or_else(|e| panic!("{}", e[0].message));
    assert_eq!(m.entry().instrs.len(), 6, "{}", print_module(&m));
    assert_eq!(operand_of(&m, "a", 1), operand_of(&m, "b", 1));
}
