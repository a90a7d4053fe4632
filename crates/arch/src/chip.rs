//! The [`Chip`] description and its derived quantities.
//!
//! The structs mirror the TOML schema one to one (see the crate README for the
//! file format). Figures are **per JAX device** unless a field name or its doc
//! says *per chip*: compute, VMEM and HBM describe one device; ICI, PCIe and
//! DCN belong to the whole chip (a TPU v3 or TPU7x chip carries two devices).

use serde::{Deserialize, Serialize};

use crate::dtype::MatmulDtype;

/// Whether a chip is a TPU or a GPU; selects the `[tpu]` or `[gpu]` table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ChipKind {
    /// A Google TPU: the `[tpu]` table is required.
    Tpu,
    /// An NVIDIA GPU: the `[gpu]` table is required.
    Gpu,
}

/// One accelerator as the simulator sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Chip {
    /// Short lowercase identifier used on the command line (`v5e`, `h100`).
    pub id: String,
    /// Human-readable name (`TPU v5e`).
    pub name: String,
    /// TPU or GPU.
    pub kind: ChipKind,
    /// What one JAX device is on this chip, in words
    /// (e.g. "one v5p chip (megacore: 2 TensorCores sharing HBM)").
    pub device: String,
    /// JAX devices per physical chip: 2 for TPU v2/v3 (one per TensorCore) and
    /// TPU7x (one per chiplet), 1 otherwise.
    pub devices_per_chip: u32,
    /// Core clock in Hz.
    pub clock_hz: f64,
    /// Fixed cost charged per executed op (kernel), in seconds.
    pub op_overhead_s: f64,
    /// TPU TensorCore resources; present exactly when `kind = "tpu"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tpu: Option<TpuCores>,
    /// GPU streaming-multiprocessor resources; present exactly when `kind = "gpu"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<GpuCores>,
    /// The TensorCore timing model's constants (MXU schedule, DMA, launch
    /// costs). Without it a chip is timed by the plain roofline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tensorcore: Option<TensorCoreTiming>,
    /// Peak dense matrix-multiply rates of one device.
    pub matmul: MatmulPeaks,
    /// Peak elementwise (VPU / CUDA-core) rate of one device.
    pub vector: VectorUnit,
    /// HBM of one device.
    pub memory: Memory,
    /// Chip-to-chip interconnect (TPU ICI or NVLink), per chip.
    pub ici: Interconnect,
    /// Host and data-centre network links, per chip.
    pub host: HostLinks,
    /// Settings of the XLA compiler passes tpusim runs for this chip
    /// (combiner thresholds, scheduler limits); absent: those passes are off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compiler: Option<CompilerConfig>,
}

/// Compiler pass settings for one chip (see `tpusim-compile`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CompilerConfig {
    /// Largest combined all-reduce, bytes.
    pub all_reduce_combine_threshold_bytes: u64,
    /// Largest combined all-gather, bytes.
    pub all_gather_combine_threshold_bytes: u64,
    /// Largest combined reduce-scatter, bytes.
    pub reduce_scatter_combine_threshold_bytes: u64,
    /// Most collectives merged into one.
    pub combine_max_count: u32,
    /// Async collectives of one kind in flight at once (latency-hiding scheduler).
    pub collective_overlap_limit: u32,
}

/// The TensorCores behind one TPU device.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TpuCores {
    /// TensorCores driven by one JAX device (2 for megacore v4/v5p).
    pub tensorcores_per_device: u32,
    /// Matrix units (systolic arrays) per TensorCore.
    pub mxus_per_tensorcore: u32,
    /// Edge of one square MXU: 128 or 256.
    pub mxu_dim: u32,
    /// Vector unit sublanes (rows of a vector register).
    pub vpu_sublanes: u32,
    /// Vector unit lanes (columns of a vector register).
    pub vpu_lanes: u32,
    /// ALUs per VPU lane, each doing one f32 op per cycle.
    pub vpu_alus_per_lane: u32,
    /// VMEM (on-core scratchpad) per TensorCore, in bytes.
    pub vmem_bytes_per_tensorcore: u64,
}

/// Constants of the TensorCore timing model (tpusim-perf's `tensorcore`
/// module): how an MXU schedule, the HBM->VMEM DMA pipeline and kernel
/// launches cost time. Each is either a hardware fact with a source or a
/// constant measured from kernel timings (the chip file names the data).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TensorCoreTiming {
    /// Fraction of peak HBM bandwidth a streaming kernel's DMAs reach.
    pub hbm_efficiency: f64,
    /// Cycles to fill and drain a systolic array once per kernel (data
    /// enters at one edge and results leave the other: about 2 x the edge).
    pub mxu_fill_drain_cycles: f64,
    /// Cycles to load one weight tile into an MXU when it cannot be hidden
    /// behind streaming (few LHS rows per tile).
    pub mxu_weight_load_cycles: f64,
    /// Cycles lost per MXU pass (one weight tile times one row block of
    /// `mxu_dim` rows): popping results and accumulating them in VMEM.
    pub mxu_pass_overhead_cycles: f64,
    /// Edge of the square output block a matmul kernel computes per
    /// pipeline step (elements; a multiple of the MXU edge).
    pub matmul_block_edge: u64,
    /// Depth (K elements) of the operand slices one pipeline step loads.
    pub matmul_block_depth: u64,
    /// Fixed device time of one lone kernel (launch, first DMA in, last DMA
    /// out, synchronisation), seconds.
    pub kernel_launch_s: f64,
    /// Device time one program adds once per execution around its kernels
    /// (program start and end), seconds.
    pub program_overhead_s: f64,
    /// Fixed cost of one kernel inside a program, where its prologue and
    /// epilogue overlap its neighbours', seconds.
    pub in_program_kernel_s: f64,
    /// On-chip memory outside the cores that can keep operands between
    /// kernels (CMEM on v4), bytes; 0 when the chip has none.
    pub cmem_bytes: u64,
    /// Read bandwidth of operands served from CMEM, bytes/s (0 without CMEM).
    pub cmem_bandwidth_bytes_per_s: f64,
    /// Vector registers (8 sublanes x 128 lanes of 32-bit words) one core
    /// loads from or stores to VMEM per cycle: the bound of a kernel whose
    /// arrays fill few sublanes of each register.
    pub vreg_moves_per_cycle: f64,
}

/// The streaming multiprocessors of one GPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuCores {
    /// Streaming multiprocessors.
    pub sm_count: u32,
    /// Shared memory (combined L1/SMEM) per SM, in bytes.
    pub smem_bytes_per_sm: u64,
    /// L2 cache, in bytes.
    pub l2_bytes: u64,
}

/// Peak dense matmul throughput of one device per operand type, in FLOP/s
/// (integer types: OP/s). Optional rates are absent when the hardware has no
/// native support; see [`Chip::peak_flops`] for what is charged then.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MatmulPeaks {
    /// Full-precision f32 (XLA `HIGHEST`): on TPUs, six bf16 MXU passes.
    pub f32_flops_per_s: f64,
    /// TensorFloat-32 (GPU tensor cores).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tf32_flops_per_s: Option<f64>,
    /// bfloat16 inputs, f32 accumulation.
    pub bf16_flops_per_s: f64,
    /// IEEE f16 inputs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub f16_flops_per_s: Option<f64>,
    /// 8-bit float inputs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fp8_flops_per_s: Option<f64>,
    /// 8-bit integer inputs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub int8_ops_per_s: Option<f64>,
    /// 4-bit integer inputs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub int4_ops_per_s: Option<f64>,
}

/// Elementwise compute of one device.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VectorUnit {
    /// Peak f32 elementwise rate (VPU on TPUs, CUDA cores on GPUs), FLOP/s,
    /// an FMA counting as 2.
    pub f32_flops_per_s: f64,
}

/// High-bandwidth memory of one device.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Memory {
    /// Capacity in bytes.
    pub hbm_bytes: u64,
    /// Peak bandwidth in bytes/s (reads and writes together).
    pub hbm_bandwidth_bytes_per_s: f64,
}

/// The chip-to-chip network (TPU ICI, GPU NVLink). All figures per chip.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Interconnect {
    /// Name for display (`ICI`, `NVLink 4`).
    pub technology: String,
    /// Links leaving one chip.
    pub links_per_chip: u32,
    /// Bandwidth of one link in one direction, bytes/s.
    pub link_bandwidth_bytes_per_s_per_direction: f64,
    /// Latency added per hop (TPU) or per collective step (GPU), seconds.
    pub hop_latency_s: f64,
    /// How chips are wired together.
    pub topology: Topology,
}

/// How chips are connected.
///
/// In TOML, a flat table with `kind = "torus"` or `kind = "switch"`; it is
/// read through a flat private struct so that errors keep exact positions (serde's
/// internally tagged enums lose them).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", try_from = "RawTopology")]
pub enum Topology {
    /// A mesh of `dims` dimensions whose axes may wrap around (TPUs).
    Torus {
        /// Number of torus dimensions (2 or 3 for TPUs).
        dims: u32,
        /// Which axes of a slice get wraparound links.
        wraparound: Wraparound,
        /// Largest slice (single ICI domain) in chips, one entry per dimension.
        max_slice_shape: Vec<u32>,
        /// Whether `jax.make_mesh` lays a mesh on this chip's slices with
        /// `allow_split_physical_axes` (one physical axis may serve several
        /// mesh axes); `false` when absent.
        jax_mesh_splits_axes: bool,
    },
    /// All chips of a domain behind a switch, one hop apart (NVSwitch).
    Switch {
        /// Chips per switched domain (8 for an HGX node).
        domain_chips: u32,
    },
}

/// Rule deciding which axes of a torus slice have wraparound links.
///
/// In TOML, an inline table such as `{ rule = "full_axis", axis_len = 16 }`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "rule", rename_all = "snake_case", try_from = "RawWraparound")]
pub enum Wraparound {
    /// An axis wraps only when its length equals `axis_len` (v5e/v6e: 16).
    FullAxis {
        /// The axis length that gets a wraparound link.
        axis_len: u32,
    },
    /// Every axis wraps when the slice is built of whole cubes, i.e. every
    /// dimension is a multiple of `cube_edge`; otherwise none does (v4/v5p: 4).
    WholeCubes {
        /// Edge of one cube, in chips.
        cube_edge: u32,
    },
    /// Every axis always wraps.
    Always,
    /// No axis ever wraps (a plain mesh).
    Never,
}

/// `[ici.topology]` exactly as written; checked and converted into [`Topology`].
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTopology {
    kind: TopologyKind,
    dims: Option<u32>,
    wraparound: Option<Wraparound>,
    max_slice_shape: Option<Vec<u32>>,
    jax_mesh_splits_axes: Option<bool>,
    domain_chips: Option<u32>,
}

#[derive(Deserialize)]
#[serde(rename_all = "snake_case")]
enum TopologyKind {
    Torus,
    Switch,
}

impl TryFrom<RawTopology> for Topology {
    type Error = String;

    fn try_from(raw: RawTopology) -> Result<Self, String> {
        match raw.kind {
            TopologyKind::Torus => {
                if raw.domain_chips.is_some() {
                    return Err("`domain_chips` is for `kind = \"switch\"`, not a torus".into());
                }
                let need = |field: &str| {
                    format!("missing field `{field}` (required when `kind = \"torus\"`)")
                };
                Ok(Topology::Torus {
                    dims: raw.dims.ok_or_else(|| need("dims"))?,
                    wraparound: raw.wraparound.ok_or_else(|| need("wraparound"))?,
                    max_slice_shape: raw.max_slice_shape.ok_or_else(|| need("max_slice_shape"))?,
                    jax_mesh_splits_axes: raw.jax_mesh_splits_axes.unwrap_or(false),
                })
            }
            TopologyKind::Switch => {
                if raw.dims.is_some()
                    || raw.wraparound.is_some()
                    || raw.max_slice_shape.is_some()
                    || raw.jax_mesh_splits_axes.is_some()
                {
                    return Err("`dims`, `wraparound`, `max_slice_shape` and `jax_mesh_splits_axes` are for `kind = \"torus\"`, not a switch".into());
                }
                Ok(Topology::Switch {
                    domain_chips: raw.domain_chips.ok_or(
                        "missing field `domain_chips` (required when `kind = \"switch\"`)",
                    )?,
                })
            }
        }
    }
}

/// `wraparound = { ... }` exactly as written; checked and converted into [`Wraparound`].
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWraparound {
    rule: WrapRule,
    axis_len: Option<u32>,
    cube_edge: Option<u32>,
}

#[derive(Deserialize)]
#[serde(rename_all = "snake_case")]
enum WrapRule {
    FullAxis,
    WholeCubes,
    Always,
    Never,
}

impl TryFrom<RawWraparound> for Wraparound {
    type Error = String;

    fn try_from(raw: RawWraparound) -> Result<Self, String> {
        let (rule, wanted) = match raw.rule {
            WrapRule::FullAxis => ("full_axis", Some("axis_len")),
            WrapRule::WholeCubes => ("whole_cubes", Some("cube_edge")),
            WrapRule::Always => ("always", None),
            WrapRule::Never => ("never", None),
        };
        for (field, present) in [
            ("axis_len", raw.axis_len.is_some()),
            ("cube_edge", raw.cube_edge.is_some()),
        ] {
            if present && wanted != Some(field) {
                return Err(format!(
                    "`{field}` does not apply to wraparound rule `{rule}`"
                ));
            }
        }
        let need =
            |field: &str| format!("missing field `{field}` (required by wraparound rule `{rule}`)");
        Ok(match raw.rule {
            WrapRule::FullAxis => Wraparound::FullAxis {
                axis_len: raw.axis_len.ok_or_else(|| need("axis_len"))?,
            },
            WrapRule::WholeCubes => Wraparound::WholeCubes {
                cube_edge: raw.cube_edge.ok_or_else(|| need("cube_edge"))?,
            },
            WrapRule::Always => Wraparound::Always,
            WrapRule::Never => Wraparound::Never,
        })
    }
}

/// Links from a chip to its host and to the data-centre network, per chip.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostLinks {
    /// Host PCIe bandwidth in one direction, bytes/s.
    pub pcie_bytes_per_s_per_direction: f64,
    /// Data-centre network (DCN) bandwidth in one direction, bytes/s: the
    /// NIC line rate's share per chip.
    pub dcn_bytes_per_s_per_direction: f64,
    /// The fraction of `dcn_bytes_per_s_per_direction` that XLA's
    /// collectives across slices achieve.
    pub dcn_efficiency: f64,
    /// Latency of one transfer across the data-centre network, seconds.
    pub dcn_latency_s: f64,
}

impl Chip {
    /// Native peak rate for `dtype`, or `None` when the chip has none.
    pub fn native_peak_flops(&self, dtype: MatmulDtype) -> Option<f64> {
        let m = &self.matmul;
        match dtype {
            MatmulDtype::F32 => Some(m.f32_flops_per_s),
            MatmulDtype::Tf32 => m.tf32_flops_per_s,
            MatmulDtype::Bf16 => Some(m.bf16_flops_per_s),
            MatmulDtype::F16 => m.f16_flops_per_s,
            MatmulDtype::Fp8 => m.fp8_flops_per_s,
            MatmulDtype::Int8 => m.int8_ops_per_s,
            MatmulDtype::Int4 => m.int4_ops_per_s,
        }
    }

    /// Peak matmul rate of one device for `dtype`, in FLOP/s (OP/s for ints).
    /// Without a native rate the chip is charged the rate of the type XLA
    /// widens to ([`MatmulDtype::fallback`]): fp8 and int8 on a chip without
    /// them run at the bf16 rate, TF32 on a TPU at the f32 rate.
    pub fn peak_flops(&self, dtype: MatmulDtype) -> f64 {
        let mut d = dtype;
        loop {
            if let Some(rate) = self.native_peak_flops(d) {
                return rate;
            }
            match d.fallback() {
                Some(next) => d = next,
                // Unreachable: f32 and bf16 always have a rate.
                None => return self.matmul.bf16_flops_per_s,
            }
        }
    }

    /// Roofline ridge point against HBM: `peak_flops(dtype) / HBM bandwidth`,
    /// in FLOP per byte. Ops below this arithmetic intensity are memory-bound.
    pub fn ridge_point_flops_per_byte(&self, dtype: MatmulDtype) -> f64 {
        self.peak_flops(dtype) / self.memory.hbm_bandwidth_bytes_per_s
    }

    /// Edge of one MXU (128 or 256); `None` on GPUs.
    pub fn mxu_dim(&self) -> Option<u32> {
        self.tpu.as_ref().map(|t| t.mxu_dim)
    }

    /// TensorCores behind one device; `None` on GPUs.
    pub fn tensorcores_per_device(&self) -> Option<u32> {
        self.tpu.as_ref().map(|t| t.tensorcores_per_device)
    }

    /// MXUs behind one device; `None` on GPUs.
    pub fn mxus_per_device(&self) -> Option<u32> {
        self.tpu
            .as_ref()
            .map(|t| t.tensorcores_per_device * t.mxus_per_tensorcore)
    }

    /// VMEM available to one device (all its TensorCores), bytes; `None` on GPUs.
    pub fn vmem_bytes_per_device(&self) -> Option<u64> {
        self.tpu
            .as_ref()
            .map(|t| u64::from(t.tensorcores_per_device) * t.vmem_bytes_per_tensorcore)
    }

    /// Total one-direction interconnect bandwidth leaving a chip, bytes/s.
    pub fn ici_bandwidth_bytes_per_s_per_direction_per_chip(&self) -> f64 {
        f64::from(self.ici.links_per_chip) * self.ici.link_bandwidth_bytes_per_s_per_direction
    }

    /// Chips in the largest single slice (ICI / NVLink domain).
    pub fn max_slice_chips(&self) -> u64 {
        match &self.ici.topology {
            Topology::Torus {
                max_slice_shape, ..
            } => max_slice_shape.iter().map(|&d| u64::from(d)).product(),
            Topology::Switch { domain_chips } => u64::from(*domain_chips),
        }
    }
}

impl Topology {
    /// Whether `axis` of a slice of shape `slice_shape` (chips per dimension)
    /// has a wraparound link. Always `false` for a switch and for an axis
    /// index outside the shape.
    pub fn axis_wraps(&self, slice_shape: &[u32], axis: usize) -> bool {
        let Topology::Torus { wraparound, .. } = self else {
            return false;
        };
        let Some(&len) = slice_shape.get(axis) else {
            return false;
        };
        match wraparound {
            Wraparound::FullAxis { axis_len } => len == *axis_len,
            Wraparound::WholeCubes { cube_edge } => {
                slice_shape.iter().all(|&d| d > 0 && d % cube_edge == 0)
            }
            Wraparound::Always => true,
            Wraparound::Never => false,
        }
    }
}
