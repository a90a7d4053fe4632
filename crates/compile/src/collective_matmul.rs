//! Collective matmul (XLA:TPU's `xla_tpu_decompose_all_gather_einsum`, the
//! all-gather half of "Overlap communication with dependent computation via
//! decomposition", Wang et al., ASPLOS 2023): an `all-gather` read only by a
//! dot is split into chunks along one of the dot's free dimensions, each
//! chunk gathered and multiplied on its own, so the gather of chunk `i + 1`
//! runs while the MXU works on chunk `i` and only the first chunk's gather
//! is exposed. XLA:TPU rotates the shards with collective-permutes instead;
//! both move the same bytes in `n` steps of `1/n`.
//!
//! The rewrite is exact: a dot's rows (or columns) are independent, so
//! `dot(all-gather(x), w)` is the concatenation of `dot(all-gather(x_i), w)`
//! over chunks `x_i` of a free dimension that is not the gathered one.
//!
//! Off by default, as in XLA; `CompileOptions::collective_matmul` turns it on.

use crate::util::{all_names, control_computations, push_instr, replace_uses, resized, users};
use crate::Changed;
use tpusim_hlo::attr::SliceDim;
use tpusim_hlo::NameTable;
use tpusim_hlo::{Attr, AttrValue, CompId, InstrId, Instruction, Module, Opcode, Shape};

/// Gathers over more devices than this are left whole (the rewrite adds
/// three instructions per chunk).
const MAX_CHUNKS: i64 = 256;

/// Splits every all-gather whose only user is a dot into as many chunks as
/// the gather has devices, when each chunk keeps at least `min_chunk` rows
/// of the split dimension (one MXU edge: a thinner chunk would pad every MXU
/// pass).
pub fn decompose_all_gather_dots(m: &mut Module, min_chunk: i64) -> Changed {
    let mut names = None;
    let mut channels = crate::util::ChannelIds::new(m);
    let mut decomposed = 0;
    let mut chunks = 0;
    for c in control_computations(m) {
        let uses = users(m, c);
        // One decomposition per dot: of its two gathered operands, the larger.
        let mut plans: Vec<Plan> = Vec::new();
        for &ag in &m.comp(c).instrs {
            let Some(&[dot]) = uses.get(&ag).map(Vec::as_slice) else {
                continue;
            };
            let Some(p) = plan(m, c, ag, dot, min_chunk) else {
                continue;
            };
            let bytes = |p: &Plan| m.instr(p.ag).shape.byte_size();
            match plans.iter_mut().find(|q| q.dot == p.dot) {
                Some(q) if bytes(q) < bytes(&p) => *q = p,
                Some(_) => {}
                None => plans.push(p),
            }
        }
        for p in plans {
            chunks += p.n;
            let names = names.get_or_insert_with(|| all_names(m));
            rewrite(m, c, &p, names, &mut channels);
            decomposed += 1;
        }
    }
    Changed::count(decomposed, |n| {
        format!(
            "{n} all-gather + dot pairs decomposed into {chunks} chunks (collective matmul: \
             each chunk's gather overlaps the previous chunk's dot)"
        )
    })
}

/// One all-gather + dot to decompose.
struct Plan {
    ag: InstrId,
    dot: InstrId,
    /// The dot operand index the all-gather feeds.
    side: usize,
    /// The split dimension of the all-gather's operand and result.
    split: usize,
    /// The dot result's dimension that the split dimension becomes.
    out_dim: usize,
    /// Chunks (the gather's device count).
    n: i64,
}

fn plan(m: &Module, c: CompId, ag: InstrId, dot: InstrId, min_chunk: i64) -> Option<Plan> {
    let a = m.instr(ag);
    let d = m.instr(dot);
    if a.opcode != Opcode::AllGather
        || a.operands.len() != 1
        || a.shape.is_tuple()
        || d.opcode != Opcode::Dot
        || d.operands.len() != 2
        || d.operands[0] == d.operands[1]
        || m.comp(c).root == ag
    {
        return None;
    }
    let gathered = usize::try_from(*a.attr_ints("dimensions")?.first()?).ok()?;
    let n = crate::util::group_size(m, a)?;
    if !(2..=MAX_CHUNKS).contains(&n) {
        return None;
    }
    let side = d.operands.iter().position(|&o| o == ag)?;
    let (prefix, other_prefix) = if side == 0 {
        ("lhs", "rhs")
    } else {
        ("rhs", "lhs")
    };
    let dims_of = |name: String| d.attr_ints(&name).unwrap_or(&[]).to_vec();
    let contracting = dims_of(format!("{prefix}_contracting_dims"));
    let batch = dims_of(format!("{prefix}_batch_dims"));
    let shape = a.shape.dims();
    let free: Vec<usize> = (0..shape.len())
        .filter(|&j| !contracting.contains(&(j as i64)) && !batch.contains(&(j as i64)))
        .collect();
    // The largest free dimension other than the gathered one, split evenly.
    let (rank_in_free, &split) = free
        .iter()
        .enumerate()
        .filter(|&(_, &j)| j != gathered && shape[j] % n == 0 && shape[j] / n >= min_chunk)
        .max_by_key(|&(_, &j)| shape[j])?;
    let lhs_free = if side == 0 {
        free.len()
    } else {
        let other = m.instr(d.operands[0]).shape.rank();
        let oc = dims_of(format!("{other_prefix}_contracting_dims")).len();
        let ob = dims_of(format!("{other_prefix}_batch_dims")).len();
        other.checked_sub(oc + ob)?
    };
    let out_dim = batch.len() + if side == 0 { 0 } else { lhs_free } + rank_in_free;
    Some(Plan {
        ag,
        dot,
        side,
        split,
        out_dim,
        n,
    })
}

fn rewrite(
    m: &mut Module,
    c: CompId,
    p: &Plan,
    names: &mut NameTable,
    channels: &mut crate::util::ChannelIds,
) {
    let a = m.instr(p.ag).clone();
    let d = m.instr(p.dot).clone();
    let x = a.operands[0];
    let x_shape = m.instr(x).shape.clone();
    let chunk = x_shape.dims()[p.split] / p.n;
    let mut added = Vec::new();
    let mut parts = Vec::new();
    // Chunks are issued last first: a consumer fusion may absorb the
    // concatenate's first operand's dot, which then runs last.
    for i in (0..p.n).rev() {
        let piece = push_instr(
            m,
            Instruction {
                name: names.fresh(&format!("{}.chunk", a.name)),
                opcode: Opcode::Slice,
                shape: resized(&x_shape, p.split, chunk),
                operands: vec![x],
                attrs: vec![slice_attr(&x_shape, p.split, i * chunk, chunk)],
                parent: a.parent,
                parameter_number: None,
                literal: None,
                async_sugar: None,
            },
        );
        let mut attrs = a.attrs.clone();
        if let Some(ch) = attrs.iter_mut().find(|x| x.name == "channel_id") {
            ch.value = AttrValue::Int(channels.fresh());
        }
        let gathered = push_instr(
            m,
            Instruction {
                name: names.fresh(&a.name),
                shape: resized(&a.shape, p.split, chunk),
                operands: vec![piece],
                attrs,
                ..a.clone()
            },
        );
        let mut operands = d.operands.clone();
        operands[p.side] = gathered;
        let part = push_instr(
            m,
            Instruction {
                name: names.fresh(&d.name),
                shape: resized(&d.shape, p.out_dim, chunk),
                operands,
                ..d.clone()
            },
        );
        // Software-pipelined order: each chunk's gather is issued before the
        // previous chunk's dot.
        added.extend([piece, gathered]);
        if let Some(previous) = parts.last() {
            added.push(*previous);
        }
        parts.push(part);
    }
    added.extend(parts.last());
    parts.reverse();
    let concat = push_instr(
        m,
        Instruction {
            name: names.fresh(&format!("{}.concat", d.name)),
            opcode: Opcode::Concatenate,
            shape: d.shape.clone(),
            operands: parts,
            attrs: vec![Attr {
                name: "dimensions".into(),
                value: AttrValue::Ints(vec![p.out_dim as i64]),
            }],
            parent: d.parent,
            parameter_number: None,
            literal: None,
            async_sugar: None,
        },
    );
    added.push(concat);
    let comp = &mut m.comps[c.index()];
    let at = comp
        .instrs
        .iter()
        .position(|&i| i == p.dot)
        .unwrap_or(comp.instrs.len());
    comp.instrs.splice(at..at, added);
    comp.instrs.retain(|&i| i != p.dot && i != p.ag);
    replace_uses(m, c, p.dot, concat);
}

/// `slice={[0:d0], ..., [start:start+size], ...}` of `shape`.
fn slice_attr(shape: &Shape, dim: usize, start: i64, size: i64) -> Attr {
    let ranges = shape
        .dims()
        .iter()
        .enumerate()
        .map(|(j, &n)| {
            let (start, limit) = if j == dim {
                (start, start + size)
            } else {
                (0, n)
            };
            SliceDim {
                start,
                limit,
                stride: 1,
            }
        })
        .collect();
    Attr {
        name: "slice".into(),
        value: AttrValue::Slice(ranges),
    }
}
