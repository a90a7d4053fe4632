//! Collectives, device ids and async wrappers (HLO_SEMANTICS §10).
//!
//! Every device works out its group from `replica_groups`, `channel_id` and
//! `use_global_device_ids` (§10.1), deposits its operands at the rendezvous and
//! computes its own result from everyone's contributions in group (rank) order.

use crate::eval::Interp;
use crate::spmd::MeetKey;
use crate::value::{strides, Array, Data, Value};
use crate::{elementwise as ew, ops, InterpError};
use std::sync::Arc;
use tpusim_hlo::{AttrValue, CompId, InstrId, Opcode, PrimitiveType as T, Shape};

/// Whether `op` is evaluated here.
pub(crate) fn handles(op: Opcode) -> bool {
    use Opcode::*;
    matches!(
        op,
        PartitionId
            | ReplicaId
            | AllReduce
            | AllReduceStart
            | AllReduceDone
            | AllGather
            | AllGatherStart
            | AllGatherDone
            | ReduceScatter
            | AllToAll
            | CollectivePermute
            | CollectivePermuteStart
            | CollectivePermuteDone
            | CollectiveBroadcast
            | AsyncStart
            | AsyncUpdate
            | AsyncDone
    )
}

fn internal(msg: impl Into<String>) -> InterpError {
    InterpError::Internal(msg.into())
}

/// How replica-group ids map to devices (§10.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    CrossReplica,
    CrossPartition,
    CrossReplicaAndPartition,
    FlattenedId,
}

pub(crate) fn eval(
    interp: &Interp,
    id: InstrId,
    ops: &[Arc<Value>],
) -> Result<Arc<Value>, InterpError> {
    let ins = interp.m.instr(id);
    let dev = interp.dev;
    let u32_scalar =
        |v: usize| Arc::new(Value::Array(Array::from_i64s(T::U32, vec![], &[v as i64])));
    let result = match ins.opcode {
        Opcode::PartitionId => return Ok(u32_scalar(dev.partition)),
        Opcode::ReplicaId => return Ok(u32_scalar(dev.replica)),
        Opcode::AsyncStart => {
            let c = interp
                .m
                .instr(id)
                .attr_comp("calls")
                .ok_or_else(|| internal("async-start without calls"))?;
            let r = interp.run(c, ops)?;
            let operands = Value::Tuple(ops.to_vec());
            return start_value(&ins.shape, operands, (*r).clone());
        }
        Opcode::AsyncUpdate => return Ok(ops[0].clone()),
        Opcode::AsyncDone | Opcode::AllGatherDone | Opcode::CollectivePermuteDone => {
            return match &*ops[0] {
                Value::Tuple(t) if ins.opcode == Opcode::AsyncDone || t.len() >= 2 => t
                    .get(1)
                    .cloned()
                    .ok_or_else(|| internal("done of a short tuple")),
                _ => Ok(ops[0].clone()),
            };
        }
        Opcode::AllReduceDone => return Ok(ops[0].clone()),
        Opcode::AllReduce | Opcode::AllReduceStart => all_reduce(interp, id, ops)?,
        Opcode::AllGather | Opcode::AllGatherStart => all_gather(interp, id, ops)?,
        Opcode::ReduceScatter => reduce_scatter(interp, id, ops)?,
        Opcode::AllToAll => all_to_all(interp, id, ops)?,
        Opcode::CollectivePermute | Opcode::CollectivePermuteStart => {
            collective_permute(interp, id, ops)?
        }
        Opcode::CollectiveBroadcast => collective_broadcast(interp, id, ops)?,
        op => return Err(internal(format!("'{op}' is not a collective"))),
    };
    if matches!(
        ins.opcode,
        Opcode::AllGatherStart | Opcode::CollectivePermuteStart
    ) {
        let operands = one_or_tuple(ops.iter().map(|v| (**v).clone()).collect());
        return start_value(&ins.shape, operands, result);
    }
    Ok(Arc::new(result))
}

/// The value of a `*-start`: `(operands, result, context...)` when its shape is
/// such a tuple, else the result itself.
fn start_value(shape: &Shape, operands: Value, result: Value) -> Result<Arc<Value>, InterpError> {
    match shape {
        Shape::Tuple(t) if t.len() >= 2 => {
            let mut parts = vec![operands, result];
            for s in &t[2..] {
                parts.push(zeros_like_shape(s)?);
            }
            Ok(Arc::new(Value::tuple(parts)))
        }
        _ => Ok(Arc::new(result)),
    }
}

fn zeros_like_shape(s: &Shape) -> Result<Value, InterpError> {
    match s {
        Shape::Tuple(t) => Ok(Value::tuple(
            t.iter().map(zeros_like_shape).collect::<Result<_, _>>()?,
        )),
        _ => {
            let (ty, dims) = crate::eval::array_dims(s)?;
            Ok(Value::Array(Array::zeros(ty, dims)?))
        }
    }
}

fn one_or_tuple(mut v: Vec<Value>) -> Value {
    if v.len() == 1 {
        v.pop().unwrap_or(Value::tuple(Vec::new()))
    } else {
        Value::tuple(v)
    }
}

fn mode_of(interp: &Interp, id: InstrId) -> Mode {
    let ins = interp.m.instr(id);
    let has_channel = ins.attr("channel_id").is_some();
    let global_ids = ins.attr_bool("use_global_device_ids");
    let takes_global_flag = matches!(
        ins.opcode,
        Opcode::AllReduce
            | Opcode::AllReduceStart
            | Opcode::AllGather
            | Opcode::AllGatherStart
            | Opcode::ReduceScatter
    );
    match (has_channel, global_ids) {
        (false, _) => Mode::CrossReplica,
        (true, Some(true)) => Mode::FlattenedId,
        (true, _) if takes_global_flag => Mode::CrossReplicaAndPartition,
        (true, _) => Mode::CrossPartition,
    }
}

/// The participants of this device's group in rank order, and this device's rank.
/// `None` when the device is in no group.
fn my_group(interp: &Interp, id: InstrId) -> Result<Option<(Vec<usize>, usize)>, InterpError> {
    let ins = interp.m.instr(id);
    let d = interp.dev;
    let (r_count, p_count) = (d.replicas, d.partitions);
    let mode = mode_of(interp, id);
    let groups: Vec<Vec<i64>> = match ins.attr("replica_groups") {
        Some(AttrValue::ReplicaGroups(g)) => g.expand(),
        Some(AttrValue::IntLists(g)) => g.clone(),
        _ => Vec::new(),
    };
    let groups: Vec<Vec<i64>> = groups.into_iter().filter(|g| !g.is_empty()).collect();
    let id_count = match mode {
        Mode::CrossReplica | Mode::CrossReplicaAndPartition => r_count,
        Mode::CrossPartition => p_count,
        Mode::FlattenedId => r_count * p_count,
    };
    let my_id = match mode {
        Mode::CrossReplica | Mode::CrossReplicaAndPartition => d.replica,
        Mode::CrossPartition => d.partition,
        Mode::FlattenedId => d.replica * p_count + d.partition,
    };
    let groups = if groups.is_empty() {
        vec![(0..id_count as i64).collect()]
    } else {
        groups
    };
    for g in &groups {
        if let Some(&bad) = g.iter().find(|&&x| x < 0 || x as usize >= id_count) {
            return Err(internal(format!(
                "replica group id {bad} out of range (0..{id_count}) in {mode:?} mode"
            )));
        }
    }
    let Some(group) = groups.iter().find(|g| g.contains(&(my_id as i64))) else {
        return Ok(None);
    };
    let device_of = |r: usize, p: usize| p * r_count + r;
    let devices: Vec<usize> = match mode {
        Mode::CrossReplica => group
            .iter()
            .map(|&r| device_of(r as usize, d.partition))
            .collect(),
        Mode::CrossPartition => group
            .iter()
            .map(|&p| device_of(d.replica, p as usize))
            .collect(),
        Mode::CrossReplicaAndPartition => group
            .iter()
            .flat_map(|&r| (0..p_count).map(move |p| device_of(r as usize, p)))
            .collect(),
        Mode::FlattenedId => group
            .iter()
            .map(|&f| device_of(f as usize / p_count, f as usize % p_count))
            .collect(),
    };
    let rank = devices
        .iter()
        .position(|&x| x == d.device)
        .ok_or_else(|| internal("device missing from its own group"))?;
    Ok(Some((devices, rank)))
}

/// Deposits `value` and returns everyone's contributions in rank order.
pub(crate) fn exchange(
    interp: &Interp,
    id: InstrId,
    participants: Vec<usize>,
    rank: usize,
    value: Value,
) -> Result<Arc<Vec<Value>>, InterpError> {
    let dev = interp.dev;
    let key = MeetKey {
        instr: id,
        occurrence: dev.next_occurrence(id),
        participants,
    };
    dev.rendezvous.exchange(dev.device, key, rank, value)
}

/// The group and contributions of a grouped collective; a device in no group
/// gets only its own operands back (rank 0 of a group of one).
fn gather_group(
    interp: &Interp,
    id: InstrId,
    ops: &[Arc<Value>],
) -> Result<(Arc<Vec<Value>>, usize), InterpError> {
    let mine = Value::Tuple(ops.to_vec());
    match my_group(interp, id)? {
        Some((devices, rank)) => Ok((exchange(interp, id, devices, rank, mine)?, rank)),
        None => Ok((Arc::new(vec![mine]), 0)),
    }
}

/// Operand `k` of every participant, in rank order.
fn operand_of_all(all: &[Value], k: usize) -> Result<Vec<&Array>, InterpError> {
    all.iter()
        .map(|v| match v {
            Value::Tuple(t) => t
                .get(k)
                .ok_or_else(|| internal("missing contribution"))?
                .as_array(),
            Value::Array(a) => Ok(a),
        })
        .collect()
}

fn all_reduce(interp: &Interp, id: InstrId, ops: &[Arc<Value>]) -> Result<Value, InterpError> {
    let f = interp
        .m
        .instr(id)
        .attr_comp("to_apply")
        .ok_or_else(|| internal("all-reduce without to_apply"))?;
    let (all, _) = gather_group(interp, id, ops)?;
    let outs = (0..ops.len())
        .map(|k| reduce_in_order(interp, f, &operand_of_all(&all, k)?).map(Value::Array))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(if interp.m.instr(id).shape.is_tuple() {
        Value::tuple(outs)
    } else {
        one_or_tuple(outs)
    })
}

/// Folds `xs` element-wise with `f` in participant order: `f(f(x0, x1), x2)...`.
fn reduce_in_order(interp: &Interp, f: CompId, xs: &[&Array]) -> Result<Array, InterpError> {
    let first = xs.first().ok_or_else(|| internal("empty group"))?;
    let mut acc = (*first).clone();
    if let Some(op) = ops::simple_reducer(interp, f) {
        for x in &xs[1..] {
            acc = ew::binary(op, &acc, x, acc.ty, None, None)?;
        }
        return Ok(acc);
    }
    let scalar =
        |a: &Array, i: usize| Arc::new(Value::Array(Array::new(a.ty, vec![], a.data.take(&[i]))));
    let n = acc.len();
    let mut vals: Vec<Value> = Vec::with_capacity(n);
    for i in 0..n {
        let mut e = scalar(&acc, i);
        for x in &xs[1..] {
            e = interp.run(f, &[e, scalar(x, i)])?;
        }
        vals.push((*e).clone());
    }
    let parts: Vec<&Data> = vals
        .iter()
        .map(|v| v.as_array().map(|a| &a.data))
        .collect::<Result<_, _>>()?;
    if parts.is_empty() {
        return Ok(acc);
    }
    Ok(Array::new(acc.ty, acc.dims.clone(), Data::concat(&parts)?))
}

fn dimension(interp: &Interp, id: InstrId) -> Result<usize, InterpError> {
    interp
        .m
        .instr(id)
        .attr_ints("dimensions")
        .and_then(|d| d.first().copied())
        .map(|d| d as usize)
        .ok_or_else(|| internal("missing dimensions"))
}

/// Concatenates same-typed arrays along `d`.
fn concat_along(parts: &[&Array], d: usize) -> Result<Array, InterpError> {
    let first = parts
        .first()
        .ok_or_else(|| internal("empty concatenation"))?;
    let dims = &first.dims;
    if d >= dims.len() {
        return Err(internal(format!("dimension {d} out of range")));
    }
    let outer: usize = dims[..d].iter().product();
    let inner: usize = dims[d + 1..].iter().product();
    let mut out_dims = dims.clone();
    out_dims[d] = parts
        .iter()
        .map(|p| p.dims.get(d).copied().unwrap_or(0))
        .sum();
    let mut offsets = Vec::with_capacity(parts.len());
    let mut off = 0;
    for p in parts {
        if p.dims.len() != dims.len() || p.ty != first.ty {
            return Err(internal("concatenating mismatched shards"));
        }
        offsets.push(off);
        off += p.len();
    }
    let all = Data::concat(&parts.iter().map(|p| &p.data).collect::<Vec<_>>())?;
    let mut idx = Vec::with_capacity(all.len());
    for o in 0..outer {
        for (p, &base) in parts.iter().zip(&offsets) {
            let chunk = p.dims[d] * inner;
            idx.extend(base + o * chunk..base + (o + 1) * chunk);
        }
    }
    Ok(Array::new(first.ty, out_dims, all.take(&idx)))
}

/// Block `j` of `n` equal blocks of `a` along `d`.
fn block_along(a: &Array, d: usize, n: usize, j: usize) -> Result<Array, InterpError> {
    let size = a
        .dims
        .get(d)
        .copied()
        .ok_or_else(|| internal("dimension out of range"))?;
    if n == 0 || size % n != 0 {
        return Err(internal(format!(
            "dimension of size {size} does not split into {n} blocks"
        )));
    }
    let b = size / n;
    let st = strides(&a.dims);
    let mut out_dims = a.dims.clone();
    out_dims[d] = b;
    let outer: usize = a.dims[..d].iter().product();
    let mut idx = Vec::with_capacity(a.len() / n);
    for o in 0..outer {
        let base = o * size * st[d] + j * b * st[d];
        idx.extend(base..base + b * st[d]);
    }
    Ok(Array::new(a.ty, out_dims, a.data.take(&idx)))
}

fn all_gather(interp: &Interp, id: InstrId, ops: &[Arc<Value>]) -> Result<Value, InterpError> {
    let d = dimension(interp, id)?;
    let (all, _) = gather_group(interp, id, ops)?;
    let outs = (0..ops.len())
        .map(|k| concat_along(&operand_of_all(&all, k)?, d).map(Value::Array))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(one_or_tuple(outs))
}

fn reduce_scatter(interp: &Interp, id: InstrId, ops: &[Arc<Value>]) -> Result<Value, InterpError> {
    let d = dimension(interp, id)?;
    let f = interp
        .m
        .instr(id)
        .attr_comp("to_apply")
        .ok_or_else(|| internal("reduce-scatter without to_apply"))?;
    let (all, rank) = gather_group(interp, id, ops)?;
    let n = all.len();
    let outs = (0..ops.len())
        .map(|k| {
            let sum = reduce_in_order(interp, f, &operand_of_all(&all, k)?)?;
            block_along(&sum, d, n, rank).map(Value::Array)
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(one_or_tuple(outs))
}

fn all_to_all(interp: &Interp, id: InstrId, ops: &[Arc<Value>]) -> Result<Value, InterpError> {
    let split = interp
        .m
        .instr(id)
        .attr_ints("dimensions")
        .and_then(|d| d.first().copied());
    let (all, rank) = gather_group(interp, id, ops)?;
    let n = all.len();
    match split {
        Some(d) => {
            let d = d as usize;
            let outs = (0..ops.len())
                .map(|k| {
                    let received: Vec<Array> = operand_of_all(&all, k)?
                        .into_iter()
                        .map(|x| block_along(x, d, n, rank))
                        .collect::<Result<_, _>>()?;
                    concat_along(&received.iter().collect::<Vec<_>>(), d).map(Value::Array)
                })
                .collect::<Result<Vec<_>, _>>()?;
            Ok(one_or_tuple(outs))
        }
        None => {
            if ops.len() != n {
                return Err(internal(format!(
                    "tuple all-to-all with {} operands in a group of {n}",
                    ops.len()
                )));
            }
            let received = operand_of_all(&all, rank)?;
            Ok(Value::tuple(
                received
                    .into_iter()
                    .map(|a| Value::Array(a.clone()))
                    .collect(),
            ))
        }
    }
}

fn collective_permute(
    interp: &Interp,
    id: InstrId,
    ops: &[Arc<Value>],
) -> Result<Value, InterpError> {
    let ins = interp.m.instr(id);
    if ops.len() != 1 && ins.attr("slice_sizes").is_some() {
        return Err(InterpError::Unsupported(
            "in-place collective-permute (slice_sizes)".into(),
        ));
    }
    let pairs: Vec<(usize, usize)> = match ins.attr("source_target_pairs") {
        Some(AttrValue::IntLists(p)) => p
            .iter()
            .map(|p| match p.as_slice() {
                [s, t] if *s >= 0 && *t >= 0 => Ok((*s as usize, *t as usize)),
                _ => Err(internal(format!("bad source-target pair {p:?}"))),
            })
            .collect::<Result<_, _>>()?,
        Some(AttrValue::Ints(v)) if v.is_empty() => Vec::new(),
        None => Vec::new(),
        Some(other) => return Err(internal(format!("bad source_target_pairs {other:?}"))),
    };
    let d = interp.dev;
    // Ids are partition ids with a channel, replica ids without (§10.2).
    let (domain, my_id): (Vec<usize>, usize) = if ins.attr("channel_id").is_some() {
        (
            (0..d.partitions)
                .map(|p| p * d.replicas + d.replica)
                .collect(),
            d.partition,
        )
    } else {
        (
            (0..d.replicas)
                .map(|r| d.partition * d.replicas + r)
                .collect(),
            d.replica,
        )
    };
    if let Some(&(s, t)) = pairs
        .iter()
        .find(|&&(s, t)| s >= domain.len() || t >= domain.len())
    {
        return Err(internal(format!(
            "source-target pair {{{s},{t}}} out of range"
        )));
    }
    let mine = Value::Tuple(ops.to_vec());
    let all = exchange(interp, id, domain, my_id, mine)?;
    let source = pairs.iter().find(|&&(_, t)| t == my_id).map(|&(s, _)| s);
    let outs = (0..ops.len())
        .map(|k| {
            let own = ops[k].as_array()?;
            match source {
                Some(s) => Ok(Value::Array(operand_of_all(&all[s..=s], k)?[0].clone())),
                None => Ok(Value::Array(Array::zeros(own.ty, own.dims.clone())?)),
            }
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(one_or_tuple(outs))
}

fn collective_broadcast(
    interp: &Interp,
    id: InstrId,
    ops: &[Arc<Value>],
) -> Result<Value, InterpError> {
    let outs = match my_group(interp, id)? {
        Some((devices, rank)) => {
            let mine = Value::Tuple(ops.to_vec());
            let all = exchange(interp, id, devices, rank, mine)?;
            operand_values(&all[0])
        }
        None => ops
            .iter()
            .map(|v| {
                let a = v.as_array()?;
                Ok(Value::Array(Array::zeros(a.ty, a.dims.clone())?))
            })
            .collect::<Result<Vec<_>, InterpError>>()?,
    };
    Ok(one_or_tuple(outs))
}

fn operand_values(v: &Value) -> Vec<Value> {
    match v {
        Value::Tuple(t) => t.iter().map(|x| (**x).clone()).collect(),
        a => vec![a.clone()],
    }
}
