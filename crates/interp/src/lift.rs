//! Scalar computations (map bodies, sort comparators, scatter combiners) run two ways:
//! lifted to whole arrays when every instruction is elementwise, or one call per
//! element through the interpreter. Also `map`.

use crate::elementwise as ew;
use crate::eval::Interp;
use crate::value::same_dims;
use crate::value::{Array, Data, Value};
use crate::{ops, InterpError};
use std::collections::HashMap;
use std::sync::Arc;
use tpusim_hlo::literal::{Literal, LiteralData};
use tpusim_hlo::{CompId, InstrId, OpCategory, Opcode, Shape};

pub(crate) fn internal(msg: impl Into<String>) -> InterpError {
    InterpError::Internal(msg.into())
}

/// Element `i` of `a` as a scalar value (an argument of a scalar computation).
pub(crate) fn scalar_at(a: &Array, i: usize) -> Arc<Value> {
    Arc::new(Value::Array(Array::new(a.ty, vec![], a.data.take(&[i]))))
}

/// Runs scalar computation `f` on `args` and returns its result leaves as arrays.
pub(crate) fn call_scalar(
    interp: &Interp,
    f: CompId,
    args: &[Arc<Value>],
) -> Result<Vec<Array>, InterpError> {
    let v = Arc::unwrap_or_clone(interp.run(f, args)?);
    let mut leaves = Vec::new();
    v.into_leaves(&mut leaves);
    leaves
        .into_iter()
        .map(|l| match l {
            Value::Array(a) => Ok(a),
            Value::Tuple(_) => Err(internal("nested tuple from a scalar computation")),
        })
        .collect()
}

/// The first element of a scalar pred result.
pub(crate) fn truth(a: &Array) -> Result<bool, InterpError> {
    Ok(a.scalar_i64()? != 0)
}

fn is_scalar(shape: &Shape) -> bool {
    shape.as_array().is_some_and(|a| a.dims.is_empty())
}

/// A scalar literal splatted to `n` elements of the constant's element type.
fn splat_constant(
    lit: &Literal,
    shape: &Shape,
    dims: &[usize],
) -> Result<Option<Array>, InterpError> {
    let Some(a) = shape.as_array() else {
        return Ok(None);
    };
    let n: usize = dims.iter().product();
    let one = match lit {
        Literal::Array(LiteralData::Int(v)) if v.len() == 1 => Array::from_i64s(a.ty, vec![1], v),
        Literal::Array(LiteralData::Float(v)) if v.len() == 1 => Array::from_f64s(a.ty, vec![1], v),
        Literal::Array(LiteralData::Pred(v)) if v.len() == 1 => {
            Array::from_i64s(a.ty, vec![1], &[v[0] as i64])
        }
        _ => return Ok(None),
    };
    crate::value::check_type(a.ty)?;
    Ok(Some(Array::new(a.ty, dims.to_vec(), one.data.splat(0, n))))
}

/// `select(p, t, f)` on same-shaped arrays.
fn select(p: &Array, t: &Array, f: &Array) -> Result<Array, InterpError> {
    let Data::Pred(p) = &p.data else {
        return Err(internal("select predicate is not pred"));
    };
    macro_rules! pick {
        ($($var:ident),*) => {
            match (&t.data, &f.data) {
                $((Data::$var(x), Data::$var(y)) => Data::$var(
                    p.iter().zip(x.iter().zip(y)).map(|(&c, (&a, &b))| if c { a } else { b }).collect(),
                ),)*
                _ => return Err(internal("select branches differ in type")),
            }
        };
    }
    let data = pick!(Pred, I64, U64, F32, F64, Bf16, F16, F8, C64, C128);
    Ok(Array::new(t.ty, t.dims.clone(), data))
}

/// Whether the subgraphs at `x` and `y` compute the same function, `x` of parameter
/// `px` and `y` of parameter `py` (constants may be shared). Gives up (false) after
/// `budget` node visits, so shared subgraphs cannot blow up the walk.
pub(crate) fn mirrored(
    interp: &Interp,
    x: InstrId,
    y: InstrId,
    px: i64,
    py: i64,
    budget: &mut usize,
) -> bool {
    let (a, b) = (interp.m.instr(x), interp.m.instr(y));
    if *budget == 0 {
        return false;
    }
    *budget -= 1;
    if x == y {
        return a.opcode == Opcode::Constant;
    }
    if a.opcode == Opcode::Parameter || b.opcode == Opcode::Parameter {
        return a.opcode == b.opcode
            && a.parameter_number == Some(px)
            && b.parameter_number == Some(py);
    }
    let attrs = |i: &tpusim_hlo::Instruction| {
        i.attrs
            .iter()
            .filter(|a| a.name != "metadata")
            .map(|a| (a.name.clone(), a.value.clone()))
            .collect::<Vec<_>>()
    };
    a.opcode == b.opcode
        && a.shape == b.shape
        && a.literal == b.literal
        && a.operands.len() == b.operands.len()
        && attrs(a) == attrs(b)
        && a.operands
            .iter()
            .zip(&b.operands)
            .all(|(&p, &q)| mirrored(interp, p, q, px, py, budget))
}

/// Instructions of `c` that `root` depends on, in text order.
fn needed(interp: &Interp, c: CompId, root: InstrId) -> Vec<InstrId> {
    let mut want: HashMap<InstrId, ()> = HashMap::new();
    let mut stack = vec![root];
    while let Some(id) = stack.pop() {
        if want.insert(id, ()).is_none() {
            stack.extend(interp.m.instr(id).operands.iter().copied());
        }
    }
    interp
        .m
        .comp(c)
        .instrs
        .iter()
        .copied()
        .filter(|i| want.contains_key(i))
        .collect()
}

/// Evaluates the value of `root` (an instruction of scalar computation `c`) for every
/// element at once, with parameter `k` bound to `params[k]` (all of shape `dims`).
///
/// Returns `None` when the subgraph is not purely elementwise on scalars or reads a
/// parameter that is not bound; the caller then falls back to per-element calls.
pub(crate) fn lift(
    interp: &Interp,
    c: CompId,
    root: InstrId,
    params: &[Option<&Array>],
    dims: &[usize],
) -> Result<Option<Array>, InterpError> {
    let mut env: HashMap<InstrId, Array> = HashMap::new();
    for id in needed(interp, c, root) {
        let ins = interp.m.instr(id);
        if !is_scalar(&ins.shape) {
            return Ok(None);
        }
        let ty = match ins.shape.as_array() {
            Some(a) => a.ty,
            None => return Ok(None),
        };
        let arg = |i: usize| -> Result<&Array, InterpError> {
            ins.operands
                .get(i)
                .and_then(|o| env.get(o))
                .ok_or_else(|| internal("lifted operand missing"))
        };
        let op = ins.opcode;
        let v = match op {
            Opcode::Parameter => {
                let n = ins.parameter_number.unwrap_or(-1);
                match params.get(n as usize).copied().flatten() {
                    Some(a) if same_dims(&a.dims, dims) => a.clone(),
                    _ => return Ok(None),
                }
            }
            Opcode::Constant => match ins.literal.as_ref() {
                Some(lit) => match splat_constant(lit, &ins.shape, dims)? {
                    Some(a) => a,
                    None => return Ok(None),
                },
                None => return Ok(None),
            },
            Opcode::Copy | Opcode::Reshape | Opcode::Broadcast => {
                let a = arg(0)?;
                if a.ty != ty {
                    return Ok(None);
                }
                a.clone()
            }
            Opcode::Bitcast | Opcode::BitcastConvert => {
                let a = arg(0)?;
                if a.ty.bit_width() != ty.bit_width() {
                    return Ok(None);
                }
                ops::bitcast_convert(a, ty, dims.to_vec())?
            }
            _ if op.category() == OpCategory::Unary
                && op != Opcode::Convert
                && op != Opcode::ReducePrecision =>
            {
                ew::unary(op, arg(0)?, ty)?
            }
            _ if op.category() == OpCategory::Binary => ew::binary(
                op,
                arg(0)?,
                arg(1)?,
                ty,
                ins.attr_ident("direction"),
                ins.attr_ident("type"),
            )?,
            Opcode::Select => select(arg(0)?, arg(1)?, arg(2)?)?,
            Opcode::Clamp | Opcode::Convert => {
                let ops: Vec<Arc<Value>> = (0..ins.operands.len())
                    .map(|i| arg(i).map(|a| Arc::new(Value::Array(a.clone()))))
                    .collect::<Result<_, _>>()?;
                ops::array_op(interp, id, ty, dims.to_vec(), &ops)?
            }
            _ => return Ok(None),
        };
        env.insert(id, v);
    }
    Ok(env.remove(&root))
}

/// Lifts the whole computation `f`: one array per result (a tuple root gives several).
pub(crate) fn lift_all(
    interp: &Interp,
    f: CompId,
    params: &[Option<&Array>],
    dims: &[usize],
) -> Result<Option<Vec<Array>>, InterpError> {
    let root = interp.m.comp(f).root;
    let ins = interp.m.instr(root);
    let roots: Vec<InstrId> = if ins.opcode == Opcode::Tuple {
        ins.operands.clone()
    } else {
        vec![root]
    };
    let mut out = Vec::with_capacity(roots.len());
    for r in roots {
        match lift(interp, f, r, params, dims)? {
            Some(a) => out.push(a),
            None => return Ok(None),
        }
    }
    Ok(Some(out))
}

/// `map(x_1..x_N), to_apply=f`: `f` applied elementwise; lifted when possible.
pub(crate) fn map(
    interp: &Interp,
    f: CompId,
    xs: &[&Array],
    dims: Vec<usize>,
) -> Result<Array, InterpError> {
    if xs.iter().any(|a| !same_dims(&a.dims, &dims)) {
        return Err(internal("map operands must have the result's dimensions"));
    }
    let params: Vec<Option<&Array>> = xs.iter().map(|a| Some(*a)).collect();
    let root = interp.m.comp(f).root;
    if let Some(a) = lift(interp, f, root, &params, &dims)? {
        return Ok(a);
    }
    let n: usize = dims.iter().product();
    let mut parts = Vec::with_capacity(n);
    for i in 0..n {
        let args: Vec<Arc<Value>> = xs.iter().map(|a| scalar_at(a, i)).collect();
        let mut r = call_scalar(interp, f, &args)?;
        if r.len() != 1 {
            return Err(internal("map computation must return one scalar"));
        }
        parts.push(r.remove(0));
    }
    let (rty, _) = crate::eval::array_dims(&interp.m.instr(root).shape)?;
    let data = match parts.first() {
        Some(_) => {
            let refs: Vec<&crate::Data> = parts.iter().map(|a| &a.data).collect();
            crate::Data::concat(&refs)?
        }
        None => Array::zeros(rty, vec![0])?.data,
    };
    Ok(Array::new(rty, dims, data))
}
