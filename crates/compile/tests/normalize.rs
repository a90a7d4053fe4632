//! The passes that undo XLA:CPU's compilation, each on a small program whose
//! result is known (verifier after each). That they keep what a program
//! computes is tested in crates/interp/tests/jax_cases.rs, on XLA:CPU's own
//! programs and their reference outputs.

mod common;
use common::{checked, parse};

use tpusim_compile::normalize::{
    normalize_layouts, split_tuple_collectives, undo_float_normalization, unfuse,
};
use tpusim_compile::Changed;
use tpusim_hlo::{Module, Opcode, PrimitiveType};

/// Instructions of the entry computation with opcode `op`.
fn entry_ops(m: &Module, op: Opcode) -> Vec<&tpusim_hlo::Instruction> {
    m.entry()
        .instrs
        .iter()
        .map(|&i| m.instr(i))
        .filter(|i| i.opcode == op)
        .collect()
}

fn ty(ins: &tpusim_hlo::Instruction) -> Option<PrimitiveType> {
    ins.shape.element_type()
}

/// XLA:CPU's per-layer update of a stacked bf16 buffer: widened whole,
/// updated in f32, narrowed whole.
const DUS_ROUND_TRIP: &str = r#"
HloModule dus, is_scheduled=true

ENTRY main {
  buf = bf16[4,8,128]{2,1,0} parameter(0)
  upd = bf16[8,128]{1,0} parameter(1)
  i = s32[] parameter(2)
  zero = s32[] constant(0)
  wide = f32[4,8,128]{2,1,0} convert(buf)
  u = f32[8,128]{1,0} convert(upd)
  u3 = f32[1,8,128]{2,1,0} bitcast(u)
  dus = f32[4,8,128]{2,1,0} dynamic-update-slice(wide, u3, i, zero, zero)
  ROOT out = bf16[4,8,128]{2,1,0} convert(dus)
}
"#;

#[test]
fn dynamic_update_slice_of_a_widened_buffer_runs_on_the_buffer() {
    let mut m = parse(DUS_ROUND_TRIP);
    assert!(matches!(
        checked(&mut m, undo_float_normalization),
        Changed::Yes(_)
    ));
    let root = m.instr(m.entry().root);
    assert_eq!(root.opcode, Opcode::DynamicUpdateSlice);
    assert_eq!(ty(root), Some(PrimitiveType::Bf16));
    assert_eq!(m.instr(root.operands[0]).opcode, Opcode::Parameter);
    assert!(
        entry_ops(&m, Opcode::Convert).is_empty(),
        "{}",
        tpusim_hlo::print_module(&m)
    );
}

#[test]
fn narrowing_round_trips_are_not_folded() {
    // f32 -> bf16 -> f32 rounds: it is not the identity, and stays.
    let mut m = parse(
        r#"
HloModule r
ENTRY main {
  x = f32[8]{0} parameter(0)
  n = bf16[8]{0} convert(x)
  ROOT w = f32[8]{0} convert(n)
}
"#,
    );
    assert_eq!(checked(&mut m, undo_float_normalization), Changed::No);
    assert_eq!(entry_ops(&m, Opcode::Convert).len(), 2);
}

/// A combined f32 all-reduce of values widened from bf16, and an all-gather
/// of a widened value, as XLA:CPU leaves a bf16 data-parallel step.
const COLLECTIVES: &str = r#"
HloModule c, is_scheduled=true, num_partitions=4

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

ENTRY main {
  g0 = bf16[16]{0} parameter(0)
  g1 = bf16[8]{0} parameter(1)
  keep = f32[4]{0} parameter(2)
  w0 = f32[16]{0} convert(g0)
  w1 = f32[8]{0} convert(g1)
  ar = (f32[16]{0}, f32[8]{0}, f32[4]{0}) all-reduce(w0, w1, keep), channel_id=1, replica_groups={{0,1,2,3}}, use_global_device_ids=true, to_apply=add
  r0 = f32[16]{0} get-tuple-element(ar), index=0
  r1 = f32[8]{0} get-tuple-element(ar), index=1
  r2 = f32[4]{0} get-tuple-element(ar), index=2
  ag = f32[32]{0} all-gather(w1), channel_id=2, replica_groups={{0,1,2,3}}, use_global_device_ids=true, dimensions={0}
  ROOT t = (f32[16]{0}, f32[8]{0}, f32[4]{0}, f32[32]{0}) tuple(r0, r1, r2, ag)
}
"#;

#[test]
fn collectives_of_widened_values_move_the_narrow_values() {
    let mut m = parse(COLLECTIVES);
    assert!(matches!(
        checked(&mut m, split_tuple_collectives),
        Changed::Yes(_)
    ));
    assert_eq!(entry_ops(&m, Opcode::AllReduce).len(), 3);
    checked(&mut m, undo_float_normalization);
    let reduces: Vec<Option<PrimitiveType>> = entry_ops(&m, Opcode::AllReduce)
        .into_iter()
        .map(ty)
        .collect();
    use PrimitiveType::{Bf16, F32};
    assert_eq!(reduces, vec![Some(Bf16), Some(Bf16), Some(F32)]);
    for ar in entry_ops(&m, Opcode::AllReduce) {
        let reducer = m.comp(ar.attr_comp("to_apply").expect("reducer"));
        assert_eq!(ty(m.instr(reducer.root)), ty(ar));
    }
    let ag = entry_ops(&m, Opcode::AllGather);
    assert_eq!(ty(ag[0]), Some(Bf16));
}

/// XLA:CPU carries a bf16 stack of activations through a loop in f32:
/// widened on entry, narrowed on every read, widened again on the way out.
const LOOP_STATE: &str = r#"
HloModule loop, is_scheduled=true

cond {
  p = (s32[], f32[4,8]{1,0}) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant(4)
  ROOT lt = pred[] compare(i, n), direction=LT
}

body {
  p = (s32[], f32[4,8]{1,0}) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  s = f32[4,8]{1,0} get-tuple-element(p), index=1
  narrow = bf16[4,8]{1,0} convert(s)
  neg = bf16[4,8]{1,0} negate(narrow)
  wide = f32[4,8]{1,0} convert(neg)
  one = s32[] constant(1)
  next = s32[] add(i, one)
  ROOT t = (s32[], f32[4,8]{1,0}) tuple(next, wide)
}

ENTRY main {
  x = bf16[4,8]{1,0} parameter(0)
  w = f32[4,8]{1,0} convert(x)
  zero = s32[] constant(0)
  init = (s32[], f32[4,8]{1,0}) tuple(zero, w)
  loop = (s32[], f32[4,8]{1,0}) while(init), condition=cond, body=body
  r = f32[4,8]{1,0} get-tuple-element(loop), index=1
  ROOT out = bf16[4,8]{1,0} convert(r)
}
"#;

#[test]
fn loop_state_widened_on_entry_and_narrowed_on_reads_is_carried_narrow() {
    let mut m = parse(LOOP_STATE);
    checked(&mut m, undo_float_normalization);
    let w = entry_ops(&m, Opcode::While)[0];
    let state = w.shape.tuple_elements().expect("tuple");
    assert_eq!(state[1].element_type(), Some(PrimitiveType::Bf16));
    let converts = m
        .comps
        .iter()
        .flat_map(|c| &c.instrs)
        .filter(|&&i| m.instr(i).opcode == Opcode::Convert)
        .count();
    assert_eq!(converts, 0, "{}", tpusim_hlo::print_module(&m));
}

#[test]
fn loop_state_read_wide_stays_wide() {
    // The body also adds the f32 state to itself: the f32 value is used.
    let text = LOOP_STATE.replace(
        "ROOT t = (s32[], f32[4,8]{1,0}) tuple(next, wide)",
        "sum = f32[4,8]{1,0} add(s, wide)\n  ROOT t = (s32[], f32[4,8]{1,0}) tuple(next, sum)",
    );
    let mut m = parse(&text);
    checked(&mut m, undo_float_normalization);
    let w = entry_ops(&m, Opcode::While)[0];
    let state = w.shape.tuple_elements().expect("tuple");
    assert_eq!(state[1].element_type(), Some(PrimitiveType::F32));
}

#[test]
fn widened_dot_operands_are_read_narrow() {
    let mut m = parse(
        r#"
HloModule d
ENTRY main {
  a = bf16[8,16]{1,0} parameter(0)
  b = bf16[16,4]{1,0} parameter(1)
  wa = f32[8,16]{1,0} convert(a)
  wb = f32[16,4]{1,0} convert(b)
  ROOT d = f32[8,4]{1,0} dot(wa, wb), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
"#,
    );
    checked(&mut m, undo_float_normalization);
    let dot = m.instr(m.entry().root);
    assert_eq!(ty(dot), Some(PrimitiveType::F32));
    for &o in &dot.operands {
        assert_eq!(m.instr(o).opcode, Opcode::Parameter);
    }
}

/// XLA:CPU's bf16 MLP layer: the dot computed in f32 and rounded after, the
/// ReLU run on the value widened again, the result narrowed for the next
/// dot. On a TPU the dot rounds into bf16 itself and the ReLU runs in bf16.
#[test]
fn a_relu_between_bf16_dots_runs_narrow_and_the_dot_rounds_into_bf16() {
    let mut m = parse(
        r#"
HloModule relu, is_scheduled=true
ENTRY main {
  x = bf16[8,16]{1,0} parameter(0)
  w = bf16[16,32]{1,0} parameter(1)
  v = bf16[32,4]{1,0} parameter(2)
  d = f32[8,32]{1,0} dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  n = bf16[8,32]{1,0} convert(d)
  wide = f32[8,32]{1,0} convert(n)
  zero = f32[] constant(0)
  z = f32[8,32]{1,0} broadcast(zero), dimensions={}
  r = f32[8,32]{1,0} maximum(wide, z)
  back = bf16[8,32]{1,0} convert(r)
  ROOT d2 = f32[8,4]{1,0} dot(back, v), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
"#,
    );
    checked(&mut m, undo_float_normalization);
    let relu = entry_ops(&m, Opcode::Maximum);
    assert_eq!(relu.len(), 1);
    assert_eq!(ty(relu[0]), Some(PrimitiveType::Bf16));
    let dots = entry_ops(&m, Opcode::Dot);
    assert_eq!(
        dots.iter().map(|d| ty(d)).collect::<Vec<_>>(),
        vec![Some(PrimitiveType::Bf16), Some(PrimitiveType::F32)],
        "the first dot rounds into bf16; the root keeps its type"
    );
    assert!(entry_ops(&m, Opcode::Convert)
        .iter()
        .all(|c| m.instr(c.operands[0]).opcode == Opcode::Constant));
}

/// A maximum against a constant is not moved to the narrow type when its
/// result is read wide: 0.1 is not a bf16 value, so max(x, 0.1) in bf16
/// would differ.
#[test]
fn a_maximum_read_wide_against_a_constant_stays_wide() {
    let mut m = parse(
        r#"
HloModule clamp, is_scheduled=true
ENTRY main {
  x = bf16[4]{0} parameter(0)
  wide = f32[4]{0} convert(x)
  c = f32[4]{0} constant({0.1, 0.1, 0.1, 0.1})
  ROOT r = f32[4]{0} maximum(wide, c)
}
"#,
    );
    checked(&mut m, undo_float_normalization);
    let max = entry_ops(&m, Opcode::Maximum);
    assert_eq!(max.len(), 1);
    assert_eq!(ty(max[0]), Some(PrimitiveType::F32));
}

/// XLA:CPU's physical transpose: a copy to the transposed layout, read by
/// a bitcast to the transposed shape; and a plain transpose.
const LAYOUTS: &str = r#"
HloModule l, is_scheduled=true
ENTRY main {
  x = f32[4,8]{1,0} parameter(0)
  c = f32[4,8]{0,1} copy(x)
  b = f32[8,4]{1,0} bitcast(c)
  t = f32[8,4]{0,1} transpose(x), dimensions={1,0}
  n = f32[8,4]{0,1} negate(t)
  ROOT r = (f32[8,4]{1,0}, f32[8,4]{0,1}) tuple(b, n)
}
"#;

#[test]
fn layouts_are_dropped_and_bitcasts_between_them_become_transposes() {
    let mut m = parse(LAYOUTS);
    assert!(matches!(
        checked(&mut m, normalize_layouts),
        Changed::Yes(_)
    ));
    assert!(entry_ops(&m, Opcode::Copy).is_empty());
    assert!(entry_ops(&m, Opcode::Bitcast).is_empty());
    assert!(m
        .instrs
        .iter()
        .all(|i| i.shape.leaves().iter().all(|a| a.layout.is_none())));
    // b read the copy's {0,1} order as [8,4] row-major: the transpose of x.
    let root = m.instr(m.entry().root);
    let b = m.instr(root.operands[0]);
    assert_eq!(b.opcode, Opcode::Transpose);
    assert_eq!(b.attr_ints("dimensions"), Some(&[1, 0][..]));
    assert_eq!(m.instr(b.operands[0]).name, "x");
}

#[test]
fn chained_bitcasts_keep_the_layout_each_was_written_against() {
    // x{0,1} holds x's transpose in memory; as [32] that memory is
    // transpose(x) flattened; as [8,4]{1,0} it is transpose(x).
    let mut m = parse(
        r#"
HloModule l, is_scheduled=true
ENTRY main {
  x = f32[4,8]{0,1} parameter(0)
  flat = f32[32]{0} bitcast(x)
  ROOT back = f32[8,4]{1,0} bitcast(flat)
}
"#,
    );
    checked(&mut m, normalize_layouts);
    let ops: Vec<Opcode> = m
        .entry()
        .instrs
        .iter()
        .map(|&i| m.instr(i).opcode)
        .collect();
    assert_eq!(
        ops,
        // The last bitcast is between default layouts: a reshape already.
        vec![
            Opcode::Parameter,
            Opcode::Transpose,
            Opcode::Reshape,
            Opcode::Bitcast
        ],
        "{}",
        tpusim_hlo::print_module(&m)
    );
}

#[test]
fn nested_fusions_are_unfused_and_their_computations_removed() {
    let mut m = parse(
        r#"
HloModule f, is_scheduled=true

inner {
  a = f32[8]{0} parameter(0)
  ROOT e = f32[8]{0} exponential(a)
}

outer {
  p = f32[8]{0} parameter(0)
  f = f32[8]{0} fusion(p), kind=kLoop, calls=inner
  ROOT n = f32[8]{0} negate(f)
}

ENTRY main {
  x = f32[8]{0} parameter(0)
  ROOT y = f32[8]{0} fusion(x), kind=kLoop, calls=outer
}
"#,
    );
    assert!(matches!(checked(&mut m, unfuse), Changed::Yes(_)));
    assert_eq!(m.comps.len(), 1, "{}", tpusim_hlo::print_module(&m));
    let ops: Vec<Opcode> = m
        .entry()
        .instrs
        .iter()
        .map(|&i| m.instr(i).opcode)
        .collect();
    assert_eq!(ops, vec![Opcode::Parameter, Opcode::Exp, Opcode::Negate]);
}
