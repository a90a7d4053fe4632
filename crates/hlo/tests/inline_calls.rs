//! The call inliner: calls (nested ones too) become their bodies, loops copied
//! out of a call keep their trip counts, and fusion then sees across the
//! former call boundary.

mod common;

use tpusim_hlo::analysis::{while_trip_count, TripCount};
use tpusim_hlo::passes::{fuse, inline_calls};
use tpusim_hlo::{parse_module, Module, Opcode};

fn inlined(text: &str) -> Module {
    let mut m = parse_module(text).unwrap();
    let stats = inline_calls(&mut m);
    assert_eq!(stats.left, 0);
    common::assert_verifies_and_reprints(&m, "<inlined>");
    m
}

fn entry_ops(m: &Module) -> Vec<Opcode> {
    m.entry()
        .instrs
        .iter()
        .map(|&i| m.instr(i).opcode)
        .collect()
}

const NESTED: &str = r#"HloModule nested

inner {
  a = f32[4] parameter(0)
  ROOT n = f32[4] negate(a)
}

outer {
  x = f32[4] parameter(0)
  y = f32[4] parameter(1)
  c = f32[4] call(x), to_apply=inner
  ROOT s = f32[4] add(c, y)
}

ENTRY e {
  p = f32[4] parameter(0)
  q = f32[4] parameter(1)
  r1 = f32[4] call(p, q), to_apply=outer
  ROOT r2 = f32[4] call(r1, q), to_apply=outer
}
"#;

#[test]
fn nested_calls_become_their_bodies() {
    let mut m = parse_module(NESTED).unwrap();
    let stats = inline_calls(&mut m);
    // The two outer calls and the inner one (inlined into `outer` itself or
    // into each copy of it, depending on the order the calls are met).
    assert!(stats.inlined >= 3, "{stats:?}");
    let m = inlined(NESTED);
    assert_eq!(
        entry_ops(&m),
        [
            Opcode::Parameter,
            Opcode::Parameter,
            Opcode::Negate,
            Opcode::Add,
            Opcode::Negate,
            Opcode::Add
        ]
    );
    let root = m.instr(m.entry().root);
    assert_eq!(root.opcode, Opcode::Add);
}

#[test]
fn a_loop_copied_out_of_a_call_keeps_its_trip_count() {
    let m = inlined(
        r#"HloModule loop

cond {
  t = (s32[], f32[4]) parameter(0)
  i = s32[] get-tuple-element(t), index=0
  n = s32[] constant(7)
  ROOT lt = pred[] compare(i, n), direction=LT
}

body {
  t = (s32[], f32[4]) parameter(0)
  i = s32[] get-tuple-element(t), index=0
  x = f32[4] get-tuple-element(t), index=1
  one = s32[] constant(1)
  ni = s32[] add(i, one)
  nx = f32[4] negate(x)
  ROOT r = (s32[], f32[4]) tuple(ni, nx)
}

scan {
  x = f32[4] parameter(0)
  z = s32[] constant(0)
  init = (s32[], f32[4]) tuple(z, x)
  w = (s32[], f32[4]) while(init), condition=cond, body=body
  ROOT o = f32[4] get-tuple-element(w), index=1
}

ENTRY e {
  p = f32[4] parameter(0)
  ROOT c = f32[4] call(p), to_apply=scan
}
"#,
    );
    let w = m
        .entry()
        .instrs
        .iter()
        .copied()
        .find(|&i| m.instr(i).opcode == Opcode::While)
        .expect("the loop is in the entry now");
    // Recorded on the copy (`known_trip_count`), not only inferable from it:
    // once fusion folds the loop condition, inference no longer sees it.
    assert!(
        matches!(while_trip_count(&m, w), TripCount::Known(7)),
        "{:?}",
        while_trip_count(&m, w)
    );
}

#[test]
fn fusion_sees_across_an_inlined_call() {
    // JAX's jit-wrapped `where` between two elementwise ops: inlined, the
    // three ops make one fusion instead of three kernels.
    let mut m = inlined(
        r#"HloModule where

_where {
  m = pred[8] parameter(0)
  x = f32[8] parameter(1)
  y = f32[8] parameter(2)
  ROOT s = f32[8] select(m, x, y)
}

ENTRY e {
  mask = pred[8] parameter(0)
  a = f32[8] parameter(1)
  b = f32[8] parameter(2)
  e1 = f32[8] exponential(a)
  w = f32[8] call(mask, e1, b), to_apply=_where
  ROOT n = f32[8] negate(w)
}
"#,
    );
    let stats = fuse(&mut m);
    assert_eq!(stats.fusions, 1);
    assert_eq!(stats.fused_instructions, 3);
}
