//! A structural summary of a module: sizes, op histogram, inputs, outputs and
//! the largest tensors. Data only; the CLI decides how to show it.

use crate::ir::{CompId, Module};
use crate::shape::Shape;
use rustc_hash::FxHashMap;

/// One named tensor in a summary.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorInfo {
    pub computation: String,
    pub name: String,
    pub opcode: String,
    pub shape: Shape,
    pub bytes: u64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModuleSummary {
    pub name: String,
    pub computations: usize,
    pub instructions: usize,
    /// (opcode name, count), most frequent first, ties by name.
    pub op_histogram: Vec<(String, usize)>,
    pub parameters: Vec<TensorInfo>,
    /// Leaves of the entry computation's result.
    pub outputs: Vec<Shape>,
    /// The largest array results in the whole module, largest first.
    pub largest: Vec<TensorInfo>,
}

impl ModuleSummary {
    pub fn parameter_bytes(&self) -> u64 {
        self.parameters.iter().map(|p| p.bytes).sum()
    }
    pub fn output_bytes(&self) -> u64 {
        self.outputs.iter().map(Shape::byte_size).sum()
    }
}

/// Summarizes `m`, listing the `top` largest tensors.
pub fn summarize(m: &Module, top: usize) -> ModuleSummary {
    let visible: Vec<CompId> = m
        .comp_ids()
        .filter(|&c| !m.comp(c).is_async_sugar)
        .collect();
    let mut hist: FxHashMap<String, usize> = FxHashMap::default();
    let mut tensors = Vec::new();
    for &c in &visible {
        let comp = m.comp(c);
        for &i in &comp.instrs {
            let ins = m.instr(i);
            let op = match ins.async_sugar {
                Some(inner) => format!("{}-{}", inner.name(), async_suffix(ins.opcode)),
                None => ins.opcode.name().to_string(),
            };
            *hist.entry(op.clone()).or_default() += 1;
            // Tuples only point at their elements' buffers; list arrays.
            if !ins.shape.is_tuple() {
                tensors.push(info(&comp.name, &ins.name, op, &ins.shape));
            }
        }
    }
    let mut op_histogram: Vec<(String, usize)> = hist.into_iter().collect();
    op_histogram.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    tensors.sort_by(|a, b| b.bytes.cmp(&a.bytes).then_with(|| a.name.cmp(&b.name)));
    tensors.truncate(top);
    let entry = m.entry();
    let parameters = entry
        .params
        .iter()
        .map(|&p| {
            let ins = m.instr(p);
            info(&entry.name, &ins.name, "parameter".into(), &ins.shape)
        })
        .collect();
    let outputs = m
        .instr(entry.root)
        .shape
        .leaves()
        .into_iter()
        .map(|a| Shape::Array(a.clone()))
        .collect();
    ModuleSummary {
        name: m.name.clone(),
        computations: visible.len(),
        instructions: m.visible_instruction_count(),
        op_histogram,
        parameters,
        outputs,
        largest: tensors,
    }
}

fn async_suffix(op: crate::opcode::Opcode) -> &'static str {
    match op {
        crate::opcode::Opcode::AsyncStart => "start",
        crate::opcode::Opcode::AsyncUpdate => "update",
        _ => "done",
    }
}

fn info(comp: &str, name: &str, opcode: String, shape: &Shape) -> TensorInfo {
    TensorInfo {
        computation: comp.to_string(),
        name: name.to_string(),
        opcode,
        shape: shape.clone(),
        bytes: shape.byte_size(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_ops_and_bytes() {
        let m = crate::parse_module(
            "HloModule m\nENTRY e {\n  a = f32[4,8] parameter(0)\n  b = f32[4,8] add(a, a)\n  ROOT c = (f32[4,8], f32[4,8]) tuple(a, b)\n}\n",
        )
        .unwrap();
        let s = summarize(&m, 2);
        assert_eq!(s.instructions, 3);
        assert_eq!(s.parameter_bytes(), 128);
        assert_eq!(s.output_bytes(), 256);
        assert_eq!(s.largest[0].name, "a");
        assert!(s.largest.iter().all(|t| !t.shape.is_tuple()));
        assert_eq!(s.op_histogram.len(), 3);
    }
}
