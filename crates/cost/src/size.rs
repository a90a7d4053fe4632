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
        ((elements(a) * packed + 7) / 8) as f32
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
    s.leaves().iter().map(|a| elements(a)).sum()
}
