//! Runtime values: typed dense arrays (row-major, logical order) and tuples.

use crate::InterpError;
use half::{bf16, f16};
use std::sync::Arc;
use tpusim_hlo::types::TypeKind;
use tpusim_hlo::PrimitiveType as T;

/// Element storage, one natural Rust type per family.
///
/// Signed integers of every width live in `I64` (sign-extended and wrapped to their
/// width), unsigned ones in `U64` (zero-extended and masked). f8 types keep their bits.
#[derive(Clone, Debug, PartialEq)]
pub enum Data {
    Pred(Vec<bool>),
    I64(Vec<i64>),
    U64(Vec<u64>),
    F32(Vec<f32>),
    F64(Vec<f64>),
    Bf16(Vec<bf16>),
    F16(Vec<f16>),
    /// Bit patterns of the f8 and f4 types (`crate::f8`), one element per byte.
    F8(Vec<u8>),
    C64(Vec<(f32, f32)>),
    C128(Vec<(f64, f64)>),
}

/// Applies `$body` to the vector inside any [`Data`] variant, rebuilding the same variant.
macro_rules! map_data {
    ($data:expr, $v:ident => $body:expr) => {
        match $data {
            Data::Pred($v) => Data::Pred($body),
            Data::I64($v) => Data::I64($body),
            Data::U64($v) => Data::U64($body),
            Data::F32($v) => Data::F32($body),
            Data::F64($v) => Data::F64($body),
            Data::Bf16($v) => Data::Bf16($body),
            Data::F16($v) => Data::F16($body),
            Data::F8($v) => Data::F8($body),
            Data::C64($v) => Data::C64($body),
            Data::C128($v) => Data::C128($body),
        }
    };
}
pub(crate) use map_data;

impl Data {
    pub fn len(&self) -> usize {
        match self {
            Data::Pred(v) => v.len(),
            Data::I64(v) => v.len(),
            Data::U64(v) => v.len(),
            Data::F32(v) => v.len(),
            Data::F64(v) => v.len(),
            Data::Bf16(v) => v.len(),
            Data::F16(v) => v.len(),
            Data::F8(v) => v.len(),
            Data::C64(v) => v.len(),
            Data::C128(v) => v.len(),
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Elements at `idx`, in order.
    pub fn take(&self, idx: &[usize]) -> Data {
        map_data!(self, v => idx.iter().map(|&i| v[i]).collect())
    }
    /// A vector of `n` copies of element `i`.
    pub fn splat(&self, i: usize, n: usize) -> Data {
        map_data!(self, v => vec![v[i]; n])
    }
    /// Writes `src[k]` to `self[idx[k]]`. Both must be the same variant.
    pub fn put(&mut self, idx: &[usize], src: &Data) -> Result<(), InterpError> {
        macro_rules! put {
            ($($var:ident),*) => {
                match (self, src) {
                    $((Data::$var(d), Data::$var(s)) => {
                        for (k, &i) in idx.iter().enumerate() {
                            d[i] = s[k];
                        }
                        Ok(())
                    })*
                    _ => Err(InterpError::Internal("storage mismatch in put".into())),
                }
            };
        }
        put!(Pred, I64, U64, F32, F64, Bf16, F16, F8, C64, C128)
    }
    /// Copies `src[src_start..src_start + len]` to `self[dst_start..]`; both
    /// must be the same variant and the ranges inside them.
    pub fn copy_run(
        &mut self,
        dst_start: usize,
        src: &Data,
        src_start: usize,
        len: usize,
    ) -> Result<(), InterpError> {
        let out_of_range = || InterpError::Internal("copy out of range".into());
        macro_rules! copy {
            ($($var:ident),*) => {
                match (self, src) {
                    $((Data::$var(d), Data::$var(s)) => {
                        let from = s
                            .get(src_start..src_start.checked_add(len).ok_or_else(out_of_range)?)
                            .ok_or_else(out_of_range)?;
                        d.get_mut(dst_start..dst_start.checked_add(len).ok_or_else(out_of_range)?)
                            .ok_or_else(out_of_range)?
                            .copy_from_slice(from);
                        Ok(())
                    })*
                    _ => Err(InterpError::Internal("storage mismatch in copy".into())),
                }
            };
        }
        copy!(Pred, I64, U64, F32, F64, Bf16, F16, F8, C64, C128)
    }
    /// Concatenates same-variant storages.
    pub fn concat(parts: &[&Data]) -> Result<Data, InterpError> {
        let first = parts
            .first()
            .ok_or_else(|| InterpError::Internal("empty concat".into()))?;
        let total: usize = parts.iter().map(|p| p.len()).sum();
        let mut out = first.splat_empty(total);
        for p in parts {
            out.extend(p)?;
        }
        Ok(out)
    }
    fn splat_empty(&self, cap: usize) -> Data {
        map_data!(self, _v => Vec::with_capacity(cap))
    }
    fn extend(&mut self, src: &Data) -> Result<(), InterpError> {
        macro_rules! ext {
            ($($var:ident),*) => {
                match (self, src) {
                    $((Data::$var(d), Data::$var(s)) => { d.extend_from_slice(s); Ok(()) })*
                    _ => Err(InterpError::Internal("storage mismatch in concat".into())),
                }
            };
        }
        ext!(Pred, I64, U64, F32, F64, Bf16, F16, F8, C64, C128)
    }
}

/// A few dimension numbers or strides, kept inline (most arrays have at most
/// six dims; kernels on a loop's hot path work them out on every call).
pub type DimList = smallvec::SmallVec<[usize; 6]>;

/// Whether two dimension lists are equal.
///
/// Slice `==` calls `memcmp` even for two empty lists, whose pointers are
/// dangling. glibc's AVX-512 `memcmp` reads short inputs with a masked load,
/// and on AMD Zen 4 a masked-off load from an unmapped address takes a
/// microcode assist: comparing two scalars' dims cost 12% of a 1,000-step
/// scan's time. Empty lists never reach `memcmp` here.
pub(crate) fn same_dims(a: &[usize], b: &[usize]) -> bool {
    a.len() == b.len() && (a.is_empty() || a == b)
}

/// A dense array in row-major logical order.
#[derive(Clone, Debug, PartialEq)]
pub struct Array {
    pub ty: T,
    pub dims: Vec<usize>,
    pub data: Data,
}

/// A runtime value: an array or a (possibly nested) tuple.
///
/// Tuple elements are shared: building a tuple from values, taking an element
/// out (`get-tuple-element`) or passing a loop state along copies no array data.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Array(Array),
    Tuple(Vec<Arc<Value>>),
}

impl Value {
    pub fn as_array(&self) -> Result<&Array, InterpError> {
        match self {
            Value::Array(a) => Ok(a),
            Value::Tuple(_) => Err(InterpError::Internal(
                "expected an array value, found a tuple".into(),
            )),
        }
    }
    /// A tuple of `elems`.
    pub fn tuple(elems: Vec<Value>) -> Value {
        Value::Tuple(elems.into_iter().map(Arc::new).collect())
    }
    /// Flattened array leaves, depth first (array data is copied only where it
    /// is still shared).
    pub fn into_leaves(self, out: &mut Vec<Value>) {
        match self {
            Value::Array(_) => out.push(self),
            Value::Tuple(t) => t
                .into_iter()
                .for_each(|v| Arc::unwrap_or_clone(v).into_leaves(out)),
        }
    }
}

pub fn elem_count(dims: &[usize]) -> usize {
    dims.iter().product()
}

/// Row-major strides of `dims`.
pub fn strides(dims: &[usize]) -> DimList {
    let mut s = DimList::from_elem(1, dims.len());
    for i in (0..dims.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * dims[i + 1];
    }
    s
}

/// Checks that the interpreter can hold `ty`, naming it otherwise.
pub fn check_type(ty: T) -> Result<(), InterpError> {
    match ty {
        _ if crate::f8::is_minifloat(ty) => Ok(()),
        _ => match ty.kind() {
            TypeKind::Pred | TypeKind::Signed | TypeKind::Unsigned => Ok(()),
            TypeKind::Float if matches!(ty, T::F32 | T::F64 | T::Bf16 | T::F16) => Ok(()),
            TypeKind::Complex => Ok(()),
            _ => Err(InterpError::Unsupported(format!("element type '{ty}'"))),
        },
    }
}

/// Wraps a signed value to `bits` (sign-extending).
pub fn wrap_signed(v: i64, bits: u32) -> i64 {
    if bits >= 64 {
        v
    } else {
        let sh = 64 - bits;
        (v << sh) >> sh
    }
}

/// Masks an unsigned value to `bits`.
pub fn wrap_unsigned(v: u64, bits: u32) -> u64 {
    if bits >= 64 {
        v
    } else {
        v & ((1u64 << bits) - 1)
    }
}

/// The value of minifloat (f8/f4) bits; NaNs widen to a quiet NaN keeping the sign.
pub fn f8_to_f32(ty: T, b: u8) -> f32 {
    crate::f8::decode(ty, b)
}

pub fn f32_to_f8(ty: T, x: f32) -> u8 {
    crate::f8::encode(ty, x)
}

impl Array {
    pub fn new(ty: T, dims: Vec<usize>, data: Data) -> Array {
        Array { ty, dims, data }
    }
    pub fn len(&self) -> usize {
        self.data.len()
    }
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }
    /// An array of zeros of `ty`.
    pub fn zeros(ty: T, dims: Vec<usize>) -> Result<Array, InterpError> {
        check_type(ty)?;
        let n = elem_count(&dims);
        // Straight into the storage: an f64 vector of zeros first would take
        // 8 bytes per element beside the array.
        Ok(Array::from_f64_iter(ty, dims, std::iter::repeat_n(0.0, n)))
    }
    /// Builds an array of `ty` from f64 values (rounded / truncated as `convert` would).
    pub fn from_f64s(ty: T, dims: Vec<usize>, v: &[f64]) -> Array {
        Array::from_f64_iter(ty, dims, v.iter().copied())
    }
    /// Like [`Array::from_f64s`], converting the values as they come (no f64
    /// copy of a large array is held).
    pub fn from_f64_iter(ty: T, dims: Vec<usize>, v: impl Iterator<Item = f64>) -> Array {
        let bits = ty.bit_width();
        let data = match ty {
            T::Pred => Data::Pred(v.map(|x| x != 0.0).collect()),
            T::F32 => Data::F32(v.map(|x| x as f32).collect()),
            T::F64 => Data::F64(v.collect()),
            T::Bf16 => Data::Bf16(v.map(bf16::from_f64).collect()),
            T::F16 => Data::F16(v.map(f16::from_f64).collect()),
            _ if crate::f8::is_minifloat(ty) => {
                Data::F8(v.map(|x| crate::f8::encode_f64(ty, x)).collect())
            }
            T::C64 => Data::C64(v.map(|x| (x as f32, 0.0)).collect()),
            T::C128 => Data::C128(v.map(|x| (x, 0.0)).collect()),
            _ if ty.is_unsigned_int() => {
                Data::U64(v.map(|x| wrap_unsigned(x as u64, bits)).collect())
            }
            _ => Data::I64(v.map(|x| wrap_signed(x as i64, bits)).collect()),
        };
        Array::new(ty, dims, data)
    }
    /// The first `n` elements (all of them when there are fewer), as a
    /// rank-1 array of the same type.
    pub fn prefix(&self, n: usize) -> Array {
        let k = n.min(self.data.len());
        Array::new(
            self.ty,
            vec![k],
            map_data!(&self.data, v => v[..k].to_vec()),
        )
    }
    /// Storage variant for `ty` built from i64 values (wrapping ints; exact small floats).
    pub fn from_i64s(ty: T, dims: Vec<usize>, v: &[i64]) -> Array {
        Array::from_i64_iter(ty, dims, v.iter().copied())
    }
    /// Like [`Array::from_i64s`], converting the values as they come.
    pub fn from_i64_iter(ty: T, dims: Vec<usize>, v: impl Iterator<Item = i64>) -> Array {
        let bits = ty.bit_width();
        if ty.is_signed_int() {
            return Array::new(
                ty,
                dims,
                Data::I64(v.map(|x| wrap_signed(x, bits)).collect()),
            );
        }
        if ty.is_unsigned_int() {
            return Array::new(
                ty,
                dims,
                Data::U64(v.map(|x| wrap_unsigned(x as u64, bits)).collect()),
            );
        }
        Array::from_f64_iter(ty, dims, v.map(|x| x as f64))
    }
    /// Every element as f32 (floats and complex real parts); ints and pred converted.
    pub fn to_f32s(&self) -> Vec<f32> {
        match &self.data {
            Data::Pred(v) => v.iter().map(|&b| b as u8 as f32).collect(),
            Data::I64(v) => v.iter().map(|&x| x as f32).collect(),
            Data::U64(v) => v.iter().map(|&x| x as f32).collect(),
            Data::F32(v) => v.clone(),
            Data::F64(v) => v.iter().map(|&x| x as f32).collect(),
            Data::Bf16(v) => v.iter().map(|x| x.to_f32()).collect(),
            Data::F16(v) => v.iter().map(|x| x.to_f32()).collect(),
            Data::F8(v) => v.iter().map(|&b| f8_to_f32(self.ty, b)).collect(),
            Data::C64(v) => v.iter().map(|x| x.0).collect(),
            Data::C128(v) => v.iter().map(|x| x.0 as f32).collect(),
        }
    }
    /// Every element as f64 (exact for every float type except huge ints; complex
    /// values give their real parts).
    pub fn to_f64s(&self) -> Vec<f64> {
        match &self.data {
            Data::I64(v) => v.iter().map(|&x| x as f64).collect(),
            Data::U64(v) => v.iter().map(|&x| x as f64).collect(),
            Data::F64(v) => v.clone(),
            Data::C128(v) => v.iter().map(|x| x.0).collect(),
            _ => self.to_f32s().into_iter().map(f64::from).collect(),
        }
    }
    /// Rebuilds an array of narrow float type `ty` from f32 results (round to nearest even).
    pub fn from_f32s(ty: T, dims: Vec<usize>, v: Vec<f32>) -> Array {
        let data = match ty {
            T::F32 => Data::F32(v),
            T::Bf16 => Data::Bf16(v.iter().map(|&x| bf16::from_f32(x)).collect()),
            T::F16 => Data::F16(v.iter().map(|&x| f16::from_f32(x)).collect()),
            _ if crate::f8::is_minifloat(ty) => {
                Data::F8(v.iter().map(|&x| f32_to_f8(ty, x)).collect())
            }
            T::F64 => Data::F64(v.into_iter().map(f64::from).collect()),
            _ => {
                return Array::from_f64s(ty, dims, &v.iter().map(|&x| x as f64).collect::<Vec<_>>())
            }
        };
        Array::new(ty, dims, data)
    }
    /// Results of an op computed in f32 on element type `ty`. XLA:CPU runs
    /// f8/f4 ops in f16 (its float normalization pass), so those round to f16
    /// first and then to `ty`; that double rounding is visible at ties.
    pub fn from_op_f32s(ty: T, dims: Vec<usize>, v: Vec<f32>) -> Array {
        if crate::f8::format(ty).is_some() {
            let v = v.into_iter().map(|x| f16::from_f32(x).to_f32()).collect();
            return Array::from_f32s(ty, dims, v);
        }
        Array::from_f32s(ty, dims, v)
    }
    /// Integer values of an index operand (signed read as signed).
    pub fn to_index_i64s(&self) -> Result<Vec<i64>, InterpError> {
        match &self.data {
            Data::I64(v) => Ok(v.clone()),
            Data::U64(v) => Ok(v.iter().map(|&x| x.min(i64::MAX as u64) as i64).collect()),
            _ => Err(InterpError::Internal(format!(
                "index operand must be an integer, found {}",
                self.ty
            ))),
        }
    }
    /// The first element of an index array as i64 (0 for an empty one), as
    /// [`Array::to_index_i64s`] reads it, without converting the rest.
    pub fn first_index_i64(&self) -> Result<i64, InterpError> {
        match &self.data {
            Data::I64(v) => Ok(v.first().copied().unwrap_or(0)),
            Data::U64(v) => Ok(v.first().map_or(0, |&x| x.min(i64::MAX as u64) as i64)),
            _ => Err(InterpError::Internal(format!(
                "index operand must be an integer, found {}",
                self.ty
            ))),
        }
    }
    /// The single element of a scalar pred/int array as i64.
    pub fn scalar_i64(&self) -> Result<i64, InterpError> {
        let v = match &self.data {
            Data::Pred(v) => v.first().map(|&b| b as i64),
            Data::I64(v) => v.first().copied(),
            Data::U64(v) => v.first().map(|&x| x as i64),
            _ => None,
        };
        v.ok_or_else(|| {
            InterpError::Internal(format!("expected an integer scalar, found {}", self.ty))
        })
    }
}
