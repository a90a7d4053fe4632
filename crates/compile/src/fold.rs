//! `all-reduce(all-reduce(x))` over two sets of device groups becomes one
//! all-reduce over their combination (XLA's AllReduceFolder, the first of
//! the collective optimizations XLA runs after SPMD partitioning). XLA's
//! partitioner reduces a value whose partial sums span two mesh axes one
//! axis at a time; the TPU runs one collective over both.
//!
//! The groups combine when every device's result sums each contributor
//! once and the devices that share contributors form a partition: the
//! contributors of a device are the inner groups of the members of its
//! outer group.

use crate::util::{expanded_groups, scalar_reducer_op, users, ChannelIds};
use crate::Changed;
use rustc_hash::{FxHashMap, FxHashSet};
use tpusim_hlo::attr::{set_attr, AttrValue, ReplicaGroups};
use tpusim_hlo::{InstrId, Instruction, Module, Opcode};

/// Folds every all-reduce of a single-use all-reduce it can; returns how
/// many.
pub fn fold_all_reduces(m: &mut Module) -> Changed {
    let mut channels = ChannelIds::new(m);
    let mut folded = 0;
    for c in tpusim_hlo::passes::control_computations(m) {
        let uses = users(m, c);
        let mut removed = FxHashSet::default();
        let order: Vec<InstrId> = m.comp(c).instrs.clone();
        for outer in order {
            let o = m.instr(outer);
            if o.opcode != Opcode::AllReduce || o.operands.len() != 1 {
                continue;
            }
            let inner = o.operands[0];
            let single_use = uses.get(&inner).is_some_and(|u| u.len() == 1);
            if !single_use || m.comp(c).root == inner || !foldable(m, m.instr(inner), o) {
                continue;
            }
            let (Some(g0), Some(g1)) = (groups(m.instr(inner)), groups(o)) else {
                continue;
            };
            let Some(combined) = combine_groups(&g0, &g1) else {
                continue;
            };
            let source = m.instr(inner).operands[0];
            let channel = m
                .instr(inner)
                .attr("channel_id")
                .is_some()
                .then(|| channels.fresh());
            let ins = &mut m.instrs[outer.index()];
            ins.operands = vec![source];
            set_attr(
                &mut ins.attrs,
                "replica_groups",
                AttrValue::ReplicaGroups(Box::new(ReplicaGroups::Explicit(combined))),
            );
            if let Some(id) = channel {
                set_attr(&mut ins.attrs, "channel_id", AttrValue::Int(id));
            }
            removed.insert(inner);
            folded += 1;
        }
        if !removed.is_empty() {
            m.comps[c.index()].instrs.retain(|i| !removed.contains(i));
        }
    }
    Changed::count(folded, |n| {
        format!("{n} all-reduce(all-reduce) over two sets of groups → one all-reduce")
    })
}

/// Whether two array all-reduces reduce alike (same reducer, device-id
/// mode, channel or not), apart from their groups.
fn foldable(m: &Module, inner: &Instruction, outer: &Instruction) -> bool {
    let plain = |i: &Instruction| {
        i.opcode == Opcode::AllReduce
            && i.operands.len() == 1
            && !i.shape.is_tuple()
            && i.attr("constrain_layout").is_none()
            && i.attr("control-predecessors").is_none()
    };
    let reducer = |i: &Instruction| {
        i.attr_comp("to_apply")
            .and_then(|r| scalar_reducer_op(m, r))
    };
    let same = |name: &str| inner.attr(name) == outer.attr(name);
    plain(inner)
        && plain(outer)
        && inner.shape == outer.shape
        && reducer(inner).is_some()
        && reducer(inner) == reducer(outer)
        && same("use_global_device_ids")
        && inner.attr("channel_id").is_some() == outer.attr("channel_id").is_some()
}

/// An all-reduce's groups as lists of ids; `None` when it names none (all
/// devices: XLA folds only listed groups).
fn groups(ins: &Instruction) -> Option<Vec<Vec<i64>>> {
    expanded_groups(ins).filter(|g| !g.is_empty())
}

/// The groups of one all-reduce equal to `inner` then `outer`, or `None`
/// when a device would sum some contributor twice or devices sharing a
/// contributor disagree on the others.
fn combine_groups(inner: &[Vec<i64>], outer: &[Vec<i64>]) -> Option<Vec<Vec<i64>>> {
    let mut inner_of: FxHashMap<i64, usize> = FxHashMap::default();
    for (k, g) in inner.iter().enumerate() {
        for &d in g {
            if inner_of.insert(d, k).is_some() {
                return None;
            }
        }
    }
    // Each outer group's contributors (its members' inner groups, which
    // are disjoint: a device would sum some contributor twice exactly when
    // two members share an inner group); a device's combined group is its
    // outer group's. Linear in the devices.
    let mut set_index: FxHashMap<Vec<i64>, usize> = FxHashMap::default();
    let mut set_of: FxHashMap<i64, usize> = FxHashMap::default();
    let mut sets: Vec<Vec<i64>> = Vec::new();
    for g in outer {
        let mut seen = FxHashSet::default();
        let mut contributors: Vec<i64> = Vec::new();
        for d in g {
            let k = *inner_of.get(d)?;
            if !seen.insert(k) {
                return None;
            }
            contributors.extend_from_slice(&inner[k]);
        }
        contributors.sort_unstable();
        let next = sets.len();
        let k = *set_index.entry(contributors.clone()).or_insert(next);
        if k == next {
            sets.push(contributors);
        }
        for &d in g {
            if set_of.insert(d, k).is_some() {
                return None;
            }
        }
    }
    // Every contributor of a set must itself get that set.
    for (k, s) in sets.iter().enumerate() {
        if s.iter().any(|d| set_of.get(d) != Some(&k)) {
            return None;
        }
    }
    sets.sort_by_key(|s| s.first().copied());
    Some(sets)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_over_two_axes_combine_into_their_product() {
        // 8 devices as a 2x4 mesh: first over the 4s, then over the 2s.
        let inner = vec![vec![0, 1, 2, 3], vec![4, 5, 6, 7]];
        let outer = vec![vec![0, 4], vec![1, 5], vec![2, 6], vec![3, 7]];
        assert_eq!(
            combine_groups(&inner, &outer),
            Some(vec![(0..8).collect::<Vec<i64>>()])
        );
        // Pairs then pairs of pairs: groups of four.
        let inner = vec![vec![0, 1], vec![2, 3], vec![4, 5], vec![6, 7]];
        let outer = vec![vec![0, 2], vec![1, 3], vec![4, 6], vec![5, 7]];
        assert_eq!(
            combine_groups(&inner, &outer),
            Some(vec![vec![0, 1, 2, 3], vec![4, 5, 6, 7]])
        );
    }

    #[test]
    fn groups_that_would_count_a_device_twice_or_disagree_stay_apart() {
        // The same groups twice: each device would sum its partner twice.
        let g = vec![vec![0, 1], vec![2, 3]];
        assert_eq!(combine_groups(&g, &g), None);
        // Overlapping chains: device 1's sum is {0,1,2,3} but device 0's
        // is only {0,1}.
        let inner = vec![vec![0, 1], vec![2, 3]];
        let outer = vec![vec![0], vec![1, 2], vec![3]];
        assert_eq!(combine_groups(&inner, &outer), None);
        // A device the inner groups never list.
        assert_eq!(combine_groups(&[vec![0, 1]], &[vec![0, 2]]), None);
    }

    const TWO_AXES: &str = r#"HloModule folds, num_partitions=8
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY e {
  x = f32[16,8] parameter(0)
  inner = f32[16,8] all-reduce(x), channel_id=1, replica_groups=[2,4]<=[8], use_global_device_ids=true, to_apply=add
  ROOT outer = f32[16,8] all-reduce(inner), channel_id=2, replica_groups=[4,2]<=[2,4]T(1,0), use_global_device_ids=true, to_apply=add
}
"#;

    #[test]
    fn an_all_reduce_of_an_all_reduce_becomes_one_over_all_their_devices() {
        let mut m = tpusim_hlo::parse_module(TWO_AXES).unwrap();
        assert!(matches!(fold_all_reduces(&mut m), Changed::Yes(_)));
        tpusim_hlo::verifier::verify(&m).unwrap();
        let root = m.instr(m.entry().root);
        assert_eq!(root.opcode, Opcode::AllReduce);
        assert_eq!(m.instr(root.operands[0]).name, "x");
        assert_eq!(groups(root), Some(vec![(0..8).collect::<Vec<i64>>()]));
        assert!(!m.entry().instrs.iter().any(|&i| m.instr(i).name == "inner"));
    }

    #[test]
    fn only_all_reduces_fold() {
        // An all-reduce of a reduce-scatter (a gradient shard summed over
        // the data axis) is two collectives of different kinds.
        let text = TWO_AXES
            .replace(
                "inner = f32[16,8] all-reduce(x)",
                "inner = f32[4,8] reduce-scatter(x)",
            )
            .replace(
                "use_global_device_ids=true, to_apply=add\n  ROOT",
                "use_global_device_ids=true, dimensions={0}, to_apply=add\n  ROOT",
            )
            .replace("ROOT outer = f32[16,8]", "ROOT outer = f32[4,8]");
        let mut m = tpusim_hlo::parse_module(&text).unwrap();
        tpusim_hlo::verifier::verify(&m).unwrap();
        assert_eq!(fold_all_reduces(&mut m), Changed::No);
        // A second reader of the inner all-reduce keeps it.
        let body = TWO_AXES.replace("ROOT outer", "outer");
        let body = body.trim_end().strip_suffix('}').unwrap();
        let text = format!("{body}  ROOT t = (f32[16,8], f32[16,8]) tuple(inner, outer)\n}}\n");
        let mut m = tpusim_hlo::parse_module(&text).unwrap();
        tpusim_hlo::verifier::verify(&m).unwrap();
        assert_eq!(fold_all_reduces(&mut m), Changed::No);
    }
}
