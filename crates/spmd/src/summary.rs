//! A structural summary of a partitioned module, to compare tpusim's partitioner
//! with XLA's: per-device parameter and result shapes and the multiset of
//! collectives (kind, per-device bytes, group size).

use tpusim_hlo::attr::ReplicaGroups;
use tpusim_hlo::printer::shape_text;
use tpusim_hlo::{AttrValue, Module, Opcode};

/// One collective instruction.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Collective {
    /// `all-reduce`, `all-gather`, `reduce-scatter`, `all-to-all`, `collective-permute`.
    pub kind: String,
    /// Bytes one device contributes or receives (see [`summarize`]).
    pub bytes: u64,
    /// Devices per replica group (for collective-permute: its number of pairs).
    pub group: usize,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Summary {
    /// Per-device entry parameter shapes, as HLO text without layouts.
    pub params: Vec<String>,
    /// Per-device result leaves.
    pub results: Vec<String>,
    /// Sorted.
    pub collectives: Vec<Collective>,
}

fn kind_of(op: Opcode) -> Option<&'static str> {
    use Opcode::*;
    Some(match op {
        AllReduce | AllReduceStart => "all-reduce",
        AllGather | AllGatherStart => "all-gather",
        ReduceScatter => "reduce-scatter",
        AllToAll => "all-to-all",
        CollectivePermute | CollectivePermuteStart => "collective-permute",
        _ => return None,
    })
}

fn group_size(ins: &tpusim_hlo::Instruction, devices: usize) -> usize {
    match ins.attr("replica_groups") {
        Some(AttrValue::ReplicaGroups(g)) => match &**g {
            ReplicaGroups::Iota { group_size, .. } => *group_size as usize,
            other => other.expand().first().map_or(devices, Vec::len),
        },
        _ => devices,
    }
}

fn bytes(m: &Module, ids: &[tpusim_hlo::InstrId]) -> u64 {
    ids.iter().map(|&o| m.instr(o).shape.byte_size()).sum()
}

/// The summary of a (partitioned) module; collectives inside called
/// computations (loop bodies, branches) count once each. Bytes per device:
/// an all-gather's result, the operands of all-reduce, reduce-scatter and
/// all-to-all, a collective-permute's data operand.
pub fn summarize(m: &Module) -> Summary {
    let entry = m.entry();
    let leaf_text = |s: &tpusim_hlo::Shape| -> Vec<String> {
        s.leaves()
            .iter()
            .map(|a| shape_text(&tpusim_hlo::Shape::Array((*a).clone()).without_layouts()))
            .collect()
    };
    let params = entry
        .params
        .iter()
        .flat_map(|&p| leaf_text(&m.instr(p).shape))
        .collect();
    let results = leaf_text(&m.instr(entry.root).shape);
    let devices = m.device_count().max(1) as usize;
    let mut collectives = Vec::new();
    for c in m.comps.iter().filter(|c| !c.is_async_sugar) {
        for &i in &c.instrs {
            let ins = m.instr(i);
            let op = match (ins.opcode, ins.async_sugar) {
                (Opcode::AsyncStart, Some(inner)) => inner,
                (op, _) => op,
            };
            let Some(kind) = kind_of(op) else { continue };
            let (bytes, group) = match kind {
                "all-gather" => {
                    let out = match &ins.shape {
                        tpusim_hlo::Shape::Tuple(t) if op == Opcode::AllGatherStart => {
                            t.last().map_or(0, tpusim_hlo::Shape::byte_size)
                        }
                        s => s.byte_size(),
                    };
                    (out, group_size(ins, devices))
                }
                "collective-permute" => {
                    let pairs = match ins.attr("source_target_pairs") {
                        Some(AttrValue::IntLists(p)) => p.len(),
                        _ => 0,
                    };
                    (bytes(m, &ins.operands[..1.min(ins.operands.len())]), pairs)
                }
                _ => (bytes(m, &ins.operands), group_size(ins, devices)),
            };
            collectives.push(Collective {
                kind: kind.to_string(),
                bytes,
                group,
            });
        }
    }
    collectives.sort();
    Summary {
        params,
        results,
        collectives,
    }
}
