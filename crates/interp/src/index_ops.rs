//! Dispatch for gather, scatter, select-and-scatter, sort, top-k, random bits, map
//! and the token / dynamic-shape ops (each kernel lives in its own module).

use crate::eval::{array_dims, Interp};
use crate::lift::internal;
use crate::value::{Array, Value};
use crate::{gather, lift, rng, scatter, sort, window, InterpError};
use std::sync::Arc;
use tpusim_hlo::{AttrValue, InstrId, Opcode, Shape};

/// Whether [`eval`] implements `op`.
pub(crate) fn handles(op: Opcode) -> bool {
    matches!(
        op,
        Opcode::Gather
            | Opcode::Scatter
            | Opcode::SelectAndScatter
            | Opcode::Sort
            | Opcode::TopK
            | Opcode::RngBitGenerator
            | Opcode::Rng
            | Opcode::RngGetAndUpdateState
            | Opcode::Map
            | Opcode::AfterAll
            | Opcode::SetDimensionSize
            | Opcode::DynamicReshape
    )
}

fn arrays(ops: &[Arc<Value>]) -> Result<Vec<&Array>, InterpError> {
    ops.iter().map(|v| v.as_array()).collect()
}

fn arr(ops: &[Arc<Value>], i: usize) -> Result<&Array, InterpError> {
    ops.get(i)
        .ok_or_else(|| internal(format!("missing operand {i}")))?
        .as_array()
}

/// Element type and dims of tuple element `i` of `shape`.
fn leaf_dims(
    shape: &Shape,
    i: usize,
) -> Result<(tpusim_hlo::PrimitiveType, Vec<usize>), InterpError> {
    match shape {
        Shape::Tuple(t) => array_dims(t.get(i).ok_or_else(|| internal("short tuple shape"))?),
        _ => Err(internal("expected a tuple result shape")),
    }
}

/// Evaluates one of the ops [`handles`] accepts.
pub(crate) fn eval(interp: &Interp, id: InstrId, ops: &[Arc<Value>]) -> Result<Value, InterpError> {
    let ins = interp.m.instr(id);
    let comp = |name: &str| {
        ins.attr_comp(name)
            .ok_or_else(|| internal(format!("missing attribute {name}")))
    };
    match ins.opcode {
        Opcode::Gather => {
            let (_, dims) = array_dims(&ins.shape)?;
            gather::gather(ins, arr(ops, 0)?, arr(ops, 1)?, dims).map(Value::Array)
        }
        Opcode::Scatter => scatter::scatter(interp, id, ops),
        Opcode::SelectAndScatter => {
            window::select_and_scatter(interp, id, arr(ops, 0)?, arr(ops, 1)?, arr(ops, 2)?)
                .map(Value::Array)
        }
        Opcode::Sort => {
            let dim = ins
                .attr_ints("dimensions")
                .and_then(|d| d.first().copied())
                .unwrap_or(0)
                .max(0) as usize;
            sort::sort(interp, &arrays(ops)?, dim, comp("to_apply")?)
        }
        Opcode::TopK => {
            let k = ins
                .attr_int("k")
                .ok_or_else(|| internal("topk without k"))?;
            let largest = ins.attr_bool("largest").unwrap_or(true);
            sort::topk(interp, arr(ops, 0)?, k.max(0) as usize, largest)
        }
        Opcode::RngBitGenerator => {
            let (ty, dims) = leaf_dims(&ins.shape, 1)?;
            let alg = ins.attr_ident("algorithm").unwrap_or("rng_default");
            rng::rng_bit_generator(arr(ops, 0)?, alg, ty, dims)
        }
        Opcode::Rng => {
            let (ty, dims) = array_dims(&ins.shape)?;
            let dist = ins.attr_ident("distribution").unwrap_or("rng_uniform");
            rng::rng(
                &interp.rng_state,
                arr(ops, 0)?,
                arr(ops, 1)?,
                dist,
                ty,
                dims,
            )
            .map(Value::Array)
        }
        Opcode::RngGetAndUpdateState => {
            let delta = ins.attr_int("delta").unwrap_or(0);
            Ok(rng::rng_get_and_update_state(&interp.rng_state, delta))
        }
        Opcode::Map => {
            let (_, dims) = array_dims(&ins.shape)?;
            lift::map(interp, comp("to_apply")?, &arrays(ops)?, dims).map(Value::Array)
        }
        // A token carries no data: an empty tuple stands for it.
        Opcode::AfterAll => Ok(Value::tuple(vec![])),
        // Static interpretation: sizes are the bounds, so the operand is unchanged.
        Opcode::SetDimensionSize => Ok(Value::Array(arr(ops, 0)?.clone())),
        Opcode::DynamicReshape => {
            let (ty, dims) = array_dims(&ins.shape)?;
            let a = arr(ops, 0)?;
            if a.len() != dims.iter().product::<usize>() {
                return Err(InterpError::Unsupported(
                    "dynamic-reshape whose dynamic sizes differ from the bounds".into(),
                ));
            }
            Ok(Value::Array(Array::new(ty, dims, a.data.clone())))
        }
        op => Err(InterpError::Unsupported(format!("opcode '{}'", op.name()))),
    }
}

/// `custom-call(x), custom_call_target="TopK"` with its comparator.
pub(crate) fn topk_custom_call(
    interp: &Interp,
    id: InstrId,
    ops: &[Arc<Value>],
) -> Result<Value, InterpError> {
    let ins = interp.m.instr(id);
    let cmp = match ins.attr("called_computations") {
        Some(AttrValue::Comps(cs)) => cs.first().copied(),
        _ => None,
    };
    let (_, dims) = leaf_dims(&ins.shape, 0)?;
    let k = dims
        .last()
        .copied()
        .ok_or_else(|| internal("TopK of a scalar"))?;
    sort::topk_custom_call(interp, arr(ops, 0)?, cmp, k)
}
