//! The TPU compiler's collective rewrites are exact: on simulated devices the
//! interpreter computes the same arrays, bit for bit, before and after
//! reduce-scatter creation through element-wise ops (crates/compile/src/
//! reduce_scatter.rs) and the collective-matmul decomposition
//! (crates/compile/src/collective_matmul.rs).

use tpusim_compile::{all_reduce_to_reduce_scatter, compact, decompose_all_gather_dots, Changed};
use tpusim_hlo::{Module, Opcode, PrimitiveType};
use tpusim_interp::{execute_devices, Array, Value};

fn parse(text: &str) -> Module {
    let m = tpusim_hlo::parse_module(text).unwrap_or_else(|e| panic!("{e:?}"));
    tpusim_hlo::verify(&m).expect("test module verifies");
    m
}

/// Device `d`'s arguments: small integers (exact in every float type),
/// different on every device and element.
fn args(m: &Module, devices: usize) -> Vec<Vec<Value>> {
    (0..devices)
        .map(|d| {
            m.entry_parameter_shapes()
                .iter()
                .enumerate()
                .map(|(p, s)| {
                    let dims: Vec<usize> = s.dims().iter().map(|&x| x as usize).collect();
                    let n: usize = dims.iter().product();
                    let v: Vec<f64> = (0..n)
                        .map(|i| ((i * 7 + d * 13 + p * 5) % 11) as f64 - 5.0)
                        .collect();
                    let ty = s.element_type().unwrap_or(PrimitiveType::F32);
                    Value::Array(Array::from_f64s(ty, dims, &v))
                })
                .collect()
        })
        .collect()
}

fn outputs(m: &Module, devices: usize) -> Vec<Vec<Vec<f64>>> {
    execute_devices(m, args(m, devices), u64::MAX)
        .unwrap_or_else(|e| panic!("{e}\n{}", tpusim_hlo::print_module(m)))
        .into_iter()
        .map(|leaves| {
            leaves
                .iter()
                .map(|v| v.as_array().expect("array result").to_f64s())
                .collect()
        })
        .collect()
}

fn count(m: &Module, op: Opcode) -> usize {
    m.comps
        .iter()
        .flat_map(|c| &c.instrs)
        .filter(|&&i| m.instr(i).opcode == op)
        .count()
}

/// Runs `pass` on `text`, checks it changed the module and left it valid,
/// and that every device computes the same results as before.
fn same_results(text: &str, devices: usize, pass: impl FnOnce(&mut Module) -> Changed) -> Module {
    let before = parse(text);
    let mut after = before.clone();
    let changed = pass(&mut after);
    compact(&mut after);
    assert!(matches!(changed, Changed::Yes(_)), "{changed:?}");
    if let Err(e) = tpusim_hlo::verify(&after) {
        panic!("{}\n{}", e[0].message, tpusim_hlo::print_module(&after));
    }
    let (b, a) = (outputs(&before, devices), outputs(&after, devices));
    if b != a {
        for (d, (x, y)) in b.iter().zip(&a).enumerate() {
            for (k, (p, q)) in x.iter().zip(y).enumerate() {
                if p != q {
                    eprintln!("device {d} out{k}: before {p:?}\n after {q:?}");
                }
            }
        }
    }
    assert_eq!(b, a, "{}", tpusim_hlo::print_module(&after));
    after
}

/// An int8 dot's partial sums, all-reduced, dequantized, narrowed and
/// reshaped before the device takes its shard (AQT's int8 training).
const DEQUANTIZED_SHARD: &str = r#"
HloModule dequantized_shard, num_partitions=4

add {
  a = s32[] parameter(0)
  b = s32[] parameter(1)
  ROOT s = s32[] add(a, b)
}

ENTRY main {
  x = s8[8,6] parameter(0)
  w = s8[6,16] parameter(1)
  scale = f32[16] parameter(2)
  partial = s32[8,16] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ar = s32[8,16] all-reduce(partial), channel_id=1, replica_groups={{0,1,2,3}}, use_global_device_ids=true, to_apply=add
  wide = f32[8,16] convert(ar)
  s = f32[8,16] broadcast(scale), dimensions={1}
  scaled = f32[8,16] multiply(wide, s)
  narrow = bf16[8,16] convert(scaled)
  split = bf16[2,4,16] reshape(narrow)
  pid = u32[] partition-id()
  table = s32[4] constant({0, 4, 8, 12})
  off = s32[1] dynamic-slice(table, pid), dynamic_slice_sizes={1}
  o = s32[] reshape(off)
  zero = s32[] constant(0)
  ROOT shard = bf16[2,4,4] dynamic-slice(split, zero, zero, o), dynamic_slice_sizes={2,4,4}
}
"#;

#[test]
fn reduce_scatter_through_dequantization_computes_the_same_shard() {
    let m = same_results(DEQUANTIZED_SHARD, 4, all_reduce_to_reduce_scatter);
    assert_one_reduce_scatter(&m, &[8, 4], 1);
}

/// `m` has one reduce-scatter, of dims `dims` along `dimension`, and no
/// all-reduce left.
fn assert_one_reduce_scatter(m: &Module, dims: &[i64], dimension: i64) {
    assert_eq!(count(m, Opcode::ReduceScatter), 1);
    assert_eq!(count(m, Opcode::AllReduce), 0);
    let rs = m
        .instrs
        .iter()
        .find(|i| i.opcode == Opcode::ReduceScatter)
        .expect("reduce-scatter");
    assert_eq!(rs.shape.dims(), dims, "the shard of the partial sums");
    assert_eq!(rs.attr_ints("dimensions"), Some(&[dimension][..]));
}

#[test]
fn all_reduce_read_beyond_its_shard_is_kept() {
    // The narrowed value is also read whole: the all-reduce must stay.
    let text = DEQUANTIZED_SHARD
        .replace(
            "ROOT shard = bf16[2,4,4]",
            "shard = bf16[2,4,4]",
        )
        .replace(
            "dynamic_slice_sizes={2,4,4}\n}",
            "dynamic_slice_sizes={2,4,4}\n  ROOT t = (bf16[2,4,4], bf16[8,16]) tuple(shard, narrow)\n}",
        );
    let mut m = parse(&text);
    assert_eq!(all_reduce_to_reduce_scatter(&mut m), Changed::No);
}

/// A weight gradient (a dot contracting the batch, summed over the data
/// devices) transposed and narrowed to bf16 before each device takes its
/// FSDP shard of the weight's first dimension, as a scan's backward body
/// stores it into the stacked gradient.
const TRANSPOSED_GRADIENT: &str = r#"
HloModule transposed_gradient, num_partitions=4

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

ENTRY main {
  x = f32[6,8] parameter(0)
  dy = f32[6,12] parameter(1)
  partial = f32[12,8] dot(dy, x), lhs_contracting_dims={0}, rhs_contracting_dims={0}
  ar = f32[12,8] all-reduce(partial), channel_id=1, replica_groups={{0,1,2,3}}, use_global_device_ids=true, to_apply=add
  t = f32[8,12] transpose(ar), dimensions={1,0}
  narrow = bf16[8,12] convert(t)
  pid = u32[] partition-id()
  table = s32[4] constant({0, 2, 4, 6})
  off = s32[1] dynamic-slice(table, pid), dynamic_slice_sizes={1}
  o = s32[] reshape(off)
  zero = s32[] constant(0)
  ROOT shard = bf16[2,12] dynamic-slice(narrow, o, zero), dynamic_slice_sizes={2,12}
}
"#;

#[test]
fn reduce_scatter_through_a_transpose_scatters_the_dimension_it_comes_from() {
    let m = same_results(TRANSPOSED_GRADIENT, 4, all_reduce_to_reduce_scatter);
    // The shard of the untransposed sums.
    assert_one_reduce_scatter(&m, &[12, 2], 1);
}
/// A gathered activation feeding a dot along a free dimension it is not
/// gathered on (the QKV projection of a layer with its embedding sharded).
const GATHERED_LHS: &str = r#"
HloModule gathered_lhs, num_partitions=4

ENTRY main {
  x = f32[8,3] parameter(0)
  w = f32[12,5] parameter(1)
  ag = f32[8,12] all-gather(x), channel_id=1, replica_groups={{0,1,2,3}}, dimensions={1}, use_global_device_ids=true
  d = f32[8,5] dot(ag, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT t = f32[8,5] tanh(d)
}
"#;

#[test]
fn collective_matmul_of_a_gathered_lhs_computes_the_same_product() {
    let m = same_results(GATHERED_LHS, 4, |m| decompose_all_gather_dots(m, 1));
    assert_eq!(count(&m, Opcode::AllGather), 4, "one gather per chunk");
    assert_eq!(count(&m, Opcode::Dot), 4);
    // The chunks are issued in a pipeline: each gather before the previous
    // chunk's dot.
    let order: Vec<Opcode> = m
        .entry()
        .instrs
        .iter()
        .map(|&i| m.instr(i).opcode)
        .filter(|op| matches!(op, Opcode::AllGather | Opcode::Dot))
        .collect();
    assert_eq!(
        order,
        [
            Opcode::AllGather,
            Opcode::AllGather,
            Opcode::Dot,
            Opcode::AllGather,
            Opcode::Dot,
            Opcode::AllGather,
            Opcode::Dot,
            Opcode::Dot
        ]
    );
}

#[test]
fn collective_matmul_of_a_gathered_rhs_with_two_free_dimensions() {
    // The rhs is gathered on its last free dimension and split on the other,
    // which lands after the lhs's free dimension in the result.
    let text = r#"
HloModule gathered_rhs, num_partitions=4

ENTRY main {
  w = f32[6,10] parameter(0)
  x = f32[10,8,2] parameter(1)
  ag = f32[10,8,8] all-gather(x), channel_id=1, replica_groups={{0,1,2,3}}, dimensions={2}, use_global_device_ids=true
  ROOT d = f32[6,8,8] dot(w, ag), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
"#;
    same_results(text, 4, |m| decompose_all_gather_dots(m, 1));
}

#[test]
fn collective_matmul_with_batch_dimensions() {
    let text = r#"
HloModule batched, num_partitions=2

ENTRY main {
  x = f32[3,4,5] parameter(0)
  w = f32[3,10,7] parameter(1)
  ag = f32[3,4,10] all-gather(x), channel_id=1, replica_groups={{0,1}}, dimensions={2}, use_global_device_ids=true
  ROOT d = f32[3,4,7] dot(ag, w), lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={1}
}
"#;
    same_results(text, 2, |m| decompose_all_gather_dots(m, 1));
}

#[test]
fn collective_matmul_decomposes_one_of_two_gathered_operands() {
    // Both operands are gathered; only the larger is decomposed.
    let text = r#"
HloModule both, num_partitions=4

ENTRY main {
  x = f32[16,3] parameter(0)
  v = f32[3,4] parameter(1)
  ag = f32[16,12] all-gather(x), channel_id=1, replica_groups={{0,1,2,3}}, dimensions={1}, use_global_device_ids=true
  wg = f32[12,4] all-gather(v), channel_id=2, replica_groups={{0,1,2,3}}, dimensions={0}, use_global_device_ids=true
  ROOT d = f32[16,4] dot(ag, wg), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
"#;
    let m = same_results(text, 4, |m| decompose_all_gather_dots(m, 1));
    assert_eq!(count(&m, Opcode::AllGather), 5, "4 chunks of x, v whole");
}

#[test]
fn collective_matmul_keeps_chunks_of_at_least_the_minimum() {
    // 8 rows over 4 devices are chunks of 2: below a minimum of 4, nothing
    // is decomposed.
    let mut m = parse(GATHERED_LHS);
    assert_eq!(decompose_all_gather_dots(&mut m, 4), Changed::No);
}

/// `split` (bf16) is sliced for this device and also read whole.
fn read_whole(text: &str) -> String {
    text.replace("ROOT shard = bf16[2,4,4]", "shard = bf16[2,4,4]")
        .replace(
            "dynamic_slice_sizes={2,4,4}\n}",
            "dynamic_slice_sizes={2,4,4}\n  ROOT t = (bf16[2,4,4], bf16[2,4,16]) tuple(shard, split)\n}",
        )
}

/// The scale made the same on every device: an all-reduce over the group.
fn uniform_scale(text: &str) -> String {
    text.replace(
        "  s = f32[8,16] broadcast(scale), dimensions={1}",
        "  shared = f32[16] all-reduce(scale), channel_id=7, replica_groups={{0,1,2,3}}, use_global_device_ids=true, to_apply=addf\n  s = f32[8,16] broadcast(shared), dimensions={1}",
    )
    .replace(
        "ENTRY main {",
        "addf {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT s = f32[] add(a, b)\n}\n\nENTRY main {",
    )
}

#[test]
fn a_narrowed_value_also_read_whole_is_rebuilt_by_an_all_gather() {
    // The scale is the same on every device (an all-reduce over the same
    // group, as AQT's max-abs scales are): the s32 all-reduce becomes a
    // reduce-scatter, the dequantization runs on the shard, and an
    // all-gather of the bf16 shard rebuilds `split`.
    let text = uniform_scale(&read_whole(DEQUANTIZED_SHARD));
    let m = same_results(&text, 4, all_reduce_to_reduce_scatter);
    assert_eq!(count(&m, Opcode::ReduceScatter), 1);
    assert_eq!(count(&m, Opcode::AllGather), 1);
    assert_eq!(count(&m, Opcode::AllReduce), 1, "only the scale's");
}

#[test]
fn a_value_read_whole_with_a_device_local_operand_keeps_its_all_reduce() {
    // Each device scales by its own parameter: the shards of the other
    // devices were scaled differently, so no all-gather can rebuild the
    // whole value this device computes.
    let mut m = parse(&read_whole(DEQUANTIZED_SHARD));
    assert_eq!(all_reduce_to_reduce_scatter(&mut m), Changed::No);
}

#[test]
fn a_value_read_whole_and_no_narrower_keeps_its_all_reduce() {
    // Without the narrowing convert, reduce-scatter + all-gather would move
    // as many bytes as the all-reduce: nothing changes.
    let text = uniform_scale(DEQUANTIZED_SHARD)
        .replace("narrow = bf16[8,16] convert(scaled)", "narrow = f32[8,16] negate(scaled)")
        .replace("split = bf16[2,4,16]", "split = f32[2,4,16]")
        .replace("ROOT shard = bf16[2,4,4]", "shard = f32[2,4,4]")
        .replace(
            "dynamic_slice_sizes={2,4,4}\n}",
            "dynamic_slice_sizes={2,4,4}\n  ROOT t = (f32[2,4,4], f32[2,4,16]) tuple(shard, split)\n}",
        );
    let mut m = parse(&text);
    assert_eq!(all_reduce_to_reduce_scatter(&mut m), Changed::No);
}

/// An 8-device version of the read-whole case whose scale is uniform over
/// the tensor groups `{0..3},{4..7}` through a collective over `groups`
/// (another mesh axis when they pair the tensor groups' devices in order).
fn scale_through(groups: &str) -> String {
    let text = read_whole(DEQUANTIZED_SHARD)
        .replace("num_partitions=4", "num_partitions=8")
        .replace(
            "replica_groups={{0,1,2,3}}",
            "replica_groups={{0,1,2,3},{4,5,6,7}}",
        )
        .replace(
            "s32[4] constant({0, 4, 8, 12})",
            "s32[8] constant({0, 4, 8, 12, 0, 4, 8, 12})",
        )
        .replace(
            "scale = f32[16] parameter(2)",
            "scale = f32[8] parameter(2)",
        );
    text.replace(
        "  s = f32[8,16] broadcast(scale), dimensions={1}",
        &format!(
            "  tensor = f32[8] all-reduce(scale), channel_id=7, replica_groups={{{{0,1,2,3}},{{4,5,6,7}}}}, use_global_device_ids=true, to_apply=addf\n  \
             other = f32[16] all-gather(tensor), channel_id=8, replica_groups={groups}, dimensions={{0}}, use_global_device_ids=true\n  \
             s = f32[8,16] broadcast(other), dimensions={{1}}"
        ),
    )
    .replace(
        "ENTRY main {",
        "addf {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT s = f32[] add(a, b)\n}\n\nENTRY main {",
    )
}

#[test]
fn a_scale_gathered_over_another_mesh_axis_is_uniform() {
    let m = same_results(
        &scale_through("{{0,4},{1,5},{2,6},{3,7}}"),
        8,
        all_reduce_to_reduce_scatter,
    );
    assert_eq!(count(&m, Opcode::ReduceScatter), 1);
}

#[test]
fn a_scale_gathered_over_groups_that_mix_the_axes_is_not_uniform() {
    // Devices 0 and 1 share a tensor group, but gather from 4 and 2, which
    // do not: their scales may differ.
    let mut m = parse(&scale_through("{{0,4},{1,2},{3,5},{6,7}}"));
    assert_eq!(all_reduce_to_reduce_scatter(&mut m), Changed::No);
}
