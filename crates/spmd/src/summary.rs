//! A structural summary of a partitioned module, to compare tpusim's partitioner
//! with XLA's: per-device parameter and result shapes and the multiset of
//! collectives (kind, per-device bytes, group size).

use tpusim_hlo::attr::ReplicaGroups;
use tpusim_hlo::printer::shape_text;
use tpusim_hlo::{AttrValue, Module, Opcode};

/// One collective operand: a combined (tuple) collective counts once per operand.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Collective {
    /// `all-reduce`, `all-gather`, `reduce-scatter`, `all-to-all`, `collective-permute`.
    pub kind: String,
    /// Bytes of the operand on one device.
    pub bytes: u64,
    /// Devices per replica group (for collective-permute: 2, one pair).
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
        _ if ins.attr("source_target_pairs").is_some() => 2,
        _ => devices,
    }
}

/// The summary of a (partitioned) module; collectives inside called
/// computations (loop bodies, async wrappers) count once each.
pub fn summarize(m: &Module) -> Summary {
    let entry = m.entry();
    let params = entry
        .params
        .iter()
        .map(|&p| shape_text(&m.instr(p).shape.without_layouts()))
        .collect();
    let results = m
        .instr(entry.root)
        .shape
        .leaves()
        .iter()
        .map(|a| shape_text(&tpusim_hlo::Shape::Array((*a).clone()).without_layouts()))
        .collect();
    let devices = m.device_count().max(1) as usize;
    let mut collectives = Vec::new();
    for c in m.comps.iter() {
        for &i in &c.instrs {
            let ins = m.instr(i);
            let op = match (ins.opcode, ins.async_sugar) {
                (Opcode::AsyncStart, Some(inner)) => inner,
                (op, _) => op,
            };
            let Some(kind) = kind_of(op) else { continue };
            let group = group_size(ins, devices);
            for &o in &ins.operands {
                for leaf in m.instr(o).shape.leaves() {
                    let bytes = tpusim_hlo::Shape::Array(leaf.clone()).byte_size();
                    collectives.push(Collective {
                        kind: kind.to_string(),
                        bytes,
                        group,
                    });
                }
            }
        }
    }
    collectives.sort();
    Summary {
        params,
        results,
        collectives,
    }
}
