//! `all-reduce` whose only user slices out this device's shard
//! (`dynamic-slice` at an offset computed from `partition-id`/`replica-id`)
//! becomes a `reduce-scatter` (XLA's ReduceScatterCreator): each device
//! receives only its shard, so the collective moves `1/n` of the bytes.

use crate::util::{control_computations, group_size, replace_uses, sort_attrs, users};
use crate::Changed;
use tpusim_hlo::literal::{Literal, LiteralData};
use tpusim_hlo::{Attr, AttrValue, InstrId, Instruction, Module, Opcode};

/// How far up an offset's operands the pass looks for the device id.
const MAX_OFFSET_DEPTH: u32 = 12;

/// Rewrites every matching all-reduce + dynamic-slice pair; returns how many.
pub fn all_reduce_to_reduce_scatter(m: &mut Module) -> Changed {
    let mut rewritten = 0;
    for c in control_computations(m) {
        let uses = users(m, c);
        let mut pairs = Vec::new();
        for &ds in &m.comp(c).instrs {
            let ins = m.instr(ds);
            if ins.opcode != Opcode::DynamicSlice {
                continue;
            }
            let ar = ins.operands[0];
            let only_user = uses.get(&ar).is_some_and(|u| u.len() == 1);
            if m.comp(c).root == ar || !only_user {
                continue;
            }
            if let Some(dim) = shard_dimension(m, ar, ds) {
                pairs.push((ar, ds, dim));
            }
        }
        for (ar, ds, dim) in pairs {
            let rs = reduce_scatter_for(m, ar, ds, dim);
            let comp = &mut m.comps[c.index()];
            comp.instrs.retain(|&i| i != ar);
            if let Some(k) = comp.instrs.iter().position(|&i| i == ds) {
                comp.instrs[k] = rs;
            }
            replace_uses(m, c, ds, rs);
            rewritten += 1;
        }
    }
    Changed::count(rewritten, |n| {
        format!("{n} all-reduce + dynamic-slice → reduce-scatter")
    })
}

/// The dimension `ds` slices out of all-reduce `ar` when it takes exactly this
/// device's `1/n` shard of one dimension and all of the others.
fn shard_dimension(m: &Module, ar: InstrId, ds: InstrId) -> Option<usize> {
    let a = m.instr(ar);
    if a.opcode != Opcode::AllReduce || a.operands.len() != 1 || a.shape.is_tuple() {
        return None;
    }
    let n = group_size(m, a)?;
    let full = a.shape.dims();
    let sizes = m.instr(ds).attr_ints("dynamic_slice_sizes")?;
    let offsets = &m.instr(ds).operands[1..];
    if sizes.len() != full.len() || offsets.len() != full.len() || n <= 1 {
        return None;
    }
    let mut sharded = None;
    for (d, (&size, &dim)) in sizes.iter().zip(full).enumerate() {
        if size == dim && is_zero(m.instr(offsets[d])) {
            continue;
        }
        if sharded.is_some() || size.checked_mul(n) != Some(dim) {
            return None;
        }
        if !depends_on_device_id(m, offsets[d], MAX_OFFSET_DEPTH) {
            return None;
        }
        sharded = Some(d);
    }
    sharded
}

fn is_zero(ins: &Instruction) -> bool {
    ins.opcode == Opcode::Constant
        && matches!(&ins.literal, Some(Literal::Array(LiteralData::Int(v))) if v.iter().all(|&x| x == 0))
}

fn depends_on_device_id(m: &Module, id: InstrId, depth: u32) -> bool {
    let ins = m.instr(id);
    if matches!(ins.opcode, Opcode::PartitionId | Opcode::ReplicaId) {
        return true;
    }
    depth > 0
        && ins
            .operands
            .iter()
            .any(|&o| depends_on_device_id(m, o, depth - 1))
}

fn reduce_scatter_for(m: &mut Module, ar: InstrId, ds: InstrId, dim: usize) -> InstrId {
    let a = m.instr(ar).clone();
    let d = m.instr(ds);
    let mut attrs: Vec<Attr> = a
        .attrs
        .iter()
        .filter(|x| x.name != "metadata")
        .cloned()
        .collect();
    attrs.push(Attr {
        name: "dimensions".into(),
        value: AttrValue::Ints(vec![dim as i64]),
    });
    if let Some(md) = d.attr("metadata") {
        attrs.push(Attr {
            name: "metadata".into(),
            value: md.clone(),
        });
    }
    sort_attrs(&mut attrs);
    let rs = Instruction {
        name: d.name.clone(),
        opcode: Opcode::ReduceScatter,
        shape: d.shape.clone(),
        operands: a.operands.clone(),
        attrs,
        parent: a.parent,
        parameter_number: None,
        literal: None,
        async_sugar: None,
    };
    // The slice's name is taken over; rename the dead slice so names stay unique.
    m.instrs[ds.index()].name = format!("{}.sliced", d.name);
    crate::util::push_instr(m, rs)
}
