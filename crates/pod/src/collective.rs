//! What a collective instruction does, in device ids.
//!
//! Replica groups are read with XLA's group modes
//! (`GetCollectiveOpGroupMode`): without `channel_id` the ids are replicas
//! (one group per partition); with `channel_id` but without
//! `use_global_device_ids` they are replicas spanning every partition
//! (all-to-all and collective-permute: partitions within each replica); with
//! `use_global_device_ids=true` they are device ids. Device id =
//! `replica · num_partitions + partition`.

use serde::{Deserialize, Serialize};
use tpusim_hlo::attr::AttrValue;
use tpusim_hlo::{InstrId, Module, Opcode};

/// Collective families the network models price.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CollectiveKind {
    AllReduce,
    AllGather,
    ReduceScatter,
    AllToAll,
    CollectivePermute,
}

impl CollectiveKind {
    pub fn name(self) -> &'static str {
        match self {
            CollectiveKind::AllReduce => "all-reduce",
            CollectiveKind::AllGather => "all-gather",
            CollectiveKind::ReduceScatter => "reduce-scatter",
            CollectiveKind::AllToAll => "all-to-all",
            CollectiveKind::CollectivePermute => "collective-permute",
        }
    }
}

/// Largest number of device ids a collective's groups may expand to (a
/// guard against absurd iota groups; far above any real pod).
const MAX_IDS: i64 = 1 << 24;

/// One collective as the network sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct Collective {
    pub kind: CollectiveKind,
    /// The instruction that holds the attributes (inside an async wrapper
    /// for `async-start`).
    pub op: InstrId,
    /// Array size per device in bytes, the `V` of the scaling book: the
    /// gathered result of an all-gather, the input of a reduce-scatter, the
    /// operand of an all-reduce, all-to-all or permute.
    pub bytes: f64,
    /// Device groups (for all but collective-permute).
    pub groups: Vec<Vec<u32>>,
    /// Source and target devices (collective-permute).
    pub pairs: Vec<(u32, u32)>,
}

impl Collective {
    /// Devices per group (1 for a permute).
    pub fn group_size(&self) -> u32 {
        match self.kind {
            CollectiveKind::CollectivePermute => 2.min(self.pairs.len() as u32 + 1),
            _ => self
                .groups
                .iter()
                .map(|g| g.len() as u32)
                .max()
                .unwrap_or(1),
        }
    }
}

/// The collective performed by `id`: a collective, its `-start` form or an
/// `async-start` wrapping one. `None` for anything else, including
/// `-done` halves and collectives the models do not price.
pub fn collective(m: &Module, id: InstrId) -> Option<Collective> {
    let (op, kind) = resolve(m, id)?;
    let ins = m.instr(op);
    let operand_bytes = |k: usize| {
        ins.operands
            .get(k)
            .map_or(0.0, |&o| m.instr(o).shape.byte_size() as f64)
    };
    let all_operand_bytes = ins
        .operands
        .iter()
        .map(|&o| m.instr(o).shape.byte_size() as f64)
        .sum::<f64>();
    let partitions = m.config.num_partitions.unwrap_or(1).max(1);
    let replicas = m.config.replica_count.unwrap_or(1).max(1);
    let has_channel = ins.attr("channel_id").is_some();
    let global = ins.attr_bool("use_global_device_ids").unwrap_or(false);
    if kind == CollectiveKind::CollectivePermute {
        let pairs = permute_pairs(
            ins.attr("source_target_pairs"),
            has_channel,
            partitions,
            replicas,
        );
        return Some(Collective {
            kind,
            op,
            bytes: operand_bytes(0),
            groups: Vec::new(),
            pairs,
        });
    }
    let listed = match ins.attr("replica_groups") {
        Some(AttrValue::ReplicaGroups(g)) => expand_bounded(g)?,
        Some(AttrValue::IntLists(g)) => g.clone(),
        _ => Vec::new(),
    };
    let mode = if !has_channel {
        Mode::CrossReplica
    } else if global {
        Mode::Flattened
    } else if kind == CollectiveKind::AllToAll {
        Mode::CrossPartition
    } else {
        Mode::CrossReplicaAndPartition
    };
    let groups = device_groups(&listed, mode, partitions, replicas);
    let n = groups.iter().map(Vec::len).max().unwrap_or(1).max(1) as f64;
    let bytes = match kind {
        CollectiveKind::AllGather => all_operand_bytes * n,
        _ => all_operand_bytes,
    };
    Some(Collective {
        kind,
        op,
        bytes,
        groups,
        pairs: Vec::new(),
    })
}

/// Devices a module runs on: `num_partitions × replica_count`, or more when
/// its collectives name higher device ids (benchmark dumps often drop the
/// module config but keep their replica groups).
pub fn devices_used(m: &Module) -> u64 {
    let mut n = m.device_count().max(1) as u64;
    for k in 0..m.instrs.len() {
        let Some(c) = collective(m, InstrId(k as u32)) else {
            continue;
        };
        let ids = c.groups.iter().flatten().copied();
        let ends = c.pairs.iter().flat_map(|&(s, t)| [s, t]);
        if let Some(max) = ids.chain(ends).max() {
            n = n.max(u64::from(max) + 1);
        }
    }
    n
}

/// The instruction holding the collective's attributes, and its kind.
pub fn resolve(m: &Module, id: InstrId) -> Option<(InstrId, CollectiveKind)> {
    let ins = m.instr(id);
    if ins.opcode == Opcode::AsyncStart {
        // `calls` names the wrapped op; `X-start` sugar also carries X's own
        // computations (a reduce-scatter's `to_apply`) on the start.
        let c = ins
            .attr_comp("calls")
            .or_else(|| ins.called_computations().into_iter().next())?;
        let root = m.comp(c).root;
        return kind_of(m.instr(root).opcode).map(|k| (root, k));
    }
    kind_of(ins.opcode).map(|k| (id, k))
}

fn kind_of(op: Opcode) -> Option<CollectiveKind> {
    use CollectiveKind::*;
    Some(match op {
        Opcode::AllReduce | Opcode::AllReduceStart => AllReduce,
        Opcode::AllGather | Opcode::AllGatherStart => AllGather,
        Opcode::ReduceScatter => ReduceScatter,
        Opcode::AllToAll | Opcode::RaggedAllToAll => AllToAll,
        Opcode::CollectivePermute | Opcode::CollectivePermuteStart => CollectivePermute,
        _ => return None,
    })
}

/// Whether `id` is the `-done` half of an async collective; returns its start.
pub fn done_of(m: &Module, id: InstrId) -> Option<InstrId> {
    let ins = m.instr(id);
    match ins.opcode {
        Opcode::AllReduceDone
        | Opcode::AllGatherDone
        | Opcode::CollectivePermuteDone
        | Opcode::AsyncDone => {
            let mut s = *ins.operands.first()?;
            // async-update chains lead back to the start.
            for _ in 0..64 {
                if m.instr(s).opcode != Opcode::AsyncUpdate {
                    break;
                }
                s = *m.instr(s).operands.first()?;
            }
            resolve(m, s).map(|_| s)
        }
        _ => None,
    }
}

/// Whether `id` starts an asynchronous collective.
pub fn is_async_start(m: &Module, id: InstrId) -> bool {
    matches!(
        m.instr(id).opcode,
        Opcode::AllReduceStart
            | Opcode::AllGatherStart
            | Opcode::CollectivePermuteStart
            | Opcode::AsyncStart
    ) && resolve(m, id).is_some()
}

fn expand_bounded(g: &tpusim_hlo::attr::ReplicaGroups) -> Option<Vec<Vec<i64>>> {
    use tpusim_hlo::attr::ReplicaGroups as R;
    let size = match g {
        R::Explicit(v) => v.iter().map(|x| x.len() as i64).sum(),
        R::Iota {
            num_groups,
            group_size,
            ..
        } => num_groups.saturating_mul(*group_size),
        R::Mesh { axes, .. } => axes
            .iter()
            .try_fold(1i64, |p, a| p.checked_mul(a.1.max(1)))
            .unwrap_or(i64::MAX),
    };
    (size <= MAX_IDS).then(|| g.expand())
}

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    CrossReplica,
    CrossReplicaAndPartition,
    CrossPartition,
    Flattened,
}

fn device_groups(listed: &[Vec<i64>], mode: Mode, partitions: i64, replicas: i64) -> Vec<Vec<u32>> {
    let id = |r: i64, p: i64| (r * partitions + p).clamp(0, u32::MAX as i64) as u32;
    let all = |n: i64| vec![(0..n).collect::<Vec<i64>>()];
    let groups: Vec<Vec<i64>> = match (listed.is_empty(), mode) {
        (false, _) => listed.to_vec(),
        (true, Mode::Flattened) => all(partitions * replicas),
        (true, Mode::CrossReplica) | (true, Mode::CrossReplicaAndPartition) => all(replicas),
        (true, Mode::CrossPartition) => all(partitions),
    };
    let valid = |v: i64| v >= 0;
    match mode {
        Mode::Flattened => groups
            .iter()
            .map(|g| g.iter().filter(|&&v| valid(v)).map(|&v| v as u32).collect())
            .collect(),
        Mode::CrossReplica => (0..partitions)
            .flat_map(|p| {
                groups
                    .iter()
                    .map(move |g| g.iter().filter(|&&r| valid(r)).map(|&r| id(r, p)).collect())
            })
            .collect(),
        Mode::CrossPartition => (0..replicas)
            .flat_map(|r| {
                groups
                    .iter()
                    .map(move |g| g.iter().filter(|&&p| valid(p)).map(|&p| id(r, p)).collect())
            })
            .collect(),
        Mode::CrossReplicaAndPartition => groups
            .iter()
            .map(|g| {
                g.iter()
                    .filter(|&&r| valid(r))
                    .flat_map(|&r| (0..partitions).map(move |p| id(r, p)))
                    .collect()
            })
            .collect(),
    }
}

fn permute_pairs(
    attr: Option<&AttrValue>,
    has_channel: bool,
    partitions: i64,
    replicas: i64,
) -> Vec<(u32, u32)> {
    let listed: Vec<(i64, i64)> = match attr {
        Some(AttrValue::IntLists(v)) => v
            .iter()
            .filter(|p| p.len() == 2 && p[0] >= 0 && p[1] >= 0)
            .map(|p| (p[0], p[1]))
            .collect(),
        _ => Vec::new(),
    };
    let id = |r: i64, p: i64| (r * partitions + p).clamp(0, u32::MAX as i64) as u32;
    if has_channel {
        (0..replicas)
            .flat_map(|r| listed.iter().map(move |&(s, t)| (id(r, s), id(r, t))))
            .collect()
    } else {
        (0..partitions)
            .flat_map(|p| listed.iter().map(move |&(s, t)| (id(s, p), id(t, p))))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn first(text: &str, kind: CollectiveKind) -> Collective {
        let m = tpusim_hlo::parse_module(text).unwrap();
        let id = (0..m.instrs.len() as u32)
            .map(InstrId)
            .find(|&i| collective(&m, i).is_some_and(|c| c.kind == kind))
            .unwrap();
        collective(&m, id).unwrap()
    }

    #[test]
    fn group_modes() {
        let ar = first(
            "HloModule m, num_partitions=4, replica_count=2\n\nadd {\n a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT s = f32[] add(a, b)\n}\n\nENTRY e {\n p = f32[8] parameter(0)\n ROOT r = f32[8] all-reduce(p), replica_groups={{0,1}}, to_apply=add\n}\n",
            CollectiveKind::AllReduce,
        );
        // Cross-replica: one group per partition.
        assert_eq!(
            ar.groups,
            vec![vec![0, 4], vec![1, 5], vec![2, 6], vec![3, 7]]
        );
        assert_eq!(ar.bytes, 32.0);
        let ag = first(
            "HloModule m, num_partitions=8\n\nENTRY e {\n p = bf16[2,4] parameter(0)\n ROOT g = bf16[8,4] all-gather(p), channel_id=1, replica_groups=[2,4]<=[8], dimensions={0}, use_global_device_ids=true\n}\n",
            CollectiveKind::AllGather,
        );
        assert_eq!(ag.groups, vec![vec![0, 1, 2, 3], vec![4, 5, 6, 7]]);
        assert_eq!(ag.bytes, 64.0);
        let all = first(
            "HloModule m, num_partitions=4\n\nadd {\n a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT s = f32[] add(a, b)\n}\n\nENTRY e {\n p = f32[8] parameter(0)\n ROOT r = f32[8] all-reduce(p), channel_id=1, replica_groups={}, to_apply=add\n}\n",
            CollectiveKind::AllReduce,
        );
        assert_eq!(all.groups, vec![vec![0, 1, 2, 3]]);
    }

    #[test]
    fn permute_pairs_and_async_forms() {
        let text = "HloModule m, num_partitions=4\n\nENTRY e {\n p = f32[16] parameter(0)\n s = (f32[16], f32[16], u32[], u32[]) collective-permute-start(p), channel_id=1, source_target_pairs={{0,1},{1,2},{2,3},{3,0}}\n ROOT d = f32[16] collective-permute-done(s)\n}\n";
        let m = tpusim_hlo::parse_module(text).unwrap();
        let start = InstrId(1);
        let c = collective(&m, start).unwrap();
        assert_eq!(c.pairs, vec![(0, 1), (1, 2), (2, 3), (3, 0)]);
        assert_eq!(c.bytes, 64.0);
        assert!(is_async_start(&m, start));
        assert_eq!(done_of(&m, InstrId(2)), Some(start));
        assert!(collective(&m, InstrId(2)).is_none());
    }
}
