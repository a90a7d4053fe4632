//! Time of one executed op (a kernel: a fusion or a single unfused
//! instruction) on one device, from the roofline of its three resources.

use serde::{Deserialize, Serialize};
use tpusim_arch::{Chip, ChipKind, MatmulDtype};
use tpusim_hlo::attr::AttrValue;
use tpusim_hlo::{InstrId, Instruction, Module, Opcode, PrimitiveType, Shape};

use crate::tensorcore::{kernel_time, KernelExplain, KernelInputs, TimingContext};

/// The resource that sets an op's time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Bound {
    /// Matrix units (MXU / tensor cores).
    Mxu,
    /// Vector unit (elementwise, reductions, transcendentals).
    Vpu,
    /// HBM bandwidth.
    Hbm,
    /// The fixed per-op cost exceeds every resource time.
    Overhead,
    /// The interconnect (a collective priced by a network model).
    Network,
}

impl Bound {
    pub fn name(self) -> &'static str {
        match self {
            Bound::Mxu => "mxu",
            Bound::Vpu => "vpu",
            Bound::Hbm => "hbm",
            Bound::Overhead => "overhead",
            Bound::Network => "network",
        }
    }
}

/// Sublanes of the TPU vector registers the MXU reads its streamed (row)
/// operand from: the row count of a matmul is padded to a multiple of this.
pub const SUBLANES: u64 = 8;

/// `dim` rounded up to a multiple of `tile` (`tile == 0` means no padding).
pub fn padded_dim(dim: u64, tile: u64) -> u64 {
    if tile == 0 {
        dim
    } else {
        dim.div_ceil(tile) * tile
    }
}

/// The matmul shape and rate class of one dot or convolution.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MatmulInfo {
    /// Rate class the MXU runs at (`bf16` for an f32 dot at DEFAULT precision).
    pub dtype: MatmulDtype,
    /// bf16 passes per product: 1, or 3 (HIGH) / 6 (HIGHEST) for f32 on TPUs.
    pub passes: u32,
    /// Batch, rows (M), contracting (K) and output columns (N), flattened.
    pub batch: u64,
    pub m: u64,
    pub k: u64,
    pub n: u64,
    /// Useful flops (2·B·M·K·N, or XLA's convolution flops).
    pub flops: f64,
    /// Flops the MXU actually issues: padded shape, times `passes`.
    pub issued_flops: f64,
    /// `(dim, padded)` for every dimension the MXU tiles pad.
    pub padded_dims: Vec<(u64, u64)>,
    /// Fraction of MXU work spent on padding: `1 - flops·passes / issued`.
    pub padding_waste: f64,
}

/// The time of one execution of an op.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct OpTime {
    pub flops: f64,
    pub transcendentals: f64,
    pub bytes_accessed: f64,
    pub mxu_s: f64,
    pub vpu_s: f64,
    pub hbm_s: f64,
    pub overhead_s: f64,
    /// `max(mxu, vpu, hbm) + overhead`.
    pub time_s: f64,
    pub bound: Option<Bound>,
    /// The largest dot/convolution of the op, if any.
    pub matmul: Option<MatmulInfo>,
    /// Useful matmul flops of every dot/convolution in the op, by rate class.
    pub matmul_flops: Vec<(MatmulDtype, f64)>,
}

/// VPU flops charged per transcendental (exp, log, tanh, rsqrt, ...).
///
/// TPUs evaluate transcendentals on the EUP, which returns one result per
/// lane per cycle, while the VPU retires `vpu_alus_per_lane` f32 ops per lane
/// per cycle; so one transcendental occupies a lane as long as
/// `vpu_alus_per_lane` ordinary ops (4 on every TPU generation we model).
/// GPUs run them on the SFUs: 16 per SM per clock against 128 FP32 lanes, so
/// one costs 8 FP32 ops of CUDA-core throughput.
pub fn transcendental_cost(chip: &Chip) -> f64 {
    match (&chip.kind, &chip.tpu) {
        (ChipKind::Tpu, Some(t)) => f64::from(t.vpu_alus_per_lane.max(1)),
        _ => 8.0,
    }
}

/// Ops that never run as a kernel: they only name or forward buffers.
pub fn is_free(op: Opcode) -> bool {
    use Opcode::*;
    matches!(
        op,
        Parameter
            | Constant
            | Tuple
            | GetTupleElement
            | Bitcast
            | AfterAll
            | AddDependency
            | Domain
            | OptBarrier
            | PartitionId
            | ReplicaId
            | GetDimensionSize
            | AsyncUpdate
            | AsyncDone
            | AllGatherDone
            | AllReduceDone
            | CollectivePermuteDone
            | CopyDone
            | SendDone
            | RecvDone
    )
}

/// Whether instruction `id` runs no kernel: a free opcode ([`is_free`]), or a
/// reshape that is a bitcast under TPU tiled layouts ([`reshape_is_bitcast`]).
pub fn is_free_instr(m: &Module, id: InstrId) -> bool {
    let ins = m.instr(id);
    is_free(ins.opcode) || (ins.opcode == Opcode::Reshape && reshape_is_bitcast(m, id))
}

/// Whether a reshape leaves every element where it was in the TPU's tiled
/// layout (tiles of [`SUBLANES`] rows by the minor dimension), so XLA makes
/// it a bitcast: dimensions of size 1 only added or dropped, or the minor
/// dimension kept while major dimensions merge or split with both
/// second-minor dimensions a multiple of the tile's rows (whole tiles keep
/// their order). Layouts are the default ones XLA:TPU starts from.
pub fn reshape_is_bitcast(m: &Module, id: InstrId) -> bool {
    let ins = m.instr(id);
    let (Some(out), Some(&o)) = (ins.shape.as_array(), ins.operands.first()) else {
        return false;
    };
    let Some(src) = m.instr(o).shape.as_array() else {
        return false;
    };
    let big = |d: &[i64]| -> Vec<i64> { d.iter().copied().filter(|&x| x != 1).collect() };
    let (a, b) = (big(&src.dims), big(&out.dims));
    if a == b {
        return true;
    }
    let rows = SUBLANES as i64;
    match (a.as_slice(), b.as_slice()) {
        ([.., ra, ca], [.., rb, cb]) => ca == cb && ra % rows == 0 && rb % rows == 0,
        _ => false,
    }
}

/// Time of one execution of instruction `id` (a fusion, a dot, an
/// elementwise op...). Control flow (while, call, conditional) is handled by
/// the program walk, not here.
pub fn op_time(m: &Module, chip: &Chip, id: InstrId) -> OpTime {
    op_time_in(m, chip, id, TimingContext::default())
}

/// Time of one execution of `id` in context `ctx` (a lone kernel or one
/// inside a program; cold or warm operands). Chips with a `[tensorcore]`
/// table use the TensorCore model ([`crate::tensorcore`]), others the roofline.
pub fn op_time_in(m: &Module, chip: &Chip, id: InstrId, ctx: TimingContext) -> OpTime {
    let cost = tpusim_cost::instruction_cost(m, id);
    let mut matmuls = Vec::new();
    collect_matmuls(m, chip, id, &mut matmuls, 0);
    if let Some(e) = explain_in(m, chip, id, ctx) {
        return from_kernel(cost, matmuls, e);
    }
    // Folds from +0.0: an empty float `sum()` is -0.0.
    let mxu_useful = matmuls.iter().fold(0.0, |t, x| t + x.flops);
    let mxu_s = matmuls
        .iter()
        .fold(0.0, |t, x| t + x.issued_flops / mxu_rate(chip, x.dtype));
    let vector_flops = (cost.flops - mxu_useful).max(0.0);
    let vpu_s = (vector_flops + cost.transcendentals * transcendental_cost(chip))
        / chip.vector.f32_flops_per_s;
    let hbm_s = cost.bytes_accessed / chip.memory.hbm_bandwidth_bytes_per_s;
    let overhead_s = chip.op_overhead_s;
    let busiest = mxu_s.max(vpu_s).max(hbm_s);
    let bound = if overhead_s > busiest {
        Bound::Overhead
    } else if busiest == mxu_s {
        Bound::Mxu
    } else if busiest == hbm_s {
        Bound::Hbm
    } else {
        Bound::Vpu
    };
    let mut matmul_flops: Vec<(MatmulDtype, f64)> = Vec::new();
    for x in &matmuls {
        match matmul_flops.iter_mut().find(|(d, _)| *d == x.dtype) {
            Some((_, f)) => *f += x.flops,
            None => matmul_flops.push((x.dtype, x.flops)),
        }
    }
    OpTime {
        flops: cost.flops,
        transcendentals: cost.transcendentals,
        bytes_accessed: cost.bytes_accessed,
        mxu_s,
        vpu_s,
        hbm_s,
        overhead_s,
        time_s: busiest + overhead_s,
        bound: Some(bound),
        matmul: matmuls
            .into_iter()
            .max_by(|a, b| a.issued_flops.total_cmp(&b.issued_flops)),
        matmul_flops,
    }
}

/// The TensorCore model's account of `id`, when the chip has one.
pub fn explain_in(
    m: &Module,
    chip: &Chip,
    id: InstrId,
    ctx: TimingContext,
) -> Option<KernelExplain> {
    let tc = chip
        .tensorcore
        .as_ref()
        .filter(|_| chip.kind == ChipKind::Tpu)?;
    let cost = tpusim_cost::instruction_cost(m, id);
    let mut matmuls = Vec::new();
    collect_matmuls(m, chip, id, &mut matmuls, 0);
    let mxu_useful = matmuls.iter().fold(0.0, |t, x| t + x.flops);
    let inputs = KernelInputs {
        matmuls: &matmuls,
        vector_flops: (cost.flops - mxu_useful).max(0.0),
        transcendentals: cost.transcendentals,
        vector_flops_per_s: chip.vector.f32_flops_per_s,
        transcendental_cost: transcendental_cost(chip),
    };
    Some(kernel_time(m, chip, tc, id, &inputs, ctx))
}

/// An [`OpTime`] from the TensorCore model's account of a kernel.
fn from_kernel(cost: tpusim_cost::InstrCost, matmuls: Vec<MatmulInfo>, e: KernelExplain) -> OpTime {
    let mxu_s = e.mxu_s;
    // The vector unit's busiest part: its ALUs, the XLU or its load/store slots.
    let vpu_s = e.vpu_s.max(e.xlu_s).max(e.vreg_s);
    let hbm_s = e.dma_s;
    // The busiest unit over the whole kernel (a kernel of one tile per core
    // runs its DMA unoverlapped, but its DMA is still what it waits on).
    let busiest = mxu_s.max(vpu_s).max(e.dma_s);
    let bound = if e.fixed_s > busiest {
        Bound::Overhead
    } else if busiest == mxu_s {
        Bound::Mxu
    } else if busiest == e.dma_s {
        Bound::Hbm
    } else {
        Bound::Vpu
    };
    let mut matmul_flops: Vec<(MatmulDtype, f64)> = Vec::new();
    for x in &matmuls {
        match matmul_flops.iter_mut().find(|(d, _)| *d == x.dtype) {
            Some((_, f)) => *f += x.flops,
            None => matmul_flops.push((x.dtype, x.flops)),
        }
    }
    let (flops, transcendentals) = match e.estimate {
        Some((f, t, _)) => (cost.flops.max(f), cost.transcendentals.max(t)),
        None => (cost.flops, cost.transcendentals),
    };
    OpTime {
        flops,
        transcendentals,
        bytes_accessed: e.bytes_in + e.bytes_out,
        mxu_s,
        vpu_s,
        hbm_s,
        overhead_s: e.fixed_s,
        time_s: e.time_s,
        bound: Some(bound),
        matmul: matmuls
            .into_iter()
            .max_by(|a, b| a.issued_flops.total_cmp(&b.issued_flops)),
        matmul_flops,
    }
}

/// Rate of one bf16-equivalent pass for `dtype`. On TPUs f32 work is
/// expressed as bf16 passes, so the f32 class is charged the bf16 rate per
/// pass; elsewhere each class has its own peak.
fn mxu_rate(chip: &Chip, dtype: MatmulDtype) -> f64 {
    chip.peak_flops(dtype)
}

/// Dots and convolutions executed by `id`, fused ones included.
fn collect_matmuls(m: &Module, chip: &Chip, id: InstrId, out: &mut Vec<MatmulInfo>, depth: u32) {
    let ins = m.instr(id);
    match ins.opcode {
        Opcode::Dot | Opcode::ScaledDot | Opcode::RaggedDot => {
            if let Some(x) = dot_info(m, chip, id) {
                out.push(x);
            }
        }
        Opcode::Convolution => {
            if let Some(x) = conv_info(m, chip, id) {
                out.push(x);
            }
        }
        Opcode::Fusion if depth < 16 => {
            for c in ins.called_computations() {
                for &j in &m.comp(c).instrs {
                    collect_matmuls(m, chip, j, out, depth + 1);
                }
            }
        }
        _ => {}
    }
}

fn element_type(m: &Module, ins: &Instruction, k: usize) -> Option<PrimitiveType> {
    ins.operands
        .get(k)
        .and_then(|&o| m.instr(o).shape.element_type())
}

/// Rate class and pass count of a product of the two operand types.
///
/// f32 (and wider) operands run on TPUs as bf16 passes chosen by
/// `operand_precision`: DEFAULT = 1 pass, HIGH = 3 (bf16x3), HIGHEST = 6
/// (bf16x6). On GPUs DEFAULT/HIGH use TF32 tensor cores and HIGHEST the f32
/// rate. Otherwise the slowest operand type sets the rate (bf16 x int8 runs
/// at the bf16 rate).
fn rate_class(m: &Module, chip: &Chip, ins: &Instruction) -> (MatmulDtype, u32) {
    let types: Vec<Option<MatmulDtype>> = (0..2)
        .map(|k| element_type(m, ins, k).and_then(|t| MatmulDtype::from_hlo_name(t.name())))
        .collect();
    let wide = types
        .iter()
        .any(|t| matches!(t, None | Some(MatmulDtype::F32)));
    if wide {
        let precision = match ins.attr("operand_precision") {
            Some(AttrValue::Idents(v)) => v
                .iter()
                .map(|p| match p.as_str() {
                    "highest" => 2,
                    "high" => 1,
                    _ => 0,
                })
                .max()
                .unwrap_or(0),
            _ => 0,
        };
        return match chip.kind {
            ChipKind::Tpu => (
                MatmulDtype::Bf16,
                match precision {
                    0 => 1,
                    1 => 3,
                    _ => 6,
                },
            ),
            ChipKind::Gpu => (
                if precision == 2 {
                    MatmulDtype::F32
                } else {
                    MatmulDtype::Tf32
                },
                1,
            ),
        };
    }
    let dtype = types
        .into_iter()
        .flatten()
        .min_by(|a, b| chip.peak_flops(*a).total_cmp(&chip.peak_flops(*b)))
        .unwrap_or(MatmulDtype::Bf16);
    (dtype, 1)
}

/// Padding the matrix unit imposes: rows to the sublane count, contracting
/// and output columns to the MXU edge (a 1000-wide dim costs as 1024 on both
/// 128x128 and 256x256 MXUs; 1100 as 1152 and 1280). GPUs: none modelled.
fn tiles(chip: &Chip) -> (u64, u64) {
    match chip.mxu_dim() {
        Some(d) => (SUBLANES, u64::from(d)),
        None => (0, 0),
    }
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn matmul_info(
    chip: &Chip,
    dtype: MatmulDtype,
    passes: u32,
    batch: u64,
    m: u64,
    k: u64,
    n: u64,
    flops: f64,
) -> MatmulInfo {
    let (row_tile, mxu) = tiles(chip);
    let (pm, pk, pn) = (
        padded_dim(m, row_tile),
        padded_dim(k, mxu),
        padded_dim(n, mxu),
    );
    let ratio = if m * k * n == 0 {
        1.0
    } else {
        (pm as f64 / m as f64) * (pk as f64 / k as f64) * (pn as f64 / n as f64)
    };
    let issued_flops = flops * ratio * f64::from(passes);
    let padded_dims = [(m, pm), (k, pk), (n, pn)]
        .into_iter()
        .filter(|(a, b)| a != b)
        .collect();
    MatmulInfo {
        dtype,
        passes,
        batch,
        m,
        k,
        n,
        flops,
        issued_flops,
        padded_dims,
        padding_waste: if issued_flops > 0.0 {
            1.0 - flops * f64::from(passes) / issued_flops
        } else {
            0.0
        },
    }
}

fn dims_product(dims: &[i64], which: impl Fn(usize) -> bool) -> u64 {
    dims.iter()
        .enumerate()
        .filter(|(i, _)| which(*i))
        .map(|(_, &d)| d.max(0) as u64)
        .product()
}

fn dot_info(m: &Module, chip: &Chip, id: InstrId) -> Option<MatmulInfo> {
    let ins = m.instr(id);
    let lhs = &m.instr(*ins.operands.first()?).shape;
    let rhs = &m.instr(*ins.operands.get(1)?).shape;
    let ints = |name: &str| -> Vec<usize> {
        ins.attr_ints(name)
            .unwrap_or(&[])
            .iter()
            .map(|&d| d as usize)
            .collect()
    };
    let (lc, lb, rc, rb) = (
        ints("lhs_contracting_dims"),
        ints("lhs_batch_dims"),
        ints("rhs_contracting_dims"),
        ints("rhs_batch_dims"),
    );
    let batch = dims_product(lhs.dims(), |i| lb.contains(&i));
    let k = dims_product(lhs.dims(), |i| lc.contains(&i));
    let mm = dims_product(lhs.dims(), |i| !lb.contains(&i) && !lc.contains(&i));
    let n = dims_product(rhs.dims(), |i| !rb.contains(&i) && !rc.contains(&i));
    let flops = match ins.opcode {
        Opcode::Dot => 2.0 * (batch * mm * k * n) as f64,
        _ => tpusim_cost::instruction_cost(m, id).flops,
    };
    let (dtype, passes) = rate_class(m, chip, ins);
    Some(matmul_info(chip, dtype, passes, batch, mm, k, n, flops))
}

fn conv_info(m: &Module, chip: &Chip, id: InstrId) -> Option<MatmulInfo> {
    let ins = m.instr(id);
    let Some(AttrValue::DimLabels(dn)) = ins.attr("dim_labels") else {
        return None;
    };
    let lhs: &Shape = &m.instr(*ins.operands.first()?).shape;
    let dim = |s: &[i64], d: i64| s.get(d as usize).copied().unwrap_or(1).max(1) as u64;
    let fgc = ins.attr_int("feature_group_count").unwrap_or(1).max(1) as u64;
    // On the MXU a convolution contracts input features (per kernel
    // position) into output features; rows are output positions.
    let k = (dim(lhs.dims(), dn.input_feature) / fgc).max(1);
    let n = dim(ins.shape.dims(), dn.output_feature);
    let flops = tpusim_cost::instruction_cost(m, id).flops;
    let mm = if k * n > 0 {
        (flops / 2.0 / (k * n) as f64).round().max(1.0) as u64
    } else {
        1
    };
    let (dtype, passes) = rate_class(m, chip, ins);
    Some(matmul_info(chip, dtype, passes, 1, mm, k, n, flops))
}
