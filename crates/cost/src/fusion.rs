//! Fusion: compute from the fused instructions, bytes at the boundary.

use crate::size::{elements_in, leaves_size, shape_size};
use crate::{computation_props, users_in, Props, Users};
use tpusim_hlo::{CompId, InstrId, Module, Opcode, Shape};

/// Constants with more elements than this are read from memory by a fusion
/// (XLA's `immediate_constant_max_elements`).
const IMMEDIATE_CONSTANT_MAX_ELEMENTS: i64 = 1;

pub(crate) fn fusion_props(m: &Module, id: InstrId) -> Props {
    let i = m.instr(id);
    let Some(&c) = i.called_computations().first() else {
        return Props::default();
    };
    let mut p = computation_props(m, c);
    p.bytes = output_bytes(m, c, &i.shape) + large_constant_bytes(m, c);
    let users = users_in(m, c);
    for &param in &m.comp(c).params {
        p.bytes += param_bytes(m, &users, param);
    }
    p
}

/// Output bytes per array leaf; a dynamic-update-slice root (or tuple
/// element) writes only its update in place.
fn output_bytes(m: &Module, c: CompId, shape: &Shape) -> f32 {
    let root = m.instr(m.comp(c).root);
    let dus_update = |id: InstrId| {
        let r = m.instr(id);
        (r.opcode == Opcode::DynamicUpdateSlice).then(|| {
            r.operands
                .get(1)
                .map_or(0.0, |&u| shape_size(&m.instr(u).shape))
        })
    };
    match shape {
        Shape::Tuple(elems) => elems
            .iter()
            .enumerate()
            .map(|(k, s)| {
                let from_dus = (root.opcode == Opcode::Tuple)
                    .then(|| root.operands.get(k).and_then(|&o| dus_update(o)))
                    .flatten();
                from_dus.unwrap_or_else(|| leaves_size(s))
            })
            .sum(),
        _ => dus_update(m.comp(c).root).unwrap_or_else(|| shape_size(shape)),
    }
}

fn large_constant_bytes(m: &Module, c: CompId) -> f32 {
    m.comp(c)
        .instrs
        .iter()
        .map(|&id| m.instr(id))
        .filter(|i| {
            i.opcode == Opcode::Constant && elements_in(&i.shape) > IMMEDIATE_CONSTANT_MAX_ELEMENTS
        })
        .map(|i| shape_size(&i.shape))
        .sum()
}

/// Bytes a fusion reads through one parameter (tuple parameters through the
/// get-tuple-elements that pick each leaf).
fn param_bytes(m: &Module, users: &Users, param: InstrId) -> f32 {
    if !m.instr(param).shape.is_tuple() {
        return read_bytes(m, users, param);
    }
    let mut total = 0.0;
    leaf_indices(&m.instr(param).shape, &mut Vec::new(), &mut |index| {
        let mut at = param;
        for &k in index {
            let gte = users[at].iter().copied().find(|&u| {
                let ui = m.instr(u);
                ui.opcode == Opcode::GetTupleElement && ui.attr_int("index") == Some(k)
            });
            if let Some(g) = gte {
                at = g;
            }
        }
        total += read_bytes(m, users, at);
    });
    total
}

fn leaf_indices(s: &Shape, prefix: &mut Vec<i64>, f: &mut dyn FnMut(&[i64])) {
    match s {
        Shape::Tuple(t) => {
            for (k, e) in t.iter().enumerate() {
                prefix.push(k as i64);
                leaf_indices(e, prefix, f);
                prefix.pop();
            }
        }
        _ => f(prefix),
    }
}

/// `FusionParameterReadBytes`: slices read only what they produce; other
/// plain users share one full read.
fn read_bytes(m: &Module, users: &Users, hlo: InstrId) -> f32 {
    let own = shape_size(&m.instr(hlo).shape);
    let mut size = 0.0;
    let mut shared = false;
    for &u in &users[hlo] {
        let ui = m.instr(u);
        size += match ui.opcode {
            Opcode::Fusion => nested_fusion_reads(m, users, u, hlo),
            Opcode::Broadcast | Opcode::Reshape => own,
            _ => slice_like_read(m, hlo, u, &mut shared),
        };
    }
    size
}

/// Bytes `hlo` contributes to its user `u` when that user may read only a
/// window of it; any other user shares one full read of `hlo` (`shared`).
fn slice_like_read(m: &Module, hlo: InstrId, u: InstrId, shared: &mut bool) -> f32 {
    let ui = m.instr(u);
    let is_op0 = ui.operands.first() == Some(&hlo);
    match ui.opcode {
        Opcode::Slice => shape_size(&ui.shape),
        Opcode::DynamicSlice if is_op0 => shape_size(&ui.shape),
        // The updated operand aliases the output: not read.
        Opcode::DynamicUpdateSlice if is_op0 => 0.0,
        _ if !*shared => {
            *shared = true;
            shape_size(&m.instr(hlo).shape)
        }
        _ => 0.0,
    }
}

/// A parameter feeding a nested fusion: XLA looks at the nested fusion's
/// users (not the nested computation) when the parameter is the nested
/// root's first operand ("simple"), otherwise recurses once per user; a
/// nested fusion without users reads nothing.
fn nested_fusion_reads(m: &Module, users: &Users, fusion: InstrId, hlo: InstrId) -> f32 {
    let f = m.instr(fusion);
    let Some(&inner) = f.called_computations().first() else {
        return 0.0;
    };
    let comp = m.comp(inner);
    let root = m.instr(comp.root);
    let inner_users = users_in(m, inner);
    let mut size = 0.0;
    for (k, _) in f.operands.iter().enumerate().filter(|(_, &o)| o == hlo) {
        let Some(&param) = comp.params.get(k) else {
            continue;
        };
        let simple = root.operands.first().is_none_or(|&r| r == param);
        let mut shared = false;
        for &fu in &users[fusion] {
            let windowed = matches!(
                m.instr(fu).opcode,
                Opcode::Slice | Opcode::DynamicSlice | Opcode::DynamicUpdateSlice
            );
            if simple && windowed {
                size += slice_like_read(m, fusion, fu, &mut shared);
            } else if !shared {
                shared = true;
                size += read_bytes(m, &inner_users, param);
            }
        }
    }
    size
}
