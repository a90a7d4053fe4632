//! Shapes and layouts (HLO_GRAMMAR §2).

use crate::types::PrimitiveType;
use std::fmt::{self, Write};

/// Size marker for an unbounded dynamic dimension (`?`), as in XLA.
pub const UNBOUNDED_DIM: i64 = i64::MIN;
/// Tile dimension marker for `*` ("combine dimension"), as in XLA.
pub const COMBINE_DIM: i64 = i64::MIN;

/// An HLO shape: an array (including `token[]` and `opaque[]`), a tuple, or a buffer.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Shape {
    Array(ArrayShape),
    Tuple(Vec<Shape>),
    /// `b(shape)`: a buffer holding an array (XLA 2025+).
    Buffer(Box<Shape>),
}

/// An array shape: element type, dimensions and an optional layout.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ArrayShape {
    pub ty: PrimitiveType,
    /// Static size, or the bound of a dynamic dim, or [`UNBOUNDED_DIM`].
    pub dims: Vec<i64>,
    /// Per-dimension dynamic flags; empty when no dimension is dynamic.
    pub dynamic: Vec<bool>,
    pub layout: Option<Layout>,
}

/// A layout: `{minor_to_major:attrs}`. Kept small (shapes are moved around a
/// lot while parsing): everything but minor_to_major and tiles is boxed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Layout {
    pub minor_to_major: Vec<i64>,
    /// Tiles; a `*` entry is [`COMBINE_DIM`].
    pub tiles: Vec<Vec<i64>>,
    /// The rarer attributes; `None` when all are absent.
    pub attrs: Option<Box<LayoutAttrs>>,
}

/// Layout attributes after the tiles, in print order (HLO_GRAMMAR §2.2).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct LayoutAttrs {
    /// Sparse dim-level types, kept as written (`D`, `C+`, ...).
    pub dim_level_types: Option<Vec<String>>,
    pub tail_padding_alignment: Option<i64>,
    pub index_type: Option<PrimitiveType>,
    pub pointer_type: Option<PrimitiveType>,
    pub element_size_bits: Option<i64>,
    pub memory_space: Option<i64>,
    pub split_configs: Vec<(i64, Vec<i64>)>,
    pub physical_shape: Option<Box<Shape>>,
    pub dynamic_metadata_prefix_bytes: Option<i64>,
}

impl Layout {
    /// The default (row-major) layout of a rank-`rank` array: `{rank-1,...,0}`.
    pub fn default_for_rank(rank: usize) -> Layout {
        Layout {
            minor_to_major: (0..rank as i64).rev().collect(),
            ..Layout::default()
        }
    }

    /// True when the layout has nothing beyond minor_to_major.
    pub fn is_plain(&self) -> bool {
        self.tiles.is_empty() && self.attrs.is_none()
    }

    /// `S(n)`: the memory space (0, the default, when absent).
    pub fn memory_space(&self) -> i64 {
        self.attrs
            .as_ref()
            .and_then(|a| a.memory_space)
            .unwrap_or(0)
    }

    /// `E(n)`: element size in bits when packed (0 = natural size).
    pub fn element_size_bits(&self) -> i64 {
        self.attrs
            .as_ref()
            .and_then(|a| a.element_size_bits)
            .unwrap_or(0)
    }
}

impl ArrayShape {
    pub fn new(ty: PrimitiveType, dims: Vec<i64>) -> ArrayShape {
        ArrayShape {
            ty,
            dims,
            dynamic: Vec::new(),
            layout: None,
        }
    }
    pub fn rank(&self) -> usize {
        self.dims.len()
    }
    pub fn is_dynamic_dim(&self, i: usize) -> bool {
        self.dynamic.get(i).copied().unwrap_or(false)
    }
    /// Number of elements, or `None` on overflow or an unbounded dimension.
    pub fn element_count(&self) -> Option<i64> {
        self.dims.iter().try_fold(
            1i64,
            |acc, &d| {
                if d < 0 {
                    None
                } else {
                    acc.checked_mul(d)
                }
            },
        )
    }
    /// Same type and dimensions (layouts ignored).
    pub fn compatible(&self, other: &ArrayShape) -> bool {
        self.ty == other.ty && self.dims == other.dims && self.dynamic_flags_eq(other)
    }
    fn dynamic_flags_eq(&self, other: &ArrayShape) -> bool {
        (0..self.rank().max(other.rank()))
            .all(|i| self.is_dynamic_dim(i) == other.is_dynamic_dim(i))
    }
}

impl Shape {
    pub fn array(ty: PrimitiveType, dims: Vec<i64>) -> Shape {
        Shape::Array(ArrayShape::new(ty, dims))
    }
    pub fn scalar(ty: PrimitiveType) -> Shape {
        Shape::array(ty, Vec::new())
    }
    pub fn token() -> Shape {
        Shape::scalar(PrimitiveType::Token)
    }
    pub fn as_array(&self) -> Option<&ArrayShape> {
        match self {
            Shape::Array(a) => Some(a),
            _ => None,
        }
    }
    pub fn tuple_elements(&self) -> Option<&[Shape]> {
        match self {
            Shape::Tuple(t) => Some(t),
            _ => None,
        }
    }
    pub fn is_tuple(&self) -> bool {
        matches!(self, Shape::Tuple(_))
    }
    pub fn is_token(&self) -> bool {
        matches!(self, Shape::Array(a) if a.ty == PrimitiveType::Token)
    }
    /// Element type of an array shape.
    pub fn element_type(&self) -> Option<PrimitiveType> {
        self.as_array().map(|a| a.ty)
    }
    pub fn dims(&self) -> &[i64] {
        self.as_array().map(|a| a.dims.as_slice()).unwrap_or(&[])
    }
    pub fn rank(&self) -> usize {
        self.dims().len()
    }
    /// The subshape at a tuple index path, if it exists.
    pub fn subshape(&self, index: &[i64]) -> Option<&Shape> {
        let mut s = self;
        for &i in index {
            s = usize::try_from(i)
                .ok()
                .and_then(|i| s.tuple_elements()?.get(i))?;
        }
        Some(s)
    }
    /// Structural equality ignoring layouts.
    pub fn compatible(&self, other: &Shape) -> bool {
        match (self, other) {
            (Shape::Array(a), Shape::Array(b)) => a.compatible(b),
            (Shape::Tuple(a), Shape::Tuple(b)) => {
                a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.compatible(y))
            }
            (Shape::Buffer(a), Shape::Buffer(b)) => a.compatible(b),
            _ => false,
        }
    }
    /// Total bytes of all array leaves (unpacked element sizes, no padding).
    pub fn byte_size(&self) -> u64 {
        match self {
            Shape::Array(a) => {
                let n = a.element_count().unwrap_or(0).max(0) as u64;
                n.saturating_mul(a.ty.byte_size())
            }
            // Saturating: dims come from the input, and two saturated leaves
            // would overflow a plain sum.
            Shape::Tuple(t) => t.iter().map(Shape::byte_size).fold(0, u64::saturating_add),
            Shape::Buffer(b) => b.byte_size(),
        }
    }
    /// Array leaves in order (depth-first), for flattening tuple results.
    pub fn leaves(&self) -> Vec<&ArrayShape> {
        let mut out = Vec::new();
        self.collect_leaves(&mut out);
        out
    }
    fn collect_leaves<'a>(&'a self, out: &mut Vec<&'a ArrayShape>) {
        match self {
            Shape::Array(a) => out.push(a),
            Shape::Tuple(t) => t.iter().for_each(|s| s.collect_leaves(out)),
            Shape::Buffer(b) => b.collect_leaves(out),
        }
    }
    /// Gives every array in the shape without a layout its default layout.
    pub fn fill_default_layouts(&mut self) {
        match self {
            Shape::Array(a) => {
                if a.layout.is_none() && a.ty.is_array_type() {
                    a.layout = Some(Layout::default_for_rank(a.rank()));
                }
            }
            Shape::Tuple(t) => t.iter_mut().for_each(Shape::fill_default_layouts),
            Shape::Buffer(b) => b.fill_default_layouts(),
        }
    }
    /// A copy of the shape with every layout removed.
    pub fn without_layouts(&self) -> Shape {
        match self {
            Shape::Array(a) => Shape::Array(ArrayShape {
                layout: None,
                ..a.clone()
            }),
            Shape::Tuple(t) => Shape::Tuple(t.iter().map(Shape::without_layouts).collect()),
            Shape::Buffer(b) => Shape::Buffer(Box::new(b.without_layouts())),
        }
    }
}

/// Writes a shape in canonical HLO text; `with_layout` false omits layouts.
pub fn write_shape(out: &mut String, shape: &Shape, with_layout: bool) {
    match shape {
        Shape::Array(a) => write_array_shape(out, a, with_layout),
        Shape::Tuple(elems) => {
            out.push('(');
            for (i, e) in elems.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_shape(out, e, with_layout);
            }
            out.push(')');
        }
        Shape::Buffer(inner) => {
            out.push_str("b(");
            write_shape(out, inner, with_layout);
            out.push(')');
        }
    }
}

fn write_array_shape(out: &mut String, a: &ArrayShape, with_layout: bool) {
    out.push_str(a.ty.name());
    out.push('[');
    for (i, &d) in a.dims.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        if d == UNBOUNDED_DIM {
            out.push('?');
        } else {
            if a.is_dynamic_dim(i) {
                out.push_str("<=");
            }
            let _ = write!(out, "{d}");
        }
    }
    out.push(']');
    if let (true, Some(layout)) = (with_layout, &a.layout) {
        // Scalars and tokens print no layout unless it carries attributes.
        if a.rank() > 0 || !layout.is_plain() {
            write_layout(out, layout);
        }
    }
}

fn write_int_list(out: &mut String, values: &[i64]) {
    for (i, v) in values.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let _ = write!(out, "{v}");
    }
}

fn write_layout(out: &mut String, l: &Layout) {
    out.push('{');
    write_int_list(out, &l.minor_to_major);
    if !l.is_plain() {
        out.push(':');
        if let Some(levels) = l.attrs.as_ref().and_then(|a| a.dim_level_types.as_ref()) {
            out.push_str("D(");
            out.push_str(&levels.join(","));
            out.push(')');
        }
        if !l.tiles.is_empty() {
            out.push('T');
            for tile in &l.tiles {
                out.push('(');
                for (i, &t) in tile.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    if t == COMBINE_DIM {
                        out.push('*');
                    } else {
                        let _ = write!(out, "{t}");
                    }
                }
                out.push(')');
            }
        }
        if let Some(a) = &l.attrs {
            write_layout_attrs(out, a);
        }
    }
    out.push('}');
}

fn write_layout_attrs(out: &mut String, l: &LayoutAttrs) {
    let mut part = |tag: &str, v: Option<String>| {
        if let Some(v) = v {
            let _ = write!(out, "{tag}({v})");
        }
    };
    part("L", l.tail_padding_alignment.map(|v| v.to_string()));
    part("#", l.index_type.map(|t| t.name().to_string()));
    part("*", l.pointer_type.map(|t| t.name().to_string()));
    part("E", l.element_size_bits.map(|v| v.to_string()));
    part("S", l.memory_space.map(|v| v.to_string()));
    if !l.split_configs.is_empty() {
        out.push_str("SC");
        for (dim, idx) in &l.split_configs {
            let _ = write!(out, "({dim}:");
            write_int_list(out, idx);
            out.push(')');
        }
    }
    if let Some(p) = &l.physical_shape {
        out.push_str("P(");
        write_shape(out, p, true);
        out.push(')');
    }
    if let Some(m) = l.dynamic_metadata_prefix_bytes {
        let _ = write!(out, "M({m})");
    }
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut s = String::new();
        write_shape(&mut s, self, true);
        f.write_str(&s)
    }
}

impl fmt::Display for ArrayShape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut s = String::new();
        write_array_shape(&mut s, self, true);
        f.write_str(&s)
    }
}
