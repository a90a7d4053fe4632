//! The HLO IR: a module owns arenas of computations and instructions, addressed by
//! typed `u32` ids. Analyses keep their results in side tables indexed by these ids.

use crate::attr::{Attr, AttrValue, Metadata, Sharding};
use crate::literal::Literal;
use crate::opcode::Opcode;
use crate::shape::Shape;

/// Index of an instruction in [`Module::instrs`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct InstrId(pub u32);

/// Index of a computation in [`Module::comps`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CompId(pub u32);

impl InstrId {
    pub fn index(self) -> usize {
        self.0 as usize
    }
}
impl CompId {
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// One HLO instruction.
#[derive(Clone, Debug, PartialEq)]
pub struct Instruction {
    /// The name exactly as in HLO, without `%`.
    pub name: String,
    pub opcode: Opcode,
    pub shape: Shape,
    pub operands: Vec<InstrId>,
    /// Attributes in canonical print order.
    pub attrs: Vec<Attr>,
    /// The computation that contains this instruction.
    pub parent: CompId,
    /// `parameter(N)`.
    pub parameter_number: Option<i64>,
    /// `constant(...)`.
    pub literal: Option<Literal>,
    /// For `async-start/-update/-done` written as `X-start` sugar: the wrapped opcode X.
    pub async_sugar: Option<Opcode>,
}

impl Instruction {
    pub fn attr(&self, name: &str) -> Option<&AttrValue> {
        self.attrs.iter().find(|a| a.name == name).map(|a| &a.value)
    }
    pub fn attr_int(&self, name: &str) -> Option<i64> {
        match self.attr(name)? {
            AttrValue::Int(v) => Some(*v),
            _ => None,
        }
    }
    pub fn attr_ints(&self, name: &str) -> Option<&[i64]> {
        match self.attr(name)? {
            AttrValue::Ints(v) => Some(v),
            _ => None,
        }
    }
    /// A list of dimension numbers (`dimensions={0,2}`), empty when absent;
    /// a negative entry (malformed) becomes `usize::MAX`, which indexes
    /// nothing.
    pub fn attr_dims(&self, name: &str) -> Vec<usize> {
        self.attr_ints(name)
            .unwrap_or(&[])
            .iter()
            .map(|&d| usize::try_from(d).unwrap_or(usize::MAX))
            .collect()
    }
    pub fn attr_bool(&self, name: &str) -> Option<bool> {
        match self.attr(name)? {
            AttrValue::Bool(v) => Some(*v),
            _ => None,
        }
    }
    pub fn attr_ident(&self, name: &str) -> Option<&str> {
        match self.attr(name)? {
            AttrValue::Ident(v) | AttrValue::Str(v) => Some(v),
            _ => None,
        }
    }
    pub fn attr_comp(&self, name: &str) -> Option<CompId> {
        match self.attr(name)? {
            AttrValue::Comp(c) => Some(*c),
            _ => None,
        }
    }
    pub fn metadata(&self) -> Option<&Metadata> {
        match self.attr("metadata")? {
            AttrValue::Metadata(m) => Some(m),
            _ => None,
        }
    }
    pub fn sharding(&self) -> Option<&Sharding> {
        match self.attr("sharding")? {
            AttrValue::Sharding(s) => Some(s),
            _ => None,
        }
    }
    /// Every computation this instruction calls, in attribute order.
    pub fn called_computations(&self) -> Vec<CompId> {
        let mut out = Vec::new();
        for a in &self.attrs {
            match &a.value {
                AttrValue::Comp(c) => out.push(*c),
                AttrValue::Comps(cs) => out.extend_from_slice(cs),
                _ => {}
            }
        }
        out
    }
}

/// A computation: an ordered list of instructions with one root.
#[derive(Clone, Debug, PartialEq)]
pub struct Computation {
    pub name: String,
    /// Instructions in text (and, for scheduled modules, schedule) order.
    pub instrs: Vec<InstrId>,
    pub root: InstrId,
    /// Parameter instructions indexed by parameter number.
    pub params: Vec<InstrId>,
    pub is_entry: bool,
    /// `execution_thread="..."` when not the main thread.
    pub execution_thread: Option<String>,
    /// The hidden computation made for `X-start` async sugar; not printed.
    pub is_async_sugar: bool,
}

/// One entry of `input_output_alias={ {0}: (1, {}, may-alias) }`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IoAlias {
    pub output_index: Vec<i64>,
    pub parameter: i64,
    pub parameter_index: Vec<i64>,
    /// `may-alias` / `must-alias`, as written (absent in older text).
    pub kind: Option<String>,
}

/// Module-level attributes from the `HloModule` header.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ModuleConfig {
    pub is_scheduled: Option<bool>,
    /// `entry_computation_layout={(params)->result}`.
    pub entry_layout: Option<(Vec<Shape>, Shape)>,
    pub input_output_alias: Vec<IoAlias>,
    pub buffer_donor: Vec<(i64, Vec<i64>)>,
    pub has_buffer_donor: bool,
    pub has_input_output_alias: bool,
    pub alias_passthrough_params: Option<bool>,
    pub replica_count: Option<i64>,
    pub num_partitions: Option<i64>,
    pub frontend_attributes: Option<AttrValue>,
    /// Other header attributes, verbatim (name, value text).
    pub extra: Vec<(String, String)>,
}

/// The `FileNames`/`FunctionNames`/`FileLocations`/`StackFrames` section (§3.2),
/// with ids exactly as printed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StackFrameIndex {
    pub file_names: Vec<String>,
    pub function_names: Vec<String>,
    pub file_locations: Vec<FileLocation>,
    pub stack_frames: Vec<StackFrame>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FileLocation {
    pub file_name_id: i64,
    pub function_name_id: i64,
    pub line: i64,
    pub end_line: i64,
    pub column: i64,
    pub end_column: i64,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StackFrame {
    pub file_location_id: i64,
    /// As printed: one more than the real parent (1 = no parent).
    pub parent_frame_id: i64,
}

/// An HLO module.
#[derive(Clone, Debug, PartialEq)]
pub struct Module {
    pub name: String,
    pub config: ModuleConfig,
    pub stack_frames: Option<StackFrameIndex>,
    pub comps: Vec<Computation>,
    pub instrs: Vec<Instruction>,
    pub entry: CompId,
}

impl Module {
    pub fn instr(&self, id: InstrId) -> &Instruction {
        &self.instrs[id.index()]
    }
    pub fn comp(&self, id: CompId) -> &Computation {
        &self.comps[id.index()]
    }
    pub fn entry(&self) -> &Computation {
        self.comp(self.entry)
    }
    pub fn comp_ids(&self) -> impl Iterator<Item = CompId> {
        (0..self.comps.len() as u32).map(CompId)
    }
    pub fn find_comp(&self, name: &str) -> Option<CompId> {
        self.comp_ids().find(|&c| self.comp(c).name == name)
    }
    /// Number of computations the text shows (hidden async wrappers excluded).
    pub fn visible_computation_count(&self) -> usize {
        self.comps.iter().filter(|c| !c.is_async_sugar).count()
    }
    /// Number of instructions the text shows.
    pub fn visible_instruction_count(&self) -> usize {
        self.comps
            .iter()
            .filter(|c| !c.is_async_sugar)
            .map(|c| c.instrs.len())
            .sum()
    }
    /// Shapes of the entry computation's parameters, in parameter order.
    pub fn entry_parameter_shapes(&self) -> Vec<Shape> {
        self.entry()
            .params
            .iter()
            .map(|&p| self.instr(p).shape.clone())
            .collect()
    }
    /// Shape of an operand of `id`.
    pub fn operand_shape(&self, id: InstrId, i: usize) -> &Shape {
        &self.instr(self.instr(id).operands[i]).shape
    }
    /// The computation an async chain (`async-start`, `-update`, `-done`)
    /// wraps: its start's `calls`, reached through the chain's operands.
    pub fn async_callee(&self, id: InstrId) -> Option<CompId> {
        let mut cur = id;
        // Each step moves to an operand, so the walk ends within the module.
        for _ in 0..=self.instrs.len() {
            let ins = self.instr(cur);
            if let Some(c) = ins.attr_comp("calls") {
                return Some(c);
            }
            cur = *ins.operands.first()?;
        }
        None
    }
    /// The op an async chain carries out: the root of the computation it wraps.
    pub fn async_wrapped_opcode(&self, id: InstrId) -> Option<Opcode> {
        self.async_callee(id)
            .map(|c| self.instr(self.comp(c).root).opcode)
    }
    /// `num_partitions * replica_count` (1 when neither is set); saturates
    /// instead of overflowing (the verifier bounds it by [`MAX_DEVICES`]).
    pub fn device_count(&self) -> i64 {
        self.config
            .num_partitions
            .unwrap_or(1)
            .max(1)
            .saturating_mul(self.config.replica_count.unwrap_or(1).max(1))
    }
}

/// The most devices (`num_partitions * replica_count`, or chips in a pod) tpusim
/// accepts: 2^18 = 262,144, above the largest TPU deployments published
/// (a few tens of thousands of chips), so every per-device table stays bounded.
pub const MAX_DEVICES: u64 = 1 << 18;
