//! Shape sizes as the CPU client's `HloCostAnalysis` shape-size function
//! reports them (the reference data was produced with it).

use tpusim_hlo::{ArrayShape, Shape};

/// Bytes of a pointer in a tuple's index table on the CPU backend.
const POINTER_BYTES: f32 = 8.0;

/// `GetShapeSize` with the CPU client's size function: a tuple is only its
/// table of pointers, not its leaves.
pub(crate) fn shape_size(s: &Shape) -> f32 {
    match s {
        Shape::Array(a) => array_size(a),
        Shape::Tuple(t) => POINTER_BYTES * t.len() as f32,
        Shape::Buffer(b) => shape_size(b),
    }
}

/// What an instruction writes by default: every array leaf (a tuple-shaped
/// result is charged for its contents, unlike a tuple-shaped operand).
pub(crate) fn leaves_size(s: &Shape) -> f32 {
    match s {
        Shape::Tuple(t) => t.iter().map(leaves_size).sum(),
        _ => shape_size(s),
    }
}

fn array_size(a: &ArrayShape) -> f32 {
    if !a.ty.is_array_type() {
        return 0.0;
    }
    // A layout with `E(bits)` packs sub-byte elements; otherwise each takes
    // whole bytes.
    let packed = a.layout.as_ref().map_or(0, |l| l.element_size_bits());
    let data = if packed > 0 {
        // In f64: `E(bits)` comes from the input, and elements x bits can pass
        // i64 (exact below 2^53, where every real size lies).
        (elements(a) as f64 * packed as f64 / 8.0).ceil() as f32
    } else {
        (elements(a) as f32) * a.ty.byte_size() as f32
    };
    // The CPU runtime stores each dimension's size (an s32) after the data
    // of a dynamically shaped array.
    let dynamic =
        a.dynamic.iter().any(|&d| d) || a.dims.contains(&tpusim_hlo::shape::UNBOUNDED_DIM);
    let metadata = if dynamic { 4.0 * a.rank() as f32 } else { 0.0 };
    data + metadata
}

/// `ShapeUtil::ElementsIn` of an array (0 for anything else).
pub(crate) fn elements_in(s: &Shape) -> i64 {
    s.as_array().map_or(0, elements)
}

fn elements(a: &ArrayShape) -> i64 {
    a.element_count().unwrap_or(0)
}

/// `ShapeUtil::ElementsInRecursive`: elements of every array leaf.
pub(crate) fn elements_recursive(s: &Shape) -> i64 {
    s.leaves()
        .iter()
        .map(|a| elements(a))
        .fold(0, i64::saturating_add)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Found by the mutation test: `E(9223372036854775807)` overflowed
    /// elements x bits.
    #[test]
    fn packed_sizes_do_not_overflow() {
        let text = "HloModule m\nENTRY e {\n  ROOT a = f4e2m1fn[80,20]{1,0:E(4)} parameter(0)\n}\n";
        let m = tpusim_hlo::parse_module(text).unwrap();
        let s = &m.instr(m.entry().root).shape;
        assert_eq!(shape_size(s), 800.0);
        let huge = text.replace("E(4)", "E(9223372036854775807)");
        let m = tpusim_hlo::parse_module(&huge).unwrap();
        let s = &m.instr(m.entry().root).shape;
        assert!(shape_size(s) > 1e20);
    }
}
