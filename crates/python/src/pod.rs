//! The pod a module runs on, from the keyword options of `tpusim.analyze` and
//! `tpusim.trace` — the same `tpusim_pod::PodOptions` the CLI's `--topology`,
//! `--slices`, `--network` and `--device-order` build, so both price a module alike.

use crate::errors::BindError;
use tpusim_perf::{CommModel, LocalOnly};
use tpusim_pod::{Network, PodError, PodModel, PodOptions};

/// The pod options as they cross from Python (a device order is a file path).
pub struct PodArgs {
    pub topology: Option<String>,
    pub slices: u32,
    /// `"analytic"` (the default) or `"sim"`.
    pub network: Option<String>,
    pub device_order: Option<String>,
    /// The logical mesh the module's device ids number (Python's `mesh=`):
    /// devices are placed as JAX lays it; else the partitioner's own mesh.
    pub mesh: Option<Vec<u32>>,
}

impl PodArgs {
    /// The interconnect model for `m`, or `None` for a single-device module
    /// analyzed without a topology (as the CLI decides).
    pub fn model(
        &self,
        chip: &tpusim_arch::Chip,
        m: &tpusim_hlo::Module,
        mesh: Option<&[u32]>,
        cancel: &tpusim_hlo::Cancel,
    ) -> Result<Option<PodModel>, BindError> {
        let network = match self.network.as_deref().unwrap_or("analytic") {
            "analytic" => Network::Analytic,
            "sim" => Network::Sim,
            other => {
                return Err(BindError::Argument(format!(
                    "network {other:?}: use \"analytic\" or \"sim\""
                )))
            }
        };
        let device_order = match &self.device_order {
            Some(path) => Some(
                std::fs::read_to_string(path)
                    .map_err(|e| BindError::Argument(format!("cannot read {path}: {e}")))?,
            ),
            None => None,
        };
        let mesh = match &self.mesh {
            Some(given) => {
                tpusim_pod::check_given_mesh(given, m)
                    .map_err(|e| BindError::Argument(format!("mesh: {e}")))?;
                Some(given.clone())
            }
            None => mesh.map(<[u32]>::to_vec),
        };
        let opts = PodOptions {
            topology: self.topology.clone(),
            slices: self.slices,
            network,
            device_order,
            mesh,
            cancel: cancel.clone(),
        };
        opts.model_for(chip, m)
            .map_err(|e| match (&self.device_order, e) {
                (Some(path), e @ PodError::DeviceOrder { .. }) => {
                    BindError::Topology(format!("{path}: {e}"))
                }
                (_, e) => BindError::Topology(e.to_string()),
            })
    }
}

/// The model collectives are priced by: the pod's, or none for one device.
pub fn comm(pod: &Option<PodModel>) -> &dyn CommModel {
    match pod {
        Some(p) => p,
        None => &LocalOnly,
    }
}
