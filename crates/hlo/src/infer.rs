//! Shape inference: the result shape an instruction must have, given its
//! opcode, operand shapes, attributes and called computations.
//!
//! Used by the parser (for instructions written without a shape) and by the
//! verifier (to check declared shapes).

use crate::attr::Attr;
use crate::ir::{CompId, Computation, Instruction, Module};
use crate::opcode::{OpCategory, Opcode};
use crate::shape::Shape;
use crate::types::PrimitiveType;

/// Why a shape could not be inferred.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum InferError {
    /// The opcode's result shape is not determined by its operands (convert,
    /// reshape, parameter, custom-call...): the text must state it.
    #[error("the result shape of '{0}' cannot be inferred; it must be written")]
    NotInferable(Opcode),
    /// The operands or attributes are inconsistent.
    #[error("{0}")]
    Invalid(String),
}

/// Signatures of called computations, as seen by shape inference.
pub trait CompSignatures {
    fn param_shapes(&self, c: CompId) -> Vec<&Shape>;
    fn result_shape(&self, c: CompId) -> &Shape;
}

/// Computation signatures read from arenas (a finished module or one being parsed).
pub struct ArenaSignatures<'m> {
    pub comps: &'m [Computation],
    pub instrs: &'m [Instruction],
}

impl CompSignatures for ArenaSignatures<'_> {
    fn param_shapes(&self, c: CompId) -> Vec<&Shape> {
        self.comps[c.index()]
            .params
            .iter()
            .map(|p| &self.instrs[p.index()].shape)
            .collect()
    }
    fn result_shape(&self, c: CompId) -> &Shape {
        &self.instrs[self.comps[c.index()].root.index()].shape
    }
}

impl Module {
    /// Signatures of this module's computations.
    pub fn signatures(&self) -> ArenaSignatures<'_> {
        ArenaSignatures {
            comps: &self.comps,
            instrs: &self.instrs,
        }
    }
}

fn invalid(msg: impl Into<String>) -> InferError {
    InferError::Invalid(msg.into())
}

fn attr<'a>(attrs: &'a [Attr], name: &str) -> Option<&'a crate::attr::AttrValue> {
    attrs.iter().find(|a| a.name == name).map(|a| &a.value)
}

/// Infers the result shape of an instruction (without layouts).
pub fn infer_shape(
    op: Opcode,
    operands: &[&Shape],
    attrs: &[Attr],
    sigs: &dyn CompSignatures,
) -> Result<Shape, InferError> {
    let _ = sigs;
    match op.category() {
        OpCategory::Unary | OpCategory::Binary | OpCategory::Ternary
            if !matches!(op, Opcode::Convert | Opcode::StochasticConvert) =>
        {
            let first = operands.first().ok_or_else(|| invalid("missing operand"))?;
            let base = match op {
                Opcode::Select | Opcode::Clamp => {
                    operands.get(1).ok_or_else(|| invalid("missing operand"))?
                }
                _ => first,
            };
            let mut s = base.without_layouts();
            if let Shape::Array(a) = &mut s {
                a.ty = match op {
                    Opcode::Compare | Opcode::IsFinite => PrimitiveType::Pred,
                    Opcode::Abs | Opcode::Real | Opcode::Imag => {
                        a.ty.complex_component().unwrap_or(a.ty)
                    }
                    Opcode::Complex => match a.ty {
                        PrimitiveType::F64 => PrimitiveType::C128,
                        _ => PrimitiveType::C64,
                    },
                    _ => a.ty,
                };
            }
            Ok(s)
        }
        _ => match op {
            Opcode::Tuple => Ok(Shape::Tuple(
                operands.iter().map(|s| s.without_layouts()).collect(),
            )),
            Opcode::AfterAll => Ok(Shape::token()),
            Opcode::GetTupleElement => {
                let index = match attr(attrs, "index") {
                    Some(crate::attr::AttrValue::Int(i)) => *i,
                    _ => return Err(invalid("get-tuple-element needs index=")),
                };
                let elems = operands
                    .first()
                    .and_then(|s| s.tuple_elements())
                    .ok_or_else(|| invalid("get-tuple-element operand is not a tuple"))?;
                usize::try_from(index)
                    .ok()
                    .and_then(|i| elems.get(i))
                    .map(Shape::without_layouts)
                    .ok_or_else(|| {
                        invalid(format!(
                            "tuple index {index} is out of range for a tuple of {} elements",
                            elems.len()
                        ))
                    })
            }
            _ => Err(InferError::NotInferable(op)),
        },
    }
}
