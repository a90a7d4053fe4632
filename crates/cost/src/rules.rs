//! One rule per opcode: what XLA's `HloCostAnalysis` handler charges.

use crate::fusion::fusion_props;
use crate::size::{elements_in, elements_recursive, leaves_size, shape_size};
use crate::{computation_props, Props};
use tpusim_hlo::attr::AttrValue;
use tpusim_hlo::{InstrId, Instruction, Module, Opcode, Shape};

/// Flops of one fused multiply-add.
const FMA_FLOPS: f32 = 2.0;

/// The cost of one instruction, as XLA's Preprocess + handler compute it.
pub(crate) fn instr_props(m: &Module, id: InstrId) -> Props {
    let i = m.instr(id);
    let default_bytes = default_bytes(m, i);
    let mut p = Props {
        bytes: default_bytes,
        ..Props::default()
    };
    use Opcode::*;
    match i.opcode {
        Parameter | Constant | GetTupleElement | Bitcast | AfterAll | AddDependency | Domain => {
            p.bytes = 0.0
        }
        Tuple => p.bytes = shape_size(&i.shape),
        Transpose if crate::geometry::transpose_is_bitcast(m, i) => p.bytes = 0.0,
        // Feeds move every leaf; their token operands and results are free.
        Infeed => p.bytes = leaves_size(&i.shape),
        Outfeed => {
            p.bytes = i
                .operands
                .iter()
                .map(|&o| leaves_size(&m.instr(o).shape))
                .sum()
        }
        Slice => p.bytes = 2.0 * shape_size(&i.shape),
        DynamicSlice => p.bytes = 2.0 * shape_size(&i.shape) + operand_size(m, i, 1),
        DynamicUpdateSlice => p.bytes = 2.0 * operand_size(m, i, 1) + operand_size(m, i, 2),
        Gather => p.bytes = 2.0 * shape_size(&i.shape) + operand_size(m, i, 1),
        Scatter => scatter(m, i, &mut p),
        Dot | ScaledDot => p.flops = dot_flops(m, i, &i.shape),
        RaggedDot => p.flops = ragged_dot_flops(m, i),
        TriangularSolve => triangular_solve(m, i, &mut p),
        Cholesky => cholesky(m, i, &mut p),
        RngBitGenerator => rng_bit_generator(m, i, &mut p),
        Convolution => p.flops = crate::geometry::conv_flops(m, i),
        Fft => p.flops = fft_flops(m, i),
        Sort => p.flops = sort_flops(m, i),
        Rng => p.trans = elements_in(&i.shape) as f32,
        AllReduce | AllReduceStart => all_reduce(m, i, &mut p),
        Reduce => reduce(m, i, &mut p),
        ReduceWindow => reduce_window(m, i, &mut p),
        SelectAndScatter => select_and_scatter(m, i, &mut p),
        Map => map(m, i, &mut p),
        Fusion => p = fusion_props(m, id),
        Call | AsyncStart => p = called(m, i, 0),
        While => p = while_props(m, i),
        Conditional => p = conditional(m, i),
        op if is_elementwise(op) => elementwise(i, &mut p),
        _ => {}
    }
    p
}

/// Preprocess: every operand's size plus the output's size.
fn default_bytes(m: &Module, i: &Instruction) -> f32 {
    let mut b = leaves_size(&i.shape);
    for &op in &i.operands {
        b += shape_size(&m.instr(op).shape);
    }
    b
}

pub(crate) fn operand_size(m: &Module, i: &Instruction, k: usize) -> f32 {
    i.operands
        .get(k)
        .map_or(0.0, |&op| shape_size(&m.instr(op).shape))
}

fn operand_shape<'a>(m: &'a Module, i: &Instruction, k: usize) -> Option<&'a Shape> {
    i.operands.get(k).map(|&op| &m.instr(op).shape)
}

/// Ops XLA sends to `HandleElementwiseOp` (one flop per output element).
fn is_elementwise(op: Opcode) -> bool {
    use tpusim_hlo::OpCategory::*;
    // bitcast-convert is "data movement" to us but elementwise to XLA.
    matches!(op.category(), Unary | Binary | Ternary) || op == Opcode::BitcastConvert
}

/// The jaxlib that recorded the reference counts every transcendental
/// function (including `acos`, `cosh`, `erf`, `tan`, `power`, `atan2`) as a
/// transcendental rather than a flop.
fn xla_transcendental(op: Opcode) -> bool {
    op.is_transcendental()
}

fn elementwise(i: &Instruction, p: &mut Props) {
    let n = elements_in(&i.shape) as f32;
    if xla_transcendental(i.opcode) {
        p.trans = n;
    } else {
        p.flops = n;
    }
}

fn dot_flops(m: &Module, i: &Instruction, result: &Shape) -> f32 {
    let Some(lhs) = operand_shape(m, i, 0) else {
        return 0.0;
    };
    // Products in f64: dims come from the input and can overflow i64.
    let width: f64 = i
        .attr_ints("lhs_contracting_dims")
        .unwrap_or(&[])
        .iter()
        .map(|&d| lhs.dims().get(d as usize).copied().unwrap_or(1) as f64)
        .product();
    FMA_FLOPS * (elements_in(result) as f64 * width) as f32
}

/// XLA drops the *leading* result dimensions, one per rhs group dimension
/// (whatever their position), then prices it as a dot.
fn ragged_dot_flops(m: &Module, i: &Instruction) -> f32 {
    let groups = i.attr_ints("rhs_group_dims").map_or(0, <[i64]>::len);
    let mut result = i.shape.clone();
    if let Shape::Array(a) = &mut result {
        let n = groups.min(a.dims.len());
        a.dims.drain(..n);
    }
    dot_flops(m, i, &result)
}

/// Half of the triangular matrix is read; 2 x n x elements(b) flops.
fn triangular_solve(m: &Module, i: &Instruction, p: &mut Props) {
    p.bytes = shape_size(&i.shape) + operand_size(m, i, 0) / 2.0 + operand_size(m, i, 1);
    let n = operand_shape(m, i, 0).map_or(0, |a| a.dims().last().copied().unwrap_or(0));
    let b = operand_shape(m, i, 1).map_or(0, elements_in);
    p.flops = FMA_FLOPS * (n as f64 * b as f64) as f32;
}

/// Half the matrix read, half written; n^3 / 3 flops per batch (integer
/// division, as XLA).
fn cholesky(m: &Module, i: &Instruction, p: &mut Props) {
    p.bytes = operand_size(m, i, 0);
    let a = operand_shape(m, i, 0);
    let n = a.map_or(0, |a| a.dims().last().copied().unwrap_or(0));
    p.flops = ((i128::from(n) * i128::from(a.map_or(0, elements_in))) / 3) as f32;
}

/// One transcendental per generated element.
fn rng_bit_generator(m: &Module, i: &Instruction, p: &mut Props) {
    p.trans = elements_recursive(&i.shape) as f32;
    let leaves: f32 = i
        .shape
        .leaves()
        .into_iter()
        .map(|a| shape_size(&Shape::Array(a.clone())))
        .sum();
    p.bytes = leaves
        + (0..i.operands.len())
            .map(|k| operand_size(m, i, k))
            .sum::<f32>();
}

fn fft_flops(m: &Module, i: &Instruction) -> f32 {
    let Some(input) = operand_shape(m, i, 0) else {
        return 0.0;
    };
    let log_factors: f64 = i
        .attr_ints("fft_length")
        .unwrap_or(&[])
        .iter()
        .map(|&d| {
            if d > 0 {
                f64::from(63 - d.leading_zeros())
            } else {
                0.0
            }
        })
        .product();
    // Four FMAs per complex multiply.
    FMA_FLOPS * 4.0 * (log_factors * elements_in(input) as f64) as f32
}

fn sort_flops(m: &Module, i: &Instruction) -> f32 {
    let n = operand_shape(m, i, 0).map_or(0, elements_in);
    let log2_ceil = if n <= 1 {
        0
    } else {
        64 - ((n - 1) as u64).leading_zeros() as i64
    };
    (n as f64 * log2_ceil as f64) as f32
}

/// XLA assumes two replicas: one flop per output element.
fn all_reduce(m: &Module, i: &Instruction, p: &mut Props) {
    let leaves = i.shape.leaves();
    let mut out_bytes = 0.0;
    let mut flops = 0.0;
    for a in leaves {
        let s = Shape::Array(a.clone());
        flops += elements_in(&s) as f32;
        out_bytes += shape_size(&s);
    }
    p.flops = flops;
    p.bytes = out_bytes
        + (0..i.operands.len())
            .map(|k| operand_size(m, i, k))
            .sum::<f32>();
}

fn comp_attr(i: &Instruction, name: &str) -> Option<tpusim_hlo::CompId> {
    i.attr_comp(name)
}

fn first_array_shape(s: &Shape) -> &Shape {
    match s {
        Shape::Tuple(t) if !t.is_empty() => &t[0],
        _ => s,
    }
}

fn reduce(m: &Module, i: &Instruction, p: &mut Props) {
    let Some(f) = comp_attr(i, "to_apply") else {
        return;
    };
    let sub = computation_props(m, f);
    let input = operand_shape(m, i, 0).map_or(0, elements_in);
    let count = input - elements_in(first_array_shape(&i.shape));
    set_compute(p, sub.scaled_compute(count as f32));
}

fn reduce_window(m: &Module, i: &Instruction, p: &mut Props) {
    let Some(f) = comp_attr(i, "to_apply") else {
        return;
    };
    let sub = computation_props(m, f);
    let window = match i.attr("window") {
        Some(AttrValue::Window(w)) => w.dims.clone(),
        _ => Vec::new(),
    };
    let win = saturating_product(window.iter().map(|d| d.size));
    let out = elements_in(first_array_shape(&i.shape));
    let count = crate::geometry::reduce_window_count(i, &window, win, out);
    set_compute(p, sub.scaled_compute(count as f32));
}

fn select_and_scatter(m: &Module, i: &Instruction, p: &mut Props) {
    let (Some(sel), Some(sc)) = (comp_attr(i, "select"), comp_attr(i, "scatter")) else {
        return;
    };
    let source = operand_shape(m, i, 1).map_or(0, elements_in);
    let win = match i.attr("window") {
        Some(AttrValue::Window(w)) => saturating_product(w.dims.iter().map(|d| d.size)),
        _ => 1,
    };
    let mut c =
        computation_props(m, sel).scaled_compute((source as f64 * (win as f64 - 1.0)) as f32);
    c.add(computation_props(m, sc).scaled_compute(source as f32));
    set_compute(p, c);
}

/// The product of window sizes from the input, at most `i64::MAX`.
fn saturating_product(xs: impl Iterator<Item = i64>) -> i64 {
    xs.fold(1i64, i64::saturating_mul)
}

fn map(m: &Module, i: &Instruction, p: &mut Props) {
    let Some(f) = comp_attr(i, "to_apply") else {
        return;
    };
    let n = elements_in(&i.shape) as f32;
    set_compute(p, computation_props(m, f).scaled_compute(n));
}

/// Scatter: 3x the updates plus the indices; the combiner per update element.
fn scatter(m: &Module, i: &Instruction, p: &mut Props) {
    let n = i.operands.len().saturating_sub(1) / 2;
    let updates: f32 = (0..n).map(|k| operand_size(m, i, n + 1 + k)).sum();
    p.bytes = 3.0 * updates + operand_size(m, i, n);
    let count = operand_shape(m, i, n + 1).map_or(0, elements_in);
    if let Some(f) = comp_attr(i, "to_apply") {
        set_compute(p, computation_props(m, f).scaled_compute(count as f32));
    }
}

fn set_compute(p: &mut Props, c: Props) {
    p.flops = c.flops;
    p.trans = c.trans;
}

/// `call`/`async-start`: the callee's totals replace the instruction's own.
fn called(m: &Module, i: &Instruction, k: usize) -> Props {
    i.called_computations()
        .get(k)
        .map_or(Props::default(), |&c| computation_props(m, c))
}

fn while_props(m: &Module, i: &Instruction) -> Props {
    let mut p = Props::default();
    if let Some(b) = comp_attr(i, "body") {
        p.add(computation_props(m, b));
    }
    if let Some(c) = comp_attr(i, "condition") {
        p.add(computation_props(m, c));
    }
    p
}

fn conditional(m: &Module, i: &Instruction) -> Props {
    i.called_computations()
        .into_iter()
        .map(|c| computation_props(m, c))
        .reduce(Props::max)
        .unwrap_or_default()
}
