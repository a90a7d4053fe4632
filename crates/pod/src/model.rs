//! [`PodModel`]: the pod as a `tpusim_perf::CommModel`.

use crate::analytic::{self, Note};
use crate::collective::{collective, devices_used};
use crate::sim;
use crate::topology::Pod;
use crate::PodError;
use tpusim_arch::Chip;
use tpusim_hlo::{Cancel, InstrId, Module};
use tpusim_perf::{CommCost, CommModel};

/// Which network model prices collectives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Network {
    /// The scaling book's formulas ([`crate::analytic`]).
    #[default]
    Analytic,
    /// The link-level simulation ([`crate::sim`]).
    Sim,
}

impl Network {
    pub fn name(self) -> &'static str {
        match self {
            Network::Analytic => "analytical",
            Network::Sim => "link-level simulation",
        }
    }
}

/// A pod and the network model that prices its collectives.
#[derive(Clone, Debug)]
pub struct PodModel {
    pub pod: Pod,
    pub network: Network,
    /// Devices the module names (at most the pod's).
    pub used: u64,
    /// Once set, the link-level simulation gives up at its next check and
    /// collectives are priced analytically: the caller's own check of the
    /// flag then discards the result.
    pub cancel: Cancel,
    /// How the devices were placed on the slice, when tpusim chose it.
    pub placement: Option<String>,
}

impl PodModel {
    pub fn new(pod: Pod, network: Network) -> Self {
        let used = pod.devices();
        PodModel {
            pod,
            network,
            used,
            cancel: Cancel::default(),
            placement: None,
        }
    }

    /// Checks that `m` fits on the pod.
    pub fn check(&self, m: &Module) -> Result<(), PodError> {
        let need = devices_used(m);
        if need > self.pod.devices() {
            return Err(PodError::TooFewDevices {
                need,
                have: self.pod.devices(),
            });
        }
        Ok(())
    }
}

impl CommModel for PodModel {
    fn cost(&self, m: &Module, id: InstrId) -> Option<CommCost> {
        let c = collective(m, id)?;
        if c.groups.iter().all(|g| g.len() < 2) && c.pairs.iter().all(|p| p.0 == p.1) {
            // One device per group: nothing crosses the network.
            return None;
        }
        let a = analytic::cost(&self.pod, &c);
        let mut hints: Vec<String> = Vec::new();
        let time_s = match self.network {
            Network::Analytic => a.time_s,
            Network::Sim if self.cancel.is_cancelled() => a.time_s,
            Network::Sim => match sim::simulate_cancellable(&self.pod, &c, &self.cancel) {
                Some(r) => r.time_s,
                None if self.cancel.is_cancelled() => a.time_s,
                None => {
                    hints.push(
                        "too many transfers for the link-level simulation: priced with the \
                         analytical model"
                            .into(),
                    );
                    a.time_s
                }
            },
        };
        for note in &a.notes {
            hints.push(hint(c.kind.name(), note, &a));
        }
        Some(CommCost {
            time_s,
            bytes: c.bytes,
            group_size: a.group_size,
            // A group across slices waits on its DCN stage: the measured
            // multi-slice runs slow down by the whole transfer (see the chip
            // files' `dcn_efficiency`).
            blocking: a.axes.iter().any(|x| x == "dcn"),
            axes: a.axes.clone(),
            kind: c.kind.name().to_string(),
            hints,
        })
    }

    fn devices(&self, m: &Module) -> u32 {
        devices_used(m).min(u64::from(u32::MAX)) as u32
    }

    fn assumptions(&self) -> Vec<String> {
        let mut out: Vec<String> = self.placement.iter().cloned().collect();
        if self.pod.slices > 1 {
            out.push(format!(
                "collectives across the {} slices block the TensorCore until their DCN \
                 transfer ends, which runs at {:.3e} B/s per chip and direction: {:.0}% of \
                 the NIC line rate (the chip file's dcn_efficiency, measured from MaxText \
                 multi-slice runs)",
                self.pod.slices,
                self.pod.dcn_bw,
                100.0 * self.pod.dcn_efficiency
            ));
        }
        out
    }

    fn describe(&self) -> Option<String> {
        let wraps: Vec<&str> = self
            .pod
            .wraps
            .iter()
            .map(|&w| if w { "wraps" } else { "no wrap" })
            .collect();
        // A pod larger than the program: say what it means, the devices the
        // program never names sit idle and only the placement is priced.
        let idle = match self.pod.devices().saturating_sub(self.used) {
            0 => String::new(),
            n => format!(
                "; the module uses {} of its {} devices, {n} sit idle",
                self.used.max(1),
                self.pod.devices()
            ),
        };
        Some(format!(
            "{} ({}; {} chips), {} network{idle}",
            self.pod.describe(),
            wraps.join(", "),
            self.pod.chips(),
            self.network.name()
        ))
    }
}

/// Bytes in binary units, as every memory figure tpusim prints.
fn kb(bytes: f64) -> String {
    const KIB: f64 = 1024.0;
    if bytes >= KIB * KIB {
        format!("{:.1} MiB", bytes / (KIB * KIB))
    } else if bytes >= KIB {
        format!("{:.0} KiB", bytes / KIB)
    } else {
        format!("{bytes:.0} B")
    }
}

/// What the network model noticed about one collective, without its name
/// (the analysis names every collective a note holds for).
fn hint(kind: &str, note: &Note, a: &analytic::Cost) -> String {
    match note {
        Note::NonWrapping { axis, n } => format!(
            "a non-wrapping axis of {n} ({axis}) carries the ring one way; a wraparound \
             (full axis) would halve the bandwidth time"
        ),
        Note::LatencyBound {
            bytes_per_hop,
            threshold,
        } => format!(
            "latency-bound {kind}: {} per hop, below the {} a link moves in one hop latency",
            kb(*bytes_per_hop),
            kb(*threshold)
        ),
        Note::Irregular => {
            "the group is not a sub-block of the torus: priced as one ring in group order".into()
        }
        Note::Dcn { slices } => format!(
            "over DCN across {slices} slices, {:.0}% of the time",
            100.0 * a.dcn_s / a.time_s.max(f64::MIN_POSITIVE)
        ),
        Note::OutsidePod => "a device of the group is outside the pod".into(),
    }
}

/// How a user describes the pod a module runs on (the CLI's `--topology`,
/// `--slices`, `--network`, `--device-order`; the Python `topology=` options).
#[derive(Clone, Debug, Default)]
pub struct PodOptions {
    /// Chips per axis, e.g. `4x4x4`; `None` spreads the module's devices over
    /// the chip's torus axes.
    pub topology: Option<String>,
    /// Slices joined over DCN (0 is taken as 1).
    pub slices: u32,
    pub network: Network,
    /// A device-order file's text (one line per device id).
    pub device_order: Option<String>,
    /// The logical mesh (axis sizes, major first) a partitioner numbered the
    /// devices by: without a device order they are placed as JAX lays that
    /// mesh on a slice ([`crate::placement`]).
    pub mesh: Option<Vec<u32>>,
    /// Handed to the [`PodModel`] (see [`PodModel::cancel`]).
    pub cancel: Cancel,
}

impl PodOptions {
    /// The interconnect model for `m` on `chip`, or `None` when the module runs
    /// on one device and no pod was asked for.
    pub fn model_for(&self, chip: &Chip, m: &Module) -> Result<Option<PodModel>, PodError> {
        let slices = self.slices.max(1);
        let devices = devices_used(m);
        if devices <= 1 && self.topology.is_none() && slices <= 1 {
            return Ok(None);
        }
        let shape = match &self.topology {
            Some(t) => crate::parse_shape(t)?,
            None => crate::default_shape(chip, devices.div_ceil(u64::from(slices))),
        };
        let mut pod = Pod::for_chip(chip, &shape, slices)?;
        let mut placement = None;
        if let Some(text) = &self.device_order {
            pod.set_device_order(text)?;
        } else if let Some(mesh) = &self.mesh {
            placement = Some(place_mesh(&mut pod, mesh));
        }
        if u64::from(slices) > devices.max(1) {
            return Err(PodError::TooManySlices {
                slices,
                need: devices.max(1),
            });
        }
        let mut model = PodModel::new(pod, self.network);
        model.placement = placement;
        model.used = devices;
        model.cancel = self.cancel.clone();
        model.check(m)?;
        Ok(Some(model))
    }
}

/// Places `mesh` on the pod as JAX would, and says so (or why not).
fn place_mesh(pod: &mut Pod, mesh: &[u32]) -> String {
    let mesh_text = crate::topology::shape_text(mesh);
    match pod.place_mesh(mesh) {
        Ok(layout) => {
            let names = ["x", "y", "z", "chip devices"];
            let per_slice = crate::placement::slice_mesh(mesh, pod.slices).unwrap_or_default();
            let physical = crate::placement::physical_axes(&pod.shape, pod.devices_per_chip);
            let parts: Vec<String> = layout
                .axes
                .iter()
                .enumerate()
                .filter(|(k, _)| mesh[*k] > 1)
                .map(|(k, axes)| {
                    let mut on: Vec<&str> = axes
                        .iter()
                        .filter(|&&a| physical[a] > 1)
                        .map(|&a| names[a])
                        .collect();
                    if per_slice.get(k) != Some(&mesh[k]) {
                        on.push("slices (DCN)");
                    }
                    format!("axis {k} ({}) on {}", mesh[k], on.join("+"))
                })
                .collect();
            // JAX replaces the generic layout by fixed ring orders on a few
            // trays (v5e/v6e 2x2, 8 and 4x4 chips; v5p 2x2x2; small TPU7x).
            let small = if pod.chips_per_slice() <= 32 {
                " (JAX's fixed ring orders for some slices of up to 32 chips are not modelled)"
            } else {
                ""
            };
            let split = if layout.split {
                " (splitting physical axes, as jax.make_mesh does on this chip)"
            } else {
                ""
            };
            format!(
                "devices placed as JAX's create_device_mesh (jax.make_mesh, MaxText) lays mesh \
                 {mesh_text} on the {} slice: {}{split}{small}",
                crate::topology::shape_text(&pod.shape),
                parts.join(", ")
            )
        }
        Err(why) => format!(
            "devices placed in torus order (x fastest), not as JAX would lay mesh {mesh_text} \
             on the {} slice: {why}; give --device-order to place them",
            crate::topology::shape_text(&pod.shape)
        ),
    }
}
