//! Sharding decisions that XLA makes by propagating shardings backward (from
//! users to producers) and by choosing how to partition a dot: each test
//! partitions a small module and checks the per-device shapes that result,
//! which are wrong (global-sized values sliced afterwards, an all-reduce of a
//! dot's result) when the decision is missed.

use tpusim_hlo::{Module, Opcode, Shape};
use tpusim_spmd::{partition, PartitionOptions, Propagation};

fn partitioned(text: &str) -> Module {
    let m = tpusim_hlo::parse_module(text).expect("test module parses");
    partition(&m, &PartitionOptions::default()).expect("partitions")
}

/// The dims of every `op` in the module.
fn shapes_of(m: &Module, op: Opcode) -> Vec<Vec<i64>> {
    m.instrs
        .iter()
        .filter(|i| i.opcode == op)
        .map(|i| dims(&i.shape))
        .collect()
}

fn dims(s: &Shape) -> Vec<i64> {
    s.dims().to_vec()
}

/// Partitions a module of `header`, an `add` reducer and `entry`.
fn with_add_reducer(header: &str, entry: &str) -> Module {
    const ADD: &str = "add {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT s = f32[] add(a, b)\n}\n";
    partitioned(&format!("{header}\n{ADD}{entry}"))
}

#[test]
fn a_broadcast_takes_its_users_tiling_instead_of_being_sliced_whole() {
    let m = partitioned(
        r#"HloModule bc, num_partitions=4
ENTRY e {
  p0 = f32[8,16] parameter(0), sharding={devices=[4,1]<=[4]}
  p1 = f32[16] parameter(1), sharding={replicated}
  b = f32[8,16] broadcast(p1), dimensions={1}
  t = f32[16,8] transpose(b), dimensions={1,0}
  b2 = f32[8,16] transpose(t), dimensions={1,0}
  ROOT m = f32[8,16] multiply(p0, b2), sharding={devices=[4,1]<=[4]}
}
"#,
    );
    let broadcasts = shapes_of(&m, Opcode::Broadcast);
    assert!(!broadcasts.is_empty());
    assert!(
        broadcasts.iter().all(|s| s == &[2, 16]),
        "every broadcast is computed on the device's rows: {broadcasts:?}"
    );
    assert!(shapes_of(&m, Opcode::DynamicSlice).is_empty());
}

#[test]
fn a_scan_buffer_takes_the_tiling_its_users_after_the_loop_ask_for() {
    let m = partitioned(
        r#"HloModule scan, num_partitions=4

body {
  t = (s32[], f32[4,8,16], f32[8,16]) parameter(0)
  i = s32[] get-tuple-element(t), index=0
  buf = f32[4,8,16] get-tuple-element(t), index=1
  x = f32[8,16] get-tuple-element(t), index=2
  u = f32[1,8,16] reshape(x)
  z = s32[] constant(0)
  nb = f32[4,8,16] dynamic-update-slice(buf, u, i, z, z)
  one = s32[] constant(1)
  ni = s32[] add(i, one)
  ROOT r = (s32[], f32[4,8,16], f32[8,16]) tuple(ni, nb, x)
}

cond {
  t = (s32[], f32[4,8,16], f32[8,16]) parameter(0)
  i = s32[] get-tuple-element(t), index=0
  n = s32[] constant(4)
  ROOT lt = pred[] compare(i, n), direction=LT
}

ENTRY e {
  x = f32[8,16] parameter(0), sharding={replicated}
  w = f32[4,8,16] parameter(1), sharding={devices=[1,4,1]<=[4]}
  zero = f32[] constant(0)
  buf = f32[4,8,16] broadcast(zero), dimensions={}
  i0 = s32[] constant(0)
  init = (s32[], f32[4,8,16], f32[8,16]) tuple(i0, buf, x)
  loop = (s32[], f32[4,8,16], f32[8,16]) while(init), condition=cond, body=body
  g = f32[4,8,16] get-tuple-element(loop), index=1
  ROOT out = f32[4,8,16] add(g, w), sharding={devices=[1,4,1]<=[4]}
}
"#,
    );
    let loop_ = m
        .instrs
        .iter()
        .find(|i| i.opcode == Opcode::While)
        .expect("a while");
    let carried = loop_.shape.tuple_elements().expect("a tuple");
    assert_eq!(
        dims(&carried[1]),
        vec![4, 2, 16],
        "the stacked buffer is carried tiled: {}",
        loop_.shape
    );
}

#[test]
fn a_dot_gathers_the_cheaper_operand_instead_of_reducing_its_result() {
    // lhs [batch: a, embed: b], rhs [embed: a, mlp: b] on a 2x2 mesh: XLA
    // gathers lhs's embed (over b) and rhs's embed (over a) and computes a
    // result tiled [batch: a, mlp: b]; keeping lhs's tiling would leave a
    // partial result to all-reduce.
    let m = partitioned(
        r#"HloModule mm, num_partitions=4
ENTRY e {
  x = f32[8,16] parameter(0), sharding={devices=[2,2]<=[4]}
  w = f32[16,32] parameter(1), sharding={devices=[2,2]<=[4]}
  ROOT d = f32[8,32] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}, sharding={devices=[2,2]<=[4]}
}
"#,
    );
    assert_eq!(shapes_of(&m, Opcode::Dot), vec![vec![4, 16]]);
    assert!(shapes_of(&m, Opcode::AllReduce).is_empty());
}

#[test]
fn a_single_device_axis_splits_where_its_tile_assignments_need() {
    // 6144 = 3 x 2^11: the factor 3 sits inside the 48, not at the top.
    let m = partitioned(
        r#"HloModule big
ENTRY e {
  p = f32[16,96] parameter(0), sharding={devices=[8,48,16]<=[16,48,8]T(2,1,0) last_tile_dim_replicate}
  ROOT n = f32[16,96] negate(p), sharding={devices=[8,48,16]<=[16,48,8]T(2,1,0) last_tile_dim_replicate}
}
"#,
    );
    assert_eq!(m.config.num_partitions, Some(6144));
    assert_eq!(shapes_of(&m, Opcode::Negate), vec![vec![2, 2]]);
}

#[test]
fn elementwise_work_on_a_whole_value_is_done_on_the_slice_its_users_need() {
    // Rotary tables: positions every device holds whole, turned into cos/sin
    // and multiplied into batch-tiled activations. XLA's backward propagation
    // tiles the table computation itself.
    let m = partitioned(
        r#"HloModule rope, num_partitions=4
ENTRY e {
  x = f32[8,16] parameter(0), sharding={devices=[4,1]<=[4]}
  pos = f32[8,16] parameter(1), sharding={replicated}
  s = f32[] constant(0.5)
  sb = f32[8,16] broadcast(s), dimensions={}
  a = f32[8,16] multiply(pos, sb)
  c = f32[8,16] cosine(a)
  ROOT m = f32[8,16] multiply(x, c), sharding={devices=[4,1]<=[4]}
}
"#,
    );
    assert_eq!(shapes_of(&m, Opcode::Cos), vec![vec![2, 16]]);
    assert!(shapes_of(&m, Opcode::Multiply)
        .iter()
        .all(|s| s == &[2, 16]));
}

#[test]
fn a_quantized_dot_operand_is_gathered_as_int8_not_as_the_f32_it_came_from() {
    // AQT's pattern: x / scale (the scale a broadcast), rounded, converted to
    // s8, then a dot that needs the contracting dim whole. Redoing the chain
    // from its leaves would all-gather the f32 x (4x the bytes); XLA
    // all-gathers the s8 operand.
    let m = partitioned(
        r#"HloModule q, num_partitions=4
ENTRY e {
  x = f32[8,64] parameter(0), sharding={devices=[1,4]<=[4]}
  s = f32[8] parameter(1), sharding={replicated}
  w = s8[64,32] parameter(2), sharding={replicated}
  b = f32[8,64] broadcast(s), dimensions={0}
  d = f32[8,64] divide(x, b)
  r = f32[8,64] round-nearest-even(d)
  q = s8[8,64] convert(r)
  ROOT o = s32[8,32] dot(q, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}, sharding={replicated}
}
"#,
    );
    let gathered: Vec<String> = m
        .instrs
        .iter()
        .filter(|i| i.opcode == Opcode::AllGather)
        .map(|i| format!("{}", i.shape))
        .collect();
    assert_eq!(gathered, ["s8[8,64]{1,0}"], "what is all-gathered");
}

#[test]
fn a_value_two_users_need_whole_is_gathered_once() {
    let m = partitioned(
        r#"HloModule twice, num_partitions=4
ENTRY e {
  x = bf16[8,16] parameter(0), sharding={devices=[1,4]<=[4]}
  w1 = bf16[16,512] parameter(1), sharding={replicated}
  w2 = bf16[16,256] parameter(2), sharding={replicated}
  a = bf16[8,512] dot(x, w1), lhs_contracting_dims={1}, rhs_contracting_dims={0}, sharding={replicated}
  b = bf16[8,256] dot(x, w2), lhs_contracting_dims={1}, rhs_contracting_dims={0}, sharding={replicated}
  ROOT t = (bf16[8,512], bf16[8,256]) tuple(a, b)
}
"#,
    );
    let gathers = shapes_of(&m, Opcode::AllGather);
    assert_eq!(gathers, [[8, 16]], "x is exchanged once for both dots");
}

#[test]
fn an_annotated_op_over_a_broadcast_is_computed_on_the_tile() {
    // A rotary table: cos of a broadcast iota, annotated tiled by the batch
    // (as the value passed into a scan is). It is computed on each device's
    // rows, not whole and then sliced.
    let m = partitioned(
        r#"HloModule rope, num_partitions=4
ENTRY e {
  i = f32[16] iota(), iota_dimension=0
  b = f32[8,16] broadcast(i), dimensions={1}
  ROOT c = f32[8,16] cosine(b), sharding={devices=[4,1]<=[4]}
}
"#,
    );
    assert_eq!(shapes_of(&m, Opcode::Cos), [[2, 16]]);
    assert!(shapes_of(&m, Opcode::DynamicSlice).is_empty());
}

#[test]
fn partial_sums_tiled_further_are_sliced_before_they_are_reduced() {
    // The dot's partial sums (over the major axis) are asked for tiled along
    // rows by the minor axis: slicing first halves what the all-reduce moves.
    let m = partitioned(
        r#"HloModule partial, num_partitions=4
ENTRY e {
  p0 = f32[8,16] parameter(0), sharding={devices=[1,2,2]<=[4] last_tile_dim_replicate}
  p1 = f32[16,4] parameter(1), sharding={devices=[2,1,2]<=[4] last_tile_dim_replicate}
  d = f32[8,4] dot(p0, p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT s = f32[8,4] custom-call(d), custom_call_target="Sharding", sharding={devices=[2,1,2]<=[2,2]T(1,0) last_tile_dim_replicate}
}
"#,
    );
    assert_eq!(shapes_of(&m, Opcode::AllReduce), vec![vec![4, 4]]);
}

#[test]
fn copies_and_precision_changes_keep_their_operands_tiling() {
    // Elementwise in XLA's partitioner: computed on the device's rows, no gather.
    let m = partitioned(
        r#"HloModule copies, num_partitions=4
ENTRY e {
  p0 = f32[8,16] parameter(0), sharding={devices=[4,1]<=[4]}
  c = f32[8,16] copy(p0)
  r = f32[8,16] reduce-precision(c), exponent_bits=8, mantissa_bits=7
  ROOT b = s32[8,16] bitcast-convert(r)
}
"#,
    );
    assert!(shapes_of(&m, Opcode::AllGather).is_empty());
    assert_eq!(shapes_of(&m, Opcode::Copy), vec![vec![2, 16]]);
    assert_eq!(shapes_of(&m, Opcode::BitcastConvert), vec![vec![2, 16]]);
}

#[test]
fn a_broadcast_passed_through_a_tuple_is_redone_at_the_tiling_asked_of_it() {
    // A remat residual: the mask broadcast leaves a call inside a tuple and is
    // read back tiled. Folding get-tuple-element of the tuple lets the reshard
    // redo the broadcast on the device's rows; no global-sized value remains.
    let m = partitioned(
        r#"HloModule residual, num_partitions=4
ENTRY e {
  p0 = f32[64,32] parameter(0), sharding={devices=[4,1]<=[4]}
  m = pred[32] parameter(1), sharding={replicated}
  b = pred[64,32] broadcast(m), dimensions={1}
  t = (f32[64,32], pred[64,32]) tuple(p0, b)
  x = f32[64,32] get-tuple-element(t), index=0
  k = pred[64,32] get-tuple-element(t), index=1
  z = f32[64,32] broadcast(f32[] constant(0)), dimensions={}
  ROOT s = f32[64,32] select(k, x, z), sharding={devices=[4,1]<=[4]}
}
"#,
    );
    let broadcasts = shapes_of(&m, Opcode::Broadcast);
    assert!(
        broadcasts.iter().all(|s| s[0] == 16),
        "every broadcast is made on the device's 16 rows: {broadcasts:?}"
    );
}

#[test]
fn partial_sums_are_reduced_into_the_tiling_their_elementwise_users_get() {
    // A weight gradient: the dot's partial sums (over both axes) pass an
    // element-wise op and are then asked tiled by the major axis. XLA's dot
    // emits them that way (propagated back): reduce-scatter over the major
    // axis, all-reduce the shard over the minor, the negate on the shard.
    let m = partitioned(
        r#"HloModule grad, num_partitions=4
ENTRY e {
  x = f32[8,16] parameter(0), sharding={devices=[1,4]<=[4]}
  w = f32[16,8] parameter(1), sharding={devices=[4,1]<=[4]}
  d = f32[8,8] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  n = f32[8,8] negate(d)
  ROOT r = f32[8,8] custom-call(n), custom_call_target="Sharding", sharding={devices=[2,1,2]<=[4] last_tile_dim_replicate}
}
"#,
    );
    assert_eq!(shapes_of(&m, Opcode::ReduceScatter), vec![vec![4, 8]]);
    assert_eq!(shapes_of(&m, Opcode::AllReduce), vec![vec![4, 8]]);
    assert_eq!(shapes_of(&m, Opcode::Negate), vec![vec![4, 8]]);
}

#[test]
fn a_scattered_gradient_padded_back_takes_the_tiling_asked_of_the_pad() {
    // take_along_axis's gradient of shifted log-probabilities: scattered into
    // zeros, padded back to the sequence, added to vocab-tiled logits. The
    // scatter runs on the device's vocab rows, not on the whole vocab.
    let m = with_add_reducer(
        "HloModule padgrad, num_partitions=4",
        r#"ENTRY e {
  logits = f32[4,8,16] parameter(0), sharding={devices=[1,1,4]<=[4]}
  idx = s32[4,7,1] parameter(1), sharding={replicated}
  upd = f32[4,7] parameter(2), sharding={replicated}
  z = f32[4,7,16] broadcast(f32[] constant(0)), dimensions={}
  sc = f32[4,7,16] scatter(z, idx, upd), update_window_dims={}, inserted_window_dims={2}, scatter_dims_to_operand_dims={2}, input_batching_dims={0,1}, scatter_indices_batching_dims={0,1}, index_vector_dim=2, to_apply=add
  p = f32[4,8,16] pad(sc, f32[] constant(0)), padding=0_0x0_1x0_0
  ROOT r = f32[4,8,16] add(p, logits), sharding={devices=[1,1,4]<=[4]}
}
"#,
    );
    assert_eq!(shapes_of(&m, Opcode::Scatter), vec![vec![4, 7, 4]]);
}

#[test]
fn a_reshaped_gradient_is_reduce_scattered_at_its_dot() {
    // GPT-3's q/k/v weight gradients: the dot's partial sums (tokens tiled
    // by the minor axis) are reshaped to [embed, heads, head_dim] before
    // they are stored tiled by both axes. The tiling asked is carried back
    // through the reshape, and the dot keeps the rhs's tiling of the free
    // dim that tiling wants (gathering the lhs instead), so its sums are
    // reduce-scattered straight into it, as XLA's partitioner does: no
    // all-reduce of the whole result and no all-to-all after it.
    let text = r#"HloModule reshaped_grad, num_partitions=8
ENTRY e {
  l = f32[16,64] parameter(0), sharding={devices=[2,4]<=[8]}
  r = f32[64,16] parameter(1), sharding={devices=[4,2]<=[2,4]T(1,0)}
  d = f32[16,16] dot(l, r), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  s = f32[16,4,4] reshape(d)
  ROOT o = f32[16,4,4] negate(s), sharding={devices=[4,2,1]<=[2,4]T(1,0)}
}
"#;
    let m = partitioned(text);
    assert_eq!(shapes_of(&m, Opcode::AllReduce), Vec::<Vec<i64>>::new());
    assert_eq!(shapes_of(&m, Opcode::AllToAll), Vec::<Vec<i64>>::new());
    assert_eq!(shapes_of(&m, Opcode::ReduceScatter), vec![vec![4, 8]]);
    assert_eq!(shapes_of(&m, Opcode::Negate), vec![vec![4, 2, 4]]);
    // The same numbers as the module run whole on one device.
    let one = text.replace(", num_partitions=8", "");
    let pre = tpusim_hlo::parse_module(&one).expect("test module parses");
    let args: Vec<tpusim_interp::Value> = pre
        .entry_parameter_shapes()
        .iter()
        .enumerate()
        .map(|(p, s)| {
            let dims: Vec<usize> = s.dims().iter().map(|&x| x as usize).collect();
            let n: usize = dims.iter().product();
            let v: Vec<f64> = (0..n)
                .map(|i| ((i * 7 + p * 3) % 11) as f64 - 5.0)
                .collect();
            tpusim_interp::Value::Array(tpusim_interp::Array::from_f64s(
                tpusim_hlo::PrimitiveType::F32,
                dims,
                &v,
            ))
        })
        .collect();
    let want = tpusim_interp::execute(&pre, args.clone()).expect("runs whole");
    let opts = tpusim_interp::GlobalRun {
        output_dims: Some(vec![vec![16, 4, 4]]),
        ..Default::default()
    };
    let got = tpusim_interp::run_global(&m, args, &opts).expect("runs partitioned");
    let values = |v: &[tpusim_interp::Value]| v[0].as_array().expect("array").to_f64s();
    assert_eq!(values(&got), values(&want));
}

/// An MLP's second dot under data x FSDP x tensor parallelism (mesh
/// a x b x c): the lhs tiles its rows by (a, b) and K by c, the rhs K by c
/// and its columns by b. Both claim b; no tiling is asked of the result.
const CONFLICTING_DOT: &str = r#"HloModule conflict, num_partitions=8
ENTRY e {
  l = f32[16,32] parameter(0), sharding={devices=[4,2]<=[8]}
  r = f32[32,16] parameter(1), sharding={devices=[2,2,2]<=[2,2,2]T(2,1,0) last_tile_dim_replicate}
  ROOT d = f32[16,16] dot(l, r), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
"#;

#[test]
fn a_dot_whose_operands_claim_one_axis_takes_the_larger_operands_tiling() {
    // As XLA's InferDotShardingFromOperands: the larger operand's tiling
    // goes first (the lhs on a tie), the other's only where axes are free:
    // rows by (a, b), columns whole, partial sums over c (XLA's f32[4,16]).
    let m = partitioned(CONFLICTING_DOT);
    assert_eq!(shapes_of(&m, Opcode::Dot), vec![vec![4, 16]]);
    // A larger rhs goes first instead: columns by b, rows by a.
    let wide = CONFLICTING_DOT
        .replace("f32[32,16] parameter(1)", "f32[32,64] parameter(1)")
        .replace("f32[16,16] dot", "f32[16,64] dot");
    let m = partitioned(&wide);
    assert_eq!(shapes_of(&m, Opcode::Dot), vec![vec![8, 32]]);
}

/// An embedding lookup as JAX writes `jnp.take`: the gather inside a call,
/// its result returned in a tuple, selected against NaN for out-of-range ids
/// and, in one variant, constrained by the caller after the call.
fn take_in_a_call(constraint: &str) -> String {
    format!(
        r#"HloModule take, num_partitions=4
_take {{
  table = f32[64,16] parameter(0)
  ids = s32[8,8,1] parameter(1)
  g = f32[8,8,16] gather(table, ids), offset_dims={{2}}, collapsed_slice_dims={{0}}, start_index_map={{0}}, index_vector_dim=2, slice_sizes={{1,16}}
  ok = pred[8,8,16] parameter(2)
  nanv = f32[] constant(nan)
  nans = f32[8,8,16] broadcast(nanv), dimensions={{}}
  s = f32[8,8,16] select(ok, g, nans)
  ROOT t = (f32[8,8,16], s32[8,8,1]) tuple(s, ids)
}}

ENTRY e {{
  table = f32[64,16] parameter(0), sharding={{devices=[1,4]<=[4]}}
  ids = s32[8,8,1] parameter(1), sharding={{devices=[4,1,1]<=[4]}}
  ok = pred[8,8,16] parameter(2), sharding={{devices=[4,1,1]<=[4]}}
  c = (f32[8,8,16], s32[8,8,1]) call(table, ids, ok), to_apply=_take
  x = f32[8,8,16] get-tuple-element(c), index=0
  {constraint}
}}
"#
    )
}

/// Under forward propagation (which keeps the indices' tiling at such a
/// lookup) the conflict is noted, unless the caller constrains the result;
/// factor propagation resolves it as Shardy does and notes nothing.
#[test]
fn a_lookup_constrained_after_the_call_that_wraps_it_is_no_propagation_conflict() {
    let conflicts = |root: &str, propagation: Propagation| {
        let m = tpusim_hlo::parse_module(&take_in_a_call(root)).expect("test module parses");
        let options = PartitionOptions {
            propagation,
            ..PartitionOptions::default()
        };
        tpusim_spmd::partition_noting_conflicts(&m, &options)
            .expect("partitions")
            .1
    };
    let constrained = conflicts(
        r#"ROOT y = f32[8,8,16] custom-call(x), custom_call_target="Sharding", sharding={devices=[4,1,1]<=[4]}"#,
        Propagation::Forward,
    );
    assert!(constrained.is_empty(), "{constrained:?}");
    let free = "ROOT y = f32[8,8,16] negate(x)";
    let noted = conflicts(free, Propagation::Forward);
    assert_eq!(noted.len(), 1, "{noted:?}");
    let resolved = conflicts(free, Propagation::Factors);
    assert!(resolved.is_empty(), "{resolved:?}");
}

/// A dot whose own sharding is given (XLA's propagated form), tiled on the
/// rhs's free dim as the rhs is: XLA's dot handler gathers the lhs whole and
/// multiplies locally (a weight gradient with embed-tiled activations). A
/// choice on bytes alone keeps the lhs's contracting tiling and
/// all-to-alls the rhs and reduce-scatters the partial result instead.
#[test]
fn a_dot_given_its_sharding_gathers_the_operand_xla_gathers() {
    let m = partitioned(
        r#"HloModule wgrad, num_partitions=4
ENTRY e {
  g = f32[64,4] parameter(0), sharding={devices=[4,1]<=[4]}
  x = f32[64,4] parameter(1), sharding={devices=[1,4]<=[4]}
  ROOT d = f32[4,4] dot(g, x), lhs_contracting_dims={0}, rhs_contracting_dims={0}, sharding={devices=[1,4]<=[4]}
}
"#,
    );
    assert_eq!(shapes_of(&m, Opcode::AllGather), vec![vec![64, 4]]);
    assert_eq!(shapes_of(&m, Opcode::Dot), vec![vec![4, 1]]);
    assert!(shapes_of(&m, Opcode::AllToAll).is_empty());
    assert!(shapes_of(&m, Opcode::ReduceScatter).is_empty());
    assert!(shapes_of(&m, Opcode::AllReduce).is_empty());
}

/// A gather whose own sharding tiles the offset dim the table tiles (XLA's
/// propagation gave an embedding lookup the table's tiling): the table's
/// columns pass through untouched and the indices are gathered, where the
/// indices' batch tiling would gather the whole table instead.
#[test]
fn a_gather_given_the_tables_tiling_passes_the_table_through() {
    let m = partitioned(
        r#"HloModule lookup, num_partitions=4
ENTRY e {
  table = f32[64,16] parameter(0), sharding={devices=[1,4]<=[4]}
  ids = s32[8,1] parameter(1), sharding={devices=[4,1]<=[4]}
  ROOT g = f32[8,16] gather(table, ids), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=1, slice_sizes={1,16}, sharding={devices=[1,4]<=[4]}
}
"#,
    );
    assert_eq!(shapes_of(&m, Opcode::AllGather), vec![vec![8, 1]]);
    assert_eq!(shapes_of(&m, Opcode::Gather), vec![vec![8, 4]]);
}

/// A scatter-add whose own sharding tiles a dim every update covers whole
/// (the embedding table's gradient, embed-tiled): each device scatters its
/// columns of the updates, the indices gathered, with no partial sums to
/// reduce.
#[test]
fn a_scatter_given_a_passthrough_tiling_scatters_each_devices_columns() {
    let m = with_add_reducer(
        "HloModule tgrad, num_partitions=4",
        r#"ENTRY e {
  zeros = f32[64,16] parameter(0), sharding={devices=[1,4]<=[4]}
  ids = s32[8,1] parameter(1), sharding={devices=[4,1]<=[4]}
  upd = f32[8,16] parameter(2), sharding={devices=[4,1]<=[4]}
  ROOT s = f32[64,16] scatter(zeros, ids, upd), update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=add, sharding={devices=[1,4]<=[4]}
}
"#,
    );
    assert_eq!(shapes_of(&m, Opcode::Scatter), vec![vec![64, 4]]);
    assert!(shapes_of(&m, Opcode::AllReduce).is_empty());
    assert!(shapes_of(&m, Opcode::ReduceScatter).is_empty());
}

/// Shardy walks a loop's body before the edge that joins the loop's init to
/// its carry: a tiling the body gives the carry (here the second dim, from
/// the dot's batch dim) is in place before the init's conflicting tiling
/// (the first dim, from the dot before the loop) arrives, and the init is
/// resharded at the loop's entry. Visiting the loop before its body gave
/// the carry the init's tiling instead (the scan cases moved 1.5-1.9x XLA's
/// bytes).
#[test]
fn a_loop_carry_keeps_the_tiling_its_body_gives_it_over_the_inits() {
    let m = tpusim_hlo::parse_module(
        r#"HloModule carry, num_partitions=2

body {
  t = (s32[], f32[8,16], f32[4,16], f32[16,8,4]) parameter(0)
  i = s32[] get-tuple-element(t), index=0
  x = f32[8,16] get-tuple-element(t), index=1
  u = f32[4,16] get-tuple-element(t), index=2
  y = f32[16,8,4] dot(x, u), lhs_batch_dims={1}, rhs_batch_dims={1}
  nx = f32[8,16] negate(x)
  one = s32[] constant(1)
  ni = s32[] add(i, one)
  ROOT r = (s32[], f32[8,16], f32[4,16], f32[16,8,4]) tuple(ni, nx, u, y)
}

cond {
  t = (s32[], f32[8,16], f32[4,16], f32[16,8,4]) parameter(0)
  i = s32[] get-tuple-element(t), index=0
  n = s32[] constant(4)
  ROOT lt = pred[] compare(i, n), direction=LT
}

ENTRY e {
  a0 = f32[8,4] parameter(0), sharding={devices=[2,1]<=[2]}
  m0 = f32[4,16] parameter(1), sharding={replicated}
  x0 = f32[8,16] dot(a0, m0), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  u0 = f32[4,16] parameter(2), sharding={devices=[1,2]<=[2]}
  zero = f32[] constant(0)
  y0 = f32[16,8,4] broadcast(zero), dimensions={}
  i0 = s32[] constant(0)
  init = (s32[], f32[8,16], f32[4,16], f32[16,8,4]) tuple(i0, x0, u0, y0)
  loop = (s32[], f32[8,16], f32[4,16], f32[16,8,4]) while(init), condition=cond, body=body
  carried = f32[8,16] get-tuple-element(loop), index=1
  ROOT out = f32[8,16] negate(carried)
}
"#,
    )
    .expect("test module parses");
    let p = tpusim_spmd::propagate_shardings(&m, &PartitionOptions::default()).expect("propagates");
    let text = tpusim_hlo::print_module(&p);
    let sharding = |name: &str| {
        let line = text
            .lines()
            .find(|l| l.trim_start().starts_with(&format!("%{name} =")))
            .expect("named value");
        line.split("sharding=")
            .nth(1)
            .expect("a propagated sharding")
            .to_string()
    };
    assert_eq!(
        sharding("x0"),
        "{devices=[2,1]<=[2]}",
        "the init keeps the dot's tiling"
    );
    assert_eq!(
        sharding("carried"),
        "{devices=[1,2]<=[2]}",
        "the carry keeps the body's tiling"
    );
}

/// Shardy's import gives a value a `Sharding` constraint reads the
/// constraint's sharding as its own, closed: the parameter's tiling of the
/// second dim does not reach the constrained value, which XLA computes on
/// the constraint's tiling alone (the `uneven_10_over_4_reduce` case).
#[test]
fn a_constrained_value_takes_the_constraints_sharding_and_no_other() {
    let m = tpusim_hlo::parse_module(
        r#"HloModule constrained, num_partitions=4

ENTRY e {
  x = f32[8,4] parameter(0), sharding={devices=[1,2,2]<=[2,2]T(1,0) last_tile_dim_replicate}
  y = f32[8,4] exponential(x)
  ROOT c = f32[8,4] custom-call(y), custom_call_target="Sharding", sharding={devices=[2,1,2]<=[4] last_tile_dim_replicate}
}
"#,
    )
    .expect("test module parses");
    let p = tpusim_spmd::propagate_shardings(&m, &PartitionOptions::default()).expect("propagates");
    let text = tpusim_hlo::print_module(&p);
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with("%y ="))
        .expect("the constrained value");
    assert!(
        line.ends_with("sharding={devices=[2,1,2]<=[4] last_tile_dim_replicate}"),
        "{line}"
    );
}
