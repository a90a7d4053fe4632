//! Dispatch for the ops whose kernels live in their own files (fft, linear algebra,
//! batch norm, bit-level float ops), for the async wrappers, and for the host I/O ops
//! that need a real device.

use crate::eval::Interp;
use crate::value::{Array, Value};
use crate::{batchnorm, dots, fft, linalg, numeric, InterpError};
use std::sync::Arc;
use tpusim_hlo::{InstrId, Opcode, PrimitiveType as T, Shape};

fn internal(msg: impl Into<String>) -> InterpError {
    InterpError::Internal(msg.into())
}

/// Whether [`array_op`] evaluates `op`.
pub fn is_array_op(op: Opcode) -> bool {
    matches!(
        op,
        Opcode::Fft
            | Opcode::TriangularSolve
            | Opcode::Cholesky
            | Opcode::BatchNormInference
            | Opcode::ReducePrecision
            | Opcode::StochasticConvert
            | Opcode::RaggedDot
            | Opcode::ScaledDot
    )
}

/// Whether [`tuple_op`] evaluates `op` (ops that may produce tuples or tokens).
pub fn is_tuple_op(op: Opcode) -> bool {
    matches!(
        op,
        Opcode::BatchNormTraining
            | Opcode::BatchNormGrad
            | Opcode::AsyncStart
            | Opcode::AsyncUpdate
            | Opcode::AsyncDone
            | Opcode::CopyStart
            | Opcode::CopyDone
            | Opcode::AfterAll
            | Opcode::Send
            | Opcode::SendDone
            | Opcode::Recv
            | Opcode::RecvDone
            | Opcode::Infeed
            | Opcode::Outfeed
    )
}

fn operands(ops: &[Arc<Value>]) -> Result<Vec<&Array>, InterpError> {
    ops.iter().map(|v| v.as_array()).collect()
}

/// Evaluates an array-valued op listed by [`is_array_op`].
pub fn array_op(
    interp: &Interp,
    id: InstrId,
    ty: T,
    dims: Vec<usize>,
    ops: &[Arc<Value>],
) -> Result<Array, InterpError> {
    let ins = interp.m.instr(id);
    let a = operands(ops)?;
    let first = a.first().ok_or_else(|| internal("missing operand"))?;
    let flag = |name: &str| ins.attr_bool(name).unwrap_or(false);
    match ins.opcode {
        Opcode::Fft => fft::fft(
            first,
            ins.attr_ident("fft_type").unwrap_or("FFT"),
            ins.attr_ints("fft_length").unwrap_or(&[]),
            ty,
            dims,
        ),
        Opcode::TriangularSolve => {
            let b = a.get(1).ok_or_else(|| internal("missing operand 1"))?;
            let opts = linalg::SolveOptions {
                left_side: flag("left_side"),
                lower: flag("lower"),
                unit_diagonal: flag("unit_diagonal"),
                transpose_a: ins.attr_ident("transpose_a").unwrap_or("NO_TRANSPOSE"),
            };
            linalg::triangular_solve(first, b, &opts)
        }
        Opcode::Cholesky => linalg::cholesky(first, flag("lower")),
        Opcode::BatchNormInference => {
            batchnorm::inference(&a, epsilon(interp, id), feature_index(interp, id))
        }
        Opcode::ReducePrecision => numeric::reduce_precision(
            first,
            ins.attr_int("exponent_bits").unwrap_or(8),
            ins.attr_int("mantissa_bits").unwrap_or(23),
        ),
        Opcode::StochasticConvert => {
            let r = a.get(1).ok_or_else(|| internal("missing operand 1"))?;
            numeric::stochastic_convert(first, r, ty)
        }
        Opcode::RaggedDot => {
            let (rhs, sizes) = match a.as_slice() {
                [_, r, g] => (*r, *g),
                _ => return Err(internal("ragged-dot takes 3 operands")),
            };
            let ragged = match ins.attr_ints("lhs_ragged_dims") {
                Some([d]) => *d as usize,
                _ => return Err(internal("ragged-dot needs one lhs_ragged_dims entry")),
            };
            let group = ins
                .attr_ints("rhs_group_dims")
                .and_then(|g| g.first())
                .map(|&g| g as usize);
            dots::ragged_dot(
                first,
                rhs,
                sizes,
                &dot_dims(interp, id),
                ragged,
                group,
                ty,
                dims,
            )
        }
        Opcode::ScaledDot => dots::scaled_dot(&a, &dot_dims(interp, id), ty, dims),
        op => Err(InterpError::Unsupported(format!("opcode '{}'", op.name()))),
    }
}

fn dot_dims(interp: &Interp, id: InstrId) -> dots::DotDims {
    let ins = interp.m.instr(id);
    let get = |name: &str| -> Vec<usize> {
        ins.attr_ints(name)
            .unwrap_or(&[])
            .iter()
            .map(|&d| d.max(0) as usize)
            .collect()
    };
    dots::DotDims {
        lb: get("lhs_batch_dims"),
        lc: get("lhs_contracting_dims"),
        rb: get("rhs_batch_dims"),
        rc: get("rhs_contracting_dims"),
    }
}

fn epsilon(interp: &Interp, id: InstrId) -> f64 {
    match interp.m.instr(id).attr("epsilon") {
        Some(tpusim_hlo::AttrValue::Float(e)) => *e,
        _ => 0.0,
    }
}

fn feature_index(interp: &Interp, id: InstrId) -> usize {
    interp
        .m
        .instr(id)
        .attr_int("feature_index")
        .unwrap_or(0)
        .max(0) as usize
}

/// A value of `shape` filled with zeros (tokens become empty tuples).
fn zeros(shape: &Shape) -> Result<Value, InterpError> {
    match shape {
        Shape::Tuple(t) => Ok(Value::tuple(t.iter().map(zeros).collect::<Result<_, _>>()?)),
        s if s.is_token() => Ok(Value::tuple(vec![])),
        s => {
            let (ty, dims) = crate::eval::array_dims(s)?;
            Ok(Value::Array(Array::zeros(ty, dims)?))
        }
    }
}

fn element(v: &Value, i: usize) -> Result<Arc<Value>, InterpError> {
    match v {
        Value::Tuple(t) => t
            .get(i)
            .cloned()
            .ok_or_else(|| internal(format!("tuple index {i} out of range"))),
        Value::Array(_) => Err(internal("expected a tuple operand")),
    }
}

/// Evaluates an op listed by [`is_tuple_op`].
pub fn tuple_op(
    interp: &Interp,
    id: InstrId,
    ops: &[Arc<Value>],
) -> Result<Arc<Value>, InterpError> {
    let ins = interp.m.instr(id);
    let tuple = |v: Vec<Array>| {
        Ok(Arc::new(Value::tuple(
            v.into_iter().map(Value::Array).collect(),
        )))
    };
    match ins.opcode {
        Opcode::BatchNormTraining => tuple(batchnorm::training(
            &operands(ops)?,
            epsilon(interp, id),
            feature_index(interp, id),
        )?),
        Opcode::BatchNormGrad => tuple(batchnorm::grad(
            &operands(ops)?,
            epsilon(interp, id),
            feature_index(interp, id),
        )?),
        // ((operands), result, context...): run the wrapped computation at the start.
        Opcode::AsyncStart => {
            let calls = ins
                .attr_comp("calls")
                .ok_or_else(|| internal("async-start without calls"))?;
            let result = interp.run(calls, ops)?;
            let elems = ins
                .shape
                .tuple_elements()
                .ok_or_else(|| internal("async-start with a non-tuple shape"))?;
            let captured = match elems.first() {
                Some(Shape::Tuple(_)) => Value::Tuple(ops.to_vec()),
                _ => ops
                    .first()
                    .map(|v| (**v).clone())
                    .ok_or_else(|| internal("missing operand"))?,
            };
            let mut out = vec![captured, (*result).clone()];
            for s in elems.iter().skip(2) {
                out.push(zeros(s)?);
            }
            Ok(Arc::new(Value::tuple(out)))
        }
        Opcode::AsyncUpdate => ops
            .first()
            .cloned()
            .ok_or_else(|| internal("missing operand")),
        Opcode::AsyncDone => element(ops.first().ok_or_else(|| internal("missing operand"))?, 1),
        // (destination, source, context): the copy is complete at the start.
        Opcode::CopyStart => {
            let x = ops.first().ok_or_else(|| internal("missing operand"))?;
            let ctx = match ins.shape.tuple_elements() {
                Some([_, _, c, ..]) => zeros(c)?,
                _ => Value::Array(Array::zeros(T::U32, vec![])?),
            };
            Ok(Arc::new(Value::tuple(vec![
                (**x).clone(),
                (**x).clone(),
                ctx,
            ])))
        }
        // Tokens carry no data; an empty tuple stands for one.
        Opcode::AfterAll => Ok(Arc::new(Value::tuple(vec![]))),
        Opcode::CopyDone => element(ops.first().ok_or_else(|| internal("missing operand"))?, 0),
        op => Err(InterpError::Unsupported(format!(
            "opcode '{}' (host/device I/O needs a real device)",
            op.name()
        ))),
    }
}
