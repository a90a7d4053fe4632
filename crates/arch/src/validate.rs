//! Semantic checks on a deserialized [`Chip`]: positive numbers, plausible
//! units, allowed MXU sizes, and consistency between related fields.
//!
//! The bounds here are schema rules (what a sane file in the documented units
//! looks like), not hardware figures; those live only in the chip files.

use crate::chip::{Chip, ChipKind, TensorCoreTiming, Topology, Wraparound};
use crate::error::ArchError;
use crate::span;

/// MXU edges the simulator models.
const MXU_DIMS: [u32; 2] = [128, 256];
/// Torus dimensionalities accepted.
const TORUS_DIMS: std::ops::RangeInclusive<u32> = 1..=3;
/// Relative mismatch allowed between a published peak and the same peak
/// recomputed from unit counts and clock (published figures are rounded).
const CONSISTENCY_TOLERANCE: f64 = 0.10;
/// Rates below this are surely written in the wrong unit (TFLOP/s, GB/s).
const MIN_RATE_PER_S: f64 = 1e6;
/// Clock bounds in Hz: outside them the value was surely written in GHz or MHz.
const CLOCK_HZ_RANGE: (f64, f64) = (1e7, 1e11);
/// Latencies above this (seconds) were surely written in µs or ns.
const MAX_LATENCY_S: f64 = 1e-3;
/// Capacities below this were surely written in GB or MiB.
const MIN_CAPACITY_BYTES: u64 = 1 << 10;

pub(crate) fn validate(chip: &Chip, text: &str, origin: &str) -> Result<(), ArchError> {
    let v = Validator { text, origin };
    v.identity(chip)?;
    v.clock_and_overhead(chip)?;
    v.cores(chip)?;
    v.matmul(chip)?;
    v.memory(chip)?;
    v.tensorcore(chip)?;
    v.interconnect(chip)?;
    v.host(chip)
}

struct Validator<'a> {
    text: &'a str,
    origin: &'a str,
}

type Check = Result<(), ArchError>;

impl Validator<'_> {
    fn fail(&self, field: &str, reason: impl Into<String>) -> ArchError {
        let path: Vec<&str> = field.split('.').collect();
        let location =
            span::value_span(self.text, &path).map(|r| span::location(self.text, r.start));
        ArchError::Invalid {
            origin: self.origin.to_string(),
            location,
            field: field.to_string(),
            reason: reason.into(),
        }
    }

    fn rate(&self, field: &str, value: f64, unit: &str) -> Check {
        if !(value.is_finite() && value > 0.0) {
            return Err(self.fail(
                field,
                format!("must be a positive number of {unit}, got {value}"),
            ));
        }
        if value < MIN_RATE_PER_S {
            return Err(self.fail(
                field,
                format!("{value} {unit} is implausibly small; write plain {unit} (e.g. 1.97e14, not 197)"),
            ));
        }
        Ok(())
    }

    fn count(&self, field: &str, value: u64) -> Check {
        if value == 0 {
            return Err(self.fail(field, "must be at least 1"));
        }
        Ok(())
    }

    fn bytes(&self, field: &str, value: u64) -> Check {
        if value < MIN_CAPACITY_BYTES {
            return Err(self.fail(
                field,
                format!("{value} bytes is implausibly small; write plain bytes (e.g. 16_000_000_000, not 16)"),
            ));
        }
        Ok(())
    }

    fn tensorcore(&self, chip: &Chip) -> Check {
        let Some(t) = &chip.tensorcore else {
            return Ok(());
        };
        if !(t.hbm_efficiency > 0.0 && t.hbm_efficiency <= 1.0) {
            return Err(self.fail(
                "tensorcore.hbm_efficiency",
                format!("must be a fraction in (0, 1], got {}", t.hbm_efficiency),
            ));
        }
        for (field, cycles) in [
            ("tensorcore.mxu_fill_drain_cycles", t.mxu_fill_drain_cycles),
            (
                "tensorcore.mxu_weight_load_cycles",
                t.mxu_weight_load_cycles,
            ),
            (
                "tensorcore.mxu_pass_overhead_cycles",
                t.mxu_pass_overhead_cycles,
            ),
        ] {
            if !(cycles.is_finite() && (0.0..=1e6).contains(&cycles)) {
                return Err(self.fail(field, format!("must be 0..1e6 cycles, got {cycles}")));
            }
        }
        self.matmul_block(chip, t)?;
        self.latency("tensorcore.kernel_launch_s", t.kernel_launch_s)?;
        self.latency("tensorcore.program_overhead_s", t.program_overhead_s)?;
        self.latency("tensorcore.in_program_kernel_s", t.in_program_kernel_s)?;
        let moves = t.vreg_moves_per_cycle;
        if !(moves.is_finite() && moves > 0.0 && moves <= 64.0) {
            return Err(self.fail(
                "tensorcore.vreg_moves_per_cycle",
                format!("must be more than 0 and at most 64 registers per cycle, got {moves}"),
            ));
        }
        if t.cmem_bytes > 0 {
            self.rate(
                "tensorcore.cmem_bandwidth_bytes_per_s",
                t.cmem_bandwidth_bytes_per_s,
                "bytes/s",
            )?;
        }
        Ok(())
    }

    /// A matmul block is whole MXU tiles, and a double-buffered step (bf16
    /// operand slices and the f32 output block) fits in one core's VMEM.
    fn matmul_block(&self, chip: &Chip, t: &TensorCoreTiming) -> Check {
        let mxu = u64::from(chip.mxu_dim().unwrap_or(128)).max(1);
        for (field, n) in [
            ("tensorcore.matmul_block_edge", t.matmul_block_edge),
            ("tensorcore.matmul_block_depth", t.matmul_block_depth),
        ] {
            if n == 0 || n % mxu != 0 || n > 1 << 16 {
                return Err(self.fail(
                    field,
                    format!(
                        "must be a positive multiple of the MXU edge ({mxu}) up to 65536, got {n}"
                    ),
                ));
            }
        }
        let (edge, depth) = (t.matmul_block_edge, t.matmul_block_depth);
        let step = 2 * (2 * edge * depth * 2 + edge * edge * 4);
        let vmem = chip
            .tpu
            .as_ref()
            .map_or(u64::MAX, |c| c.vmem_bytes_per_tensorcore);
        if step > vmem {
            return Err(self.fail(
                "tensorcore.matmul_block_edge",
                format!(
                    "a double-buffered {edge}x{edge} block of depth {depth} needs {step} bytes of \
                     VMEM; the core has {vmem}"
                ),
            ));
        }
        Ok(())
    }

    fn latency(&self, field: &str, value: f64) -> Check {
        if !(value.is_finite() && value >= 0.0) {
            return Err(self.fail(
                field,
                format!("must be a non-negative number of seconds, got {value}"),
            ));
        }
        if value > MAX_LATENCY_S {
            return Err(self.fail(
                field,
                format!("{value} s is implausibly large; write seconds (e.g. 1.0e-6 for 1 µs)"),
            ));
        }
        Ok(())
    }

    /// `a <= b` (with a little slack for rounding), else an error on `field`.
    fn not_above(&self, field: &str, a: (&str, f64), b: (&str, f64)) -> Check {
        if a.1 > b.1 * (1.0 + 1e-9) {
            return Err(self.fail(
                field,
                format!("{} = {:e} exceeds {} = {:e}", a.0, a.1, b.0, b.1),
            ));
        }
        Ok(())
    }

    fn consistent(&self, field: &str, published: f64, recomputed: f64, formula: String) -> Check {
        let mismatch = (published / recomputed - 1.0).abs();
        if mismatch > CONSISTENCY_TOLERANCE {
            return Err(self.fail(
                field,
                format!(
                    "{published:e} disagrees with {formula} = {recomputed:e} by {:.0} % (at most {:.0} % allowed)",
                    mismatch * 100.0,
                    CONSISTENCY_TOLERANCE * 100.0
                ),
            ));
        }
        Ok(())
    }

    fn identity(&self, chip: &Chip) -> Check {
        let id_ok = !chip.id.is_empty()
            && chip
                .id
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "-_.".contains(c));
        if !id_ok {
            return Err(self.fail(
                "id",
                format!(
                    "`{}` must be non-empty lowercase letters, digits, `-`, `_` or `.`",
                    chip.id
                ),
            ));
        }
        for (field, value) in [
            ("name", &chip.name),
            ("device", &chip.device),
            ("ici.technology", &chip.ici.technology),
        ] {
            if value.trim().is_empty() {
                return Err(self.fail(field, "must not be empty"));
            }
        }
        self.count("devices_per_chip", chip.devices_per_chip.into())
    }

    fn clock_and_overhead(&self, chip: &Chip) -> Check {
        let (lo, hi) = CLOCK_HZ_RANGE;
        if !(chip.clock_hz.is_finite() && chip.clock_hz >= lo && chip.clock_hz <= hi) {
            return Err(self.fail(
                "clock_hz",
                format!(
                    "{} Hz is outside {lo:e}..{hi:e}; write Hz (e.g. 1.5e9 for 1.5 GHz)",
                    chip.clock_hz
                ),
            ));
        }
        self.latency("op_overhead_s", chip.op_overhead_s)
    }

    fn cores(&self, chip: &Chip) -> Check {
        match (chip.kind, &chip.tpu, &chip.gpu) {
            (ChipKind::Tpu, None, _) => {
                return Err(self.fail("kind", "`kind = \"tpu\"` needs a [tpu] table"))
            }
            (ChipKind::Gpu, _, None) => {
                return Err(self.fail("kind", "`kind = \"gpu\"` needs a [gpu] table"))
            }
            (ChipKind::Tpu, _, Some(_)) => {
                return Err(self.fail(
                    "gpu",
                    "a TPU (`kind = \"tpu\"`) must not have a [gpu] table",
                ))
            }
            (ChipKind::Gpu, Some(_), _) => {
                return Err(self.fail(
                    "tpu",
                    "a GPU (`kind = \"gpu\"`) must not have a [tpu] table",
                ))
            }
            _ => {}
        }
        if let Some(t) = &chip.tpu {
            self.count(
                "tpu.tensorcores_per_device",
                t.tensorcores_per_device.into(),
            )?;
            self.count("tpu.mxus_per_tensorcore", t.mxus_per_tensorcore.into())?;
            if !MXU_DIMS.contains(&t.mxu_dim) {
                return Err(self.fail(
                    "tpu.mxu_dim",
                    format!("must be 128 or 256 (the MXU edge), got {}", t.mxu_dim),
                ));
            }
            self.count("tpu.vpu_sublanes", t.vpu_sublanes.into())?;
            self.count("tpu.vpu_lanes", t.vpu_lanes.into())?;
            self.count("tpu.vpu_alus_per_lane", t.vpu_alus_per_lane.into())?;
            self.bytes("tpu.vmem_bytes_per_tensorcore", t.vmem_bytes_per_tensorcore)?;

            let cores = f64::from(t.tensorcores_per_device);
            let mxu = f64::from(t.mxu_dim);
            let mxu_peak =
                cores * f64::from(t.mxus_per_tensorcore) * mxu * mxu * 2.0 * chip.clock_hz;
            self.rate(
                "matmul.bf16_flops_per_s",
                chip.matmul.bf16_flops_per_s,
                "FLOP/s",
            )?;
            self.consistent(
                "matmul.bf16_flops_per_s",
                chip.matmul.bf16_flops_per_s,
                mxu_peak,
                format!(
                    "tensorcores_per_device × mxus_per_tensorcore × mxu_dim² × 2 × clock_hz \
                     ({} × {} × {}² × 2 × {:e})",
                    t.tensorcores_per_device, t.mxus_per_tensorcore, t.mxu_dim, chip.clock_hz
                ),
            )?;
            let vpu_peak = cores
                * f64::from(t.vpu_sublanes)
                * f64::from(t.vpu_lanes)
                * f64::from(t.vpu_alus_per_lane)
                * chip.clock_hz;
            self.rate(
                "vector.f32_flops_per_s",
                chip.vector.f32_flops_per_s,
                "FLOP/s",
            )?;
            self.consistent(
                "vector.f32_flops_per_s",
                chip.vector.f32_flops_per_s,
                vpu_peak,
                format!(
                    "tensorcores_per_device × vpu_sublanes × vpu_lanes × vpu_alus_per_lane × clock_hz \
                     ({} × {} × {} × {} × {:e})",
                    t.tensorcores_per_device, t.vpu_sublanes, t.vpu_lanes, t.vpu_alus_per_lane, chip.clock_hz
                ),
            )?;
        }
        if let Some(g) = &chip.gpu {
            self.count("gpu.sm_count", g.sm_count.into())?;
            self.bytes("gpu.smem_bytes_per_sm", g.smem_bytes_per_sm)?;
            self.bytes("gpu.l2_bytes", g.l2_bytes)?;
        }
        Ok(())
    }

    fn matmul(&self, chip: &Chip) -> Check {
        let m = &chip.matmul;
        let bf16 = ("bf16_flops_per_s", m.bf16_flops_per_s);
        let f32 = ("f32_flops_per_s", m.f32_flops_per_s);
        self.rate("matmul.bf16_flops_per_s", bf16.1, "FLOP/s")?;
        self.rate("matmul.f32_flops_per_s", f32.1, "FLOP/s")?;
        self.not_above("matmul.f32_flops_per_s", f32, bf16)?;
        let optional = [
            ("tf32_flops_per_s", m.tf32_flops_per_s, "FLOP/s"),
            ("f16_flops_per_s", m.f16_flops_per_s, "FLOP/s"),
            ("fp8_flops_per_s", m.fp8_flops_per_s, "FLOP/s"),
            ("int8_ops_per_s", m.int8_ops_per_s, "OP/s"),
            ("int4_ops_per_s", m.int4_ops_per_s, "OP/s"),
        ];
        for (name, value, unit) in optional {
            if let Some(value) = value {
                self.rate(&format!("matmul.{name}"), value, unit)?;
            }
        }
        if let Some(tf32) = m.tf32_flops_per_s {
            let tf32 = ("tf32_flops_per_s", tf32);
            self.not_above("matmul.tf32_flops_per_s", f32, tf32)?;
            self.not_above("matmul.tf32_flops_per_s", tf32, bf16)?;
        }
        // Narrower operands are never slower than bf16 on the same units.
        if let Some(fp8) = m.fp8_flops_per_s {
            self.not_above("matmul.fp8_flops_per_s", bf16, ("fp8_flops_per_s", fp8))?;
        }
        if let Some(int8) = m.int8_ops_per_s {
            self.not_above("matmul.int8_ops_per_s", bf16, ("int8_ops_per_s", int8))?;
        }
        if let Some(int4) = m.int4_ops_per_s {
            let wider = m.int8_ops_per_s.map_or(bf16, |v| ("int8_ops_per_s", v));
            self.not_above("matmul.int4_ops_per_s", wider, ("int4_ops_per_s", int4))?;
        }
        let vector = ("vector.f32_flops_per_s", chip.vector.f32_flops_per_s);
        self.rate(vector.0, vector.1, "FLOP/s")?;
        self.not_above(vector.0, vector, ("matmul.bf16_flops_per_s", bf16.1))
    }

    fn memory(&self, chip: &Chip) -> Check {
        self.bytes("memory.hbm_bytes", chip.memory.hbm_bytes)?;
        self.rate(
            "memory.hbm_bandwidth_bytes_per_s",
            chip.memory.hbm_bandwidth_bytes_per_s,
            "bytes/s",
        )
    }

    fn interconnect(&self, chip: &Chip) -> Check {
        let ici = &chip.ici;
        self.count("ici.links_per_chip", ici.links_per_chip.into())?;
        self.rate(
            "ici.link_bandwidth_bytes_per_s_per_direction",
            ici.link_bandwidth_bytes_per_s_per_direction,
            "bytes/s",
        )?;
        self.latency("ici.hop_latency_s", ici.hop_latency_s)?;
        match &ici.topology {
            Topology::Torus {
                dims,
                wraparound,
                max_slice_shape,
                ..
            } => {
                if !TORUS_DIMS.contains(dims) {
                    return Err(self.fail(
                        "ici.topology.dims",
                        format!("must be 1, 2 or 3, got {dims}"),
                    ));
                }
                if max_slice_shape.len() != *dims as usize {
                    return Err(self.fail(
                        "ici.topology.max_slice_shape",
                        format!(
                            "has {} entries but the torus has dims = {dims}",
                            max_slice_shape.len()
                        ),
                    ));
                }
                if max_slice_shape.contains(&0) {
                    return Err(
                        self.fail("ici.topology.max_slice_shape", "entries must be at least 1")
                    );
                }
                match wraparound {
                    Wraparound::FullAxis { axis_len: n }
                    | Wraparound::WholeCubes { cube_edge: n }
                        if *n == 0 =>
                    {
                        Err(self.fail(
                            "ici.topology.wraparound",
                            "the rule's length must be at least 1",
                        ))
                    }
                    _ => Ok(()),
                }
            }
            Topology::Switch { domain_chips } => {
                self.count("ici.topology.domain_chips", (*domain_chips).into())
            }
        }
    }

    fn host(&self, chip: &Chip) -> Check {
        self.rate(
            "host.pcie_bytes_per_s_per_direction",
            chip.host.pcie_bytes_per_s_per_direction,
            "bytes/s",
        )?;
        self.rate(
            "host.dcn_bytes_per_s_per_direction",
            chip.host.dcn_bytes_per_s_per_direction,
            "bytes/s",
        )?;
        let e = chip.host.dcn_efficiency;
        if !(e > 0.0 && e <= 1.0) {
            return Err(self.fail(
                "host.dcn_efficiency",
                format!("must be a fraction in (0, 1], got {e}"),
            ));
        }
        self.latency("host.dcn_latency_s", chip.host.dcn_latency_s)
    }
}
