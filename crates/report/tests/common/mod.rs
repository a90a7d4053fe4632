//! Shared setup: a simulated run of a test module.

#![allow(dead_code)]

use std::path::PathBuf;
use tpusim_hlo::{InstrId, Module, Opcode};
use tpusim_perf::{Analysis, CommCost, CommModel, Schedule};
use tpusim_report::{MemoryView, Run};

/// Prices every all-reduce at a fixed time on the interconnect (20 µs in
/// [`simulate`]), so that async collectives get ICI transfers and flows.
pub struct FixedComm(pub f64);

impl CommModel for FixedComm {
    fn cost(&self, m: &Module, id: InstrId) -> Option<CommCost> {
        matches!(
            m.instr(id).opcode,
            Opcode::AllReduceStart | Opcode::AllReduce
        )
        .then(|| CommCost {
            time_s: self.0,
            bytes: 4.0 * 1024.0 * 1024.0,
            group_size: 4,
            axes: vec!["x".into()],
            kind: "all-reduce".into(),
            hints: Vec::new(),
            blocking: false,
        })
    }
}

pub struct Owned {
    pub module: Module,
    pub chip: tpusim_arch::Chip,
    pub analysis: Analysis,
    pub schedule: Schedule,
    pub memory: MemoryView,
}

impl Owned {
    pub fn run(&self) -> Run<'_> {
        Run {
            module: &self.module,
            chip: &self.chip,
            analysis: &self.analysis,
            schedule: &self.schedule,
            memory: Some(&self.memory),
        }
    }
}

pub fn testdata(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata")
        .join(rel)
}

/// Simulates `rel` (under testdata/) on `chip`.
pub fn simulate(rel: &str, chip: &str) -> Owned {
    simulate_with(rel, chip, 20e-6)
}

/// Simulates `rel` with every all-reduce taking `comm_s` on the interconnect.
pub fn simulate_with(rel: &str, chip: &str, comm_s: f64) -> Owned {
    let text = std::fs::read_to_string(testdata(rel)).expect("read test module");
    simulate_comm(&text, chip, &FixedComm(comm_s))
}

/// Simulates the module in `text` on `chip`.
pub fn simulate_text(text: &str, chip: &str) -> Owned {
    simulate_comm(text, chip, &FixedComm(20e-6))
}

fn simulate_comm(text: &str, chip: &str, comm: &dyn CommModel) -> Owned {
    let module = tpusim_hlo::parse_module(text).expect("parse test module");
    let chip = tpusim_arch::by_id(chip).expect("chip");
    let analysis = tpusim_perf::analyze(&module, &chip);
    let (schedule, profile) = tpusim_perf::schedule_with_memory(&module, &chip, comm);
    let memory = MemoryView::from_profile(&profile, 20);
    Owned {
        module,
        chip,
        analysis,
        schedule,
        memory,
    }
}
