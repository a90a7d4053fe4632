//! The seam between the single-device model and an interconnect model.
//!
//! `tpusim-perf` does not know about topologies. A [`CommModel`] (implemented
//! by the pod crate) prices communication instructions; [`LocalOnly`] is the
//! single-device behaviour, where collectives cost only their local memory
//! traffic.

use serde::{Deserialize, Serialize};
use tpusim_hlo::{InstrId, Module};

/// What one execution of a communication instruction costs.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CommCost {
    /// Wall time of the transfer on the interconnect, seconds.
    pub time_s: f64,
    /// The collective's array size per device, bytes (the gathered result of
    /// an all-gather, the input of a reduce-scatter, else the operand).
    pub bytes: f64,
    /// Devices taking part in one group.
    pub group_size: u32,
    /// Torus axes (or "dcn") the group spans, e.g. `["x", "y"]`.
    pub axes: Vec<String>,
    /// The collective family (`all-gather`, ...).
    pub kind: String,
    /// The TensorCore waits for the whole transfer at its start, even when
    /// the op is asynchronous: nothing overlaps it (a collective across
    /// slices, whose DCN stage runs through the hosts).
    pub blocking: bool,
    /// What the model noticed about this collective, worth showing the user,
    /// without its name (`crosses 4 slices over DCN, ...`): the analysis
    /// names, once, every collective a note holds for.
    pub hints: Vec<String>,
}

/// Prices communication instructions (collectives, send/recv) of a module.
pub trait CommModel: Sync {
    /// Cost of one execution of `id`, or `None` when the model has nothing to
    /// say about it (not a communication op, or the module runs on one device).
    /// For async pairs the cost belongs to the `-start` instruction.
    fn cost(&self, m: &Module, id: InstrId) -> Option<CommCost>;

    /// Devices the module runs on under this model.
    fn devices(&self, _m: &Module) -> u32 {
        1
    }

    /// The network in words (`4x4x4 (wraps), analytical`), if there is one.
    fn describe(&self) -> Option<String> {
        None
    }

    /// What the model assumed about the whole network (e.g. where the devices
    /// sit), for the analysis's assumptions.
    fn assumptions(&self) -> Vec<String> {
        Vec::new()
    }
}

/// No interconnect: every collective is local memory traffic only.
#[derive(Clone, Copy, Debug, Default)]
pub struct LocalOnly;

impl CommModel for LocalOnly {
    fn cost(&self, _m: &Module, _id: InstrId) -> Option<CommCost> {
        None
    }
}

/// One collective of the program, over all its executions.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CollectiveStat {
    pub name: String,
    pub kind: String,
    /// Array size per device per execution, bytes (see [`CommCost::bytes`]).
    pub bytes: f64,
    pub group_size: u32,
    pub axes: Vec<String>,
    pub occurrences: u64,
    /// Interconnect time over all executions.
    pub time_s: f64,
    /// Of `time_s`, not hidden behind compute.
    pub exposed_s: f64,
    /// Whether it was issued as an async `-start`/`-done` pair.
    pub is_async: bool,
}

/// Communication totals of a program, per device (SPMD: every device runs
/// the same program, and the model prices the slowest group).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct CommSummary {
    /// The network, when the module was analyzed on a pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<String>,
    /// Time of everything but communication.
    pub compute_s: f64,
    /// Interconnect time of all collectives.
    pub communication_s: f64,
    /// Communication not hidden behind compute (part of the step time).
    pub exposed_communication_s: f64,
    /// Collectives by interconnect time, longest first.
    pub collectives: Vec<CollectiveStat>,
}
