//! Data for a `tpusim chips` listing: one summary row per builtin chip.

use crate::chip::{Chip, Topology};
use crate::dtype::MatmulDtype;

/// One row of the chip listing: raw numbers for machine use, plus
/// [`ChipSummary::cells`] for display.
#[derive(Debug, Clone, PartialEq)]
pub struct ChipSummary {
    /// Chip id (`v5e`).
    pub id: String,
    /// Human-readable name.
    pub name: String,
    /// What one JAX device is.
    pub device: String,
    /// Peak bf16 matmul rate of one device, FLOP/s.
    pub peak_bf16_flops_per_s: f64,
    /// HBM capacity of one device, bytes.
    pub hbm_bytes: u64,
    /// HBM bandwidth of one device, bytes/s.
    pub hbm_bandwidth_bytes_per_s: f64,
    /// Interconnect summary, e.g. `ICI 4×45 GB/s/dir, 2D torus ≤16x16`.
    pub ici: String,
}

impl ChipSummary {
    /// Column titles matching [`ChipSummary::cells`].
    pub const HEADER: [&'static str; 7] = [
        "id",
        "name",
        "one device is",
        "bf16 peak",
        "HBM",
        "HBM BW",
        "interconnect (per chip)",
    ];

    /// Summarizes one chip.
    pub fn from_chip(chip: &Chip) -> Self {
        let ici = &chip.ici;
        let shape = match &ici.topology {
            Topology::Torus {
                dims,
                max_slice_shape,
                ..
            } => {
                let dims_text: Vec<String> = max_slice_shape.iter().map(u32::to_string).collect();
                format!("{dims}D torus ≤{}", dims_text.join("x"))
            }
            Topology::Switch { domain_chips } => format!("switch, {domain_chips} per domain"),
        };
        ChipSummary {
            id: chip.id.clone(),
            name: chip.name.clone(),
            device: chip.device.clone(),
            peak_bf16_flops_per_s: chip.peak_flops(MatmulDtype::Bf16),
            hbm_bytes: chip.memory.hbm_bytes,
            hbm_bandwidth_bytes_per_s: chip.memory.hbm_bandwidth_bytes_per_s,
            ici: format!(
                "{} {}×{} GB/s/dir, {shape}",
                ici.technology,
                ici.links_per_chip,
                trim_number(ici.link_bandwidth_bytes_per_s_per_direction / 1e9)
            ),
        }
    }

    /// The row as display strings, in [`ChipSummary::HEADER`] order
    /// (rates in TFLOP/s and bandwidth in GB/s, decimal; capacity in GiB, as every
    /// memory figure tpusim prints).
    pub fn cells(&self) -> [String; 7] {
        [
            self.id.clone(),
            self.name.clone(),
            self.device.clone(),
            format!("{} TFLOP/s", trim_number(self.peak_bf16_flops_per_s / 1e12)),
            format!("{:.1} GiB", self.hbm_bytes as f64 / f64::from(1u32 << 30)),
            format!("{} GB/s", trim_number(self.hbm_bandwidth_bytes_per_s / 1e9)),
            self.ici.clone(),
        ]
    }
}

/// One summary row per builtin chip, in database order.
pub fn chips_table_rows() -> Vec<ChipSummary> {
    crate::builtin_chips()
        .iter()
        .map(ChipSummary::from_chip)
        .collect()
}

/// At most one decimal, none when the value is whole: 197, 23, 1153.5.
fn trim_number(value: f64) -> String {
    let text = format!("{value:.1}");
    text.strip_suffix(".0").map_or(text.clone(), str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_trimmed() {
        assert_eq!(trim_number(197.0), "197");
        assert_eq!(trim_number(1153.5), "1153.5");
        assert_eq!(trim_number(45.0), "45");
    }
}
