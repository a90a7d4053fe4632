//! Analyses over the IR that later stages share. Results are plain values
//! computed on demand; nothing here mutates a module.

use crate::attr::AttrValue;
use crate::ir::{InstrId, Module};
use crate::literal::{Literal, LiteralData};
use crate::opcode::Opcode;

/// How many times a `while` loop's body runs, and how we know.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TripCount {
    /// XLA recorded it: `backend_config={"known_trip_count":{"n":"10"}}`.
    Known(u64),
    /// Derived from the loop's induction variable (constant start, step and bound).
    Inferred(u64),
    /// Data-dependent or not recognized; the reason says which.
    Unknown(&'static str),
}

impl TripCount {
    /// The count, when there is one.
    pub fn count(&self) -> Option<u64> {
        match self {
            TripCount::Known(n) | TripCount::Inferred(n) => Some(*n),
            TripCount::Unknown(_) => None,
        }
    }
}

/// The trip count of the `while` instruction `w`.
pub fn while_trip_count(m: &Module, w: InstrId) -> TripCount {
    if m.instr(w).opcode != Opcode::While {
        return TripCount::Unknown("not a while loop");
    }
    if let Some(n) = known_trip_count(m, w) {
        return TripCount::Known(n);
    }
    match inferred_trip_count(m, w) {
        Ok(n) => TripCount::Inferred(n),
        Err(why) => TripCount::Unknown(why),
    }
}

/// `known_trip_count.n` from the JSON backend_config XLA attaches to loops.
fn known_trip_count(m: &Module, w: InstrId) -> Option<u64> {
    let AttrValue::Str(config) = m.instr(w).attr("backend_config")? else {
        return None;
    };
    let json: serde_json::Value = serde_json::from_str(config).ok()?;
    let n = &json["known_trip_count"]["n"];
    n.as_str()
        .and_then(|s| s.parse().ok())
        .or_else(|| n.as_u64())
}

/// The trip count of a loop of the form `for (i = start; i <cmp> bound; i += step)`,
/// where the counter is tuple element `k` of the loop state and start, step and
/// bound are integer constants (ignoring any count XLA recorded).
pub fn inferred_trip_count(m: &Module, w: InstrId) -> Result<u64, &'static str> {
    let ins = m.instr(w);
    let (Some(cond), Some(body)) = (ins.attr_comp("condition"), ins.attr_comp("body")) else {
        return Err("while loop without condition or body");
    };
    let compare = m.instr(m.comp(cond).root);
    if compare.opcode != Opcode::Compare || compare.operands.len() != 2 {
        return Err("the loop condition is not a comparison");
    }
    let direction = compare.attr_ident("direction").unwrap_or("");
    let (lhs, rhs) = (compare.operands[0], compare.operands[1]);
    // Normalize to `counter <dir> bound`.
    let (index, bound, direction) = match (state_index(m, lhs), constant_int(m, rhs)) {
        (Some(k), Some(b)) => (k, b, direction.to_string()),
        _ => match (constant_int(m, lhs), state_index(m, rhs)) {
            (Some(b), Some(k)) => (k, b, mirrored(direction).to_string()),
            _ => return Err("the loop condition does not compare a counter with a constant"),
        },
    };
    let step = counter_step(m, body, index)
        .ok_or("the loop body does not add a constant to the counter")?;
    let start = initial_value(m, ins.operands[0], index)
        .ok_or("the counter does not start at a constant")?;
    trips(start, step, bound, &direction).ok_or("the counter never reaches its bound")
}

/// `get-tuple-element(parameter(0)), index=k` in a loop computation.
fn state_index(m: &Module, id: InstrId) -> Option<i64> {
    let ins = m.instr(id);
    if ins.opcode != Opcode::GetTupleElement {
        return None;
    }
    let src = m.instr(*ins.operands.first()?);
    (src.opcode == Opcode::Parameter)
        .then(|| ins.attr_int("index"))
        .flatten()
}

/// The value of a scalar integer constant.
fn constant_int(m: &Module, id: InstrId) -> Option<i64> {
    let ins = m.instr(id);
    match (&ins.opcode, &ins.literal) {
        (Opcode::Constant, Some(Literal::Array(LiteralData::Int(v)))) if v.len() == 1 => Some(v[0]),
        _ => None,
    }
}

/// The constant the body adds to state element `k` (its new value at index `k`).
fn counter_step(m: &Module, body: crate::ir::CompId, k: i64) -> Option<i64> {
    let root = m.instr(m.comp(body).root);
    if root.opcode != Opcode::Tuple {
        return None;
    }
    let next = m.instr(*root.operands.get(usize::try_from(k).ok()?)?);
    if next.opcode != Opcode::Add || next.operands.len() != 2 {
        return None;
    }
    let (a, b) = (next.operands[0], next.operands[1]);
    match (
        state_index(m, a),
        constant_int(m, b),
        constant_int(m, a),
        state_index(m, b),
    ) {
        (Some(i), Some(step), _, _) | (_, _, Some(step), Some(i)) if i == k => Some(step),
        _ => None,
    }
}

/// Element `k` of the loop's initial state, when it is a constant.
fn initial_value(m: &Module, init: InstrId, k: i64) -> Option<i64> {
    let ins = m.instr(init);
    let k = usize::try_from(k).ok()?;
    match (&ins.opcode, &ins.literal) {
        (Opcode::Tuple, _) => constant_int(m, *ins.operands.get(k)?),
        (Opcode::Constant, Some(Literal::Tuple(elems))) => match elems.get(k)? {
            Literal::Array(LiteralData::Int(v)) if v.len() == 1 => Some(v[0]),
            _ => None,
        },
        _ => None,
    }
}

/// `bound <dir> counter` is `counter <mirrored dir> bound`.
fn mirrored(direction: &str) -> &str {
    match direction {
        "LT" => "GT",
        "LE" => "GE",
        "GT" => "LT",
        "GE" => "LE",
        other => other,
    }
}

/// Iterations of `for (i = start; i <dir> bound; i += step)`.
fn trips(start: i64, step: i64, bound: i64, direction: &str) -> Option<u64> {
    let (start, step, bound) = (i128::from(start), i128::from(step), i128::from(bound));
    let span = match direction {
        "LT" => bound - start,
        "LE" => bound - start + 1,
        "GT" => start - bound,
        "GE" => start - bound + 1,
        "NE" => {
            let d = bound - start;
            return (step != 0 && d % step == 0 && d / step >= 0).then(|| (d / step) as u64);
        }
        _ => return None,
    };
    let step = if matches!(direction, "GT" | "GE") {
        -step
    } else {
        step
    };
    if span <= 0 {
        return Some(0);
    }
    (step > 0).then(|| ((span + step - 1) / step) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_trips_of_simple_loops() {
        assert_eq!(trips(0, 1, 10, "LT"), Some(10));
        assert_eq!(trips(0, 3, 10, "LT"), Some(4));
        assert_eq!(trips(0, 1, 10, "LE"), Some(11));
        assert_eq!(trips(10, -2, 0, "GT"), Some(5));
        assert_eq!(trips(5, 1, 0, "LT"), Some(0));
        assert_eq!(trips(0, -1, 10, "LT"), None);
        assert_eq!(trips(0, 2, 10, "NE"), Some(5));
        assert_eq!(trips(0, 3, 10, "NE"), None);
    }
}
