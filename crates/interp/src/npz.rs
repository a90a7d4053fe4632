//! Reading arguments from and writing results to NumPy `.npz` archives.
//!
//! Dtype mapping (as in the reference cases): bf16 and f16 travel as their `uint16`
//! bit patterns, except that a real `float16` array is also accepted for f16; f8
//! and f4 types travel as `uint8` bits (one element per byte), s4/s2/s1 as
//! `int8` and u4/u2/u1 as `uint8` values; everything else maps to the natural NumPy dtype.

use crate::value::{check_type, wrap_signed, wrap_unsigned, Array, Data, Value};
use crate::InterpError;
use half::{bf16, f16};
use npyz::WriterBuilder;
use std::path::Path;
use tpusim_hlo::{PrimitiveType as T, Shape};

/// Reads every element as `S` and widens it with `f`.
fn read_as<R: std::io::Read, S: npyz::Deserialize, D>(
    file: npyz::NpyFile<R>,
    f: impl Fn(S) -> D,
) -> std::io::Result<Vec<D>> {
    Ok(file.into_vec::<S>()?.into_iter().map(f).collect())
}

fn io(path: &Path, e: impl std::fmt::Display) -> InterpError {
    InterpError::Io(format!("{}: {e}", path.display()))
}

/// The NumPy type string (`<f4`, `|b1`, ...) used to store `ty`.
pub fn numpy_descr(ty: T) -> Result<&'static str, InterpError> {
    Ok(match ty {
        T::Pred => "|b1",
        // Sub-byte integers travel one value per byte (as JAX's int4 arrays widen).
        T::S8 | T::S4 | T::S2 | T::S1 => "|i1",
        T::S16 => "<i2",
        T::S32 => "<i4",
        T::S64 => "<i8",
        T::U8 | T::U4 | T::U2 | T::U1 => "|u1",
        T::U16 => "<u2",
        T::U32 => "<u4",
        T::U64 => "<u8",
        T::F32 => "<f4",
        T::F64 => "<f8",
        T::Bf16 | T::F16 => "<u2",
        _ if crate::f8::is_minifloat(ty) => "|u1",
        T::C64 => "<c8",
        T::C128 => "<c16",
        _ => {
            return Err(InterpError::Unsupported(format!(
                "npz storage of element type '{ty}'"
            )))
        }
    })
}

/// Reads `arg0..argN-1` for the parameters of the entry computation with `shapes`.
pub fn read_args(path: &Path, shapes: &[Shape]) -> Result<Vec<Value>, InterpError> {
    read_named(path, "arg", shapes)
}

/// Reads `{prefix}0..{prefix}N-1` with the given array shapes; any other array is an error.
pub fn read_named(path: &Path, prefix: &str, shapes: &[Shape]) -> Result<Vec<Value>, InterpError> {
    read_arrays(path, prefix, shapes, Dims::Exact)
}

/// Like [`read_named`], but each array may be smaller than its shape in any
/// dim (same rank): the global arrays of a sharded module, bounded by the
/// largest global shape its shards can hold. Checked from the header before
/// any element is read, so a file cannot make tpusim allocate more than the
/// module asks for.
pub fn read_named_at_most(
    path: &Path,
    prefix: &str,
    bounds: &[Shape],
) -> Result<Vec<Value>, InterpError> {
    read_arrays(path, prefix, bounds, Dims::AtMost)
}

/// Like [`read_named`], but only the element types must match: the arrays may have
/// any dims (global arrays of a sharded module, whose shapes are per device).
pub fn read_named_any_dims(
    path: &Path,
    prefix: &str,
    shapes: &[Shape],
) -> Result<Vec<Value>, InterpError> {
    read_arrays(path, prefix, shapes, Dims::Any)
}

/// How an array's dims in the file must relate to the expected shape's.
#[derive(Clone, Copy, PartialEq)]
enum Dims {
    Exact,
    AtMost,
    Any,
}

impl Dims {
    fn accepts(self, file: &[usize], want: &[usize]) -> bool {
        match self {
            Dims::Exact => file == want,
            Dims::AtMost => file.len() == want.len() && file.iter().zip(want).all(|(f, w)| f <= w),
            Dims::Any => true,
        }
    }
}

fn read_arrays(
    path: &Path,
    prefix: &str,
    shapes: &[Shape],
    check_dims: Dims,
) -> Result<Vec<Value>, InterpError> {
    let file = std::fs::File::open(path).map_err(|e| io(path, e))?;
    let mut zip = zip::ZipArchive::new(std::io::BufReader::new(file)).map_err(|e| io(path, e))?;
    let names: Vec<String> = zip
        .file_names()
        .filter_map(npyz::npz::array_name_from_file_name)
        .map(str::to_string)
        .collect();
    let extra: Vec<&String> = names
        .iter()
        .filter(|n| {
            n.strip_prefix(prefix)
                .and_then(|k| k.parse::<usize>().ok())
                .is_none_or(|k| k >= shapes.len())
        })
        .collect();
    if !extra.is_empty() {
        return Err(InterpError::BadArgument(format!(
            "{}: expected {} arrays ({prefix}0..{prefix}{}), but the file also holds {:?}",
            path.display(),
            shapes.len(),
            shapes.len().saturating_sub(1),
            extra
        )));
    }
    let mut out = Vec::with_capacity(shapes.len());
    for (i, shape) in shapes.iter().enumerate() {
        let name = format!("{prefix}{i}");
        let s = shape.as_array().ok_or_else(|| {
            InterpError::Unsupported(format!("tuple-shaped parameter {i} from npz"))
        })?;
        check_type(s.ty)?;
        let member_name = npyz::npz::file_name_from_array_name(&name);
        let mut member = match zip.by_name(&member_name) {
            Ok(m) => m,
            Err(zip::result::ZipError::FileNotFound) => {
                return Err(InterpError::BadArgument(format!(
                    "{}: missing array '{name}' for parameter {i} ({shape})",
                    path.display()
                )))
            }
            Err(e) => return Err(io(path, e)),
        };
        let e = |err: std::io::Error| io(path, format!("{name}: {err}"));
        let header = npyz::NpyHeader::from_reader(&mut member).map_err(e)?;
        let dims: Vec<usize> = header
            .shape()
            .iter()
            .map(|&d| usize::try_from(d).unwrap_or(usize::MAX))
            .collect();
        let want: Vec<usize> = s.dims.iter().map(|&d| d.max(0) as usize).collect();
        if !check_dims.accepts(&dims, &want) {
            let relation = if check_dims == Dims::AtMost {
                "at most "
            } else {
                ""
            };
            return Err(InterpError::BadArgument(format!(
                "{}: parameter {i} ('{name}'): expected shape {relation}{want:?} for {shape}, \
                 file has {dims:?}",
                path.display()
            )));
        }
        let descr = match header.dtype() {
            npyz::DType::Plain(ts) => ts,
            other => {
                return Err(InterpError::BadArgument(format!(
                    "parameter {i} ('{name}'): unsupported dtype {}",
                    other.descr()
                )))
            }
        };
        let expect = numpy_descr(s.ty)?;
        let ok = descr.to_string() == expect || (s.ty == T::F16 && descr.to_string() == "<f2");
        if !ok {
            return Err(InterpError::BadArgument(format!(
                "parameter {i} ('{name}'): expected dtype {expect} for {}, file has {descr}",
                s.ty
            )));
        }
        // The data in one read (the bytes the header promises, never more
        // than the member holds), then decoded from memory.
        let bytes_wanted = dims
            .iter()
            .try_fold(descr.num_bytes().unwrap_or(1), |n, &d| n.checked_mul(d))
            .ok_or_else(|| e(std::io::Error::other("the array's size overflows")))?;
        let mut bytes = Vec::with_capacity(bytes_wanted.min(member.size() as usize));
        std::io::Read::read_to_end(
            &mut std::io::Read::take(&mut member, bytes_wanted as u64),
            &mut bytes,
        )
        .map_err(e)?;
        if bytes.len() != bytes_wanted {
            return Err(e(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!(
                    "the data holds {} bytes, its header promises {bytes_wanted}",
                    bytes.len()
                ),
            )));
        }
        let data = decode(s.ty, &header, &bytes).map_err(e)?;
        let array = Array::new(s.ty, dims, data);
        out.push(Value::Array(match header.order() {
            npyz::Order::C => array,
            npyz::Order::Fortran => from_fortran_order(array)?,
        }));
    }
    Ok(out)
}

/// The array a Fortran-ordered file holds (NumPy writes one for an
/// F-contiguous array, a transposed one say), given its elements read in
/// storage order: that is the C-order array of the reversed dims, transposed.
fn from_fortran_order(stored: Array) -> Result<Array, InterpError> {
    let rank = stored.dims.len();
    if rank < 2 {
        return Ok(stored);
    }
    let reversed: Vec<usize> = stored.dims.iter().rev().copied().collect();
    let as_stored = Array::new(stored.ty, reversed, stored.data);
    let perm: Vec<usize> = (0..rank).rev().collect();
    crate::ops::transpose(&as_stored, &perm)
}

/// The elements of type `ty` in the raw data `bytes` of an npy member with
/// `header` (its dtype already checked against `ty`).
fn decode(ty: T, header: &npyz::NpyHeader, bytes: &[u8]) -> std::io::Result<Data> {
    let file = || npyz::NpyFile::with_header(header.clone(), bytes);
    Ok(match ty {
        T::Pred => Data::Pred(file().into_vec::<bool>()?),
        T::S8 => Data::I64(read_as::<_, i8, _>(file(), i64::from)?),
        // Wrapped to the width, as the interpreter keeps every signed value.
        T::S4 | T::S2 | T::S1 => {
            let bits = ty.bit_width();
            Data::I64(read_as::<_, i8, _>(file(), |x| {
                wrap_signed(x.into(), bits)
            })?)
        }
        T::U4 | T::U2 | T::U1 => {
            let bits = ty.bit_width();
            Data::U64(read_as::<_, u8, _>(file(), |x| {
                wrap_unsigned(x.into(), bits)
            })?)
        }
        T::S16 => Data::I64(read_as::<_, i16, _>(file(), i64::from)?),
        T::S32 => Data::I64(le_words(bytes, |w: [u8; 4]| {
            i64::from(i32::from_le_bytes(w))
        })),
        T::S64 => Data::I64(le_words(bytes, i64::from_le_bytes)),
        T::U8 => Data::U64(bytes.iter().map(|&b| u64::from(b)).collect()),
        T::U16 => Data::U64(read_as::<_, u16, _>(file(), u64::from)?),
        T::U32 => Data::U64(le_words(bytes, |w: [u8; 4]| {
            u64::from(u32::from_le_bytes(w))
        })),
        T::U64 => Data::U64(le_words(bytes, u64::from_le_bytes)),
        T::F32 => Data::F32(le_words(bytes, f32::from_le_bytes)),
        T::F64 => Data::F64(le_words(bytes, f64::from_le_bytes)),
        // Narrow floats travel as their bit patterns (the jax_cases convention).
        T::Bf16 => Data::Bf16(le_words(bytes, |w: [u8; 2]| {
            bf16::from_bits(u16::from_le_bytes(w))
        })),
        // `<u2` bits or a real `<f2` array: the same bytes.
        T::F16 => Data::F16(le_words(bytes, |w: [u8; 2]| {
            f16::from_bits(u16::from_le_bytes(w))
        })),
        ty if crate::f8::is_minifloat(ty) => Data::F8(bytes.to_vec()),
        T::C64 => Data::C64(read_as::<_, num_complex::Complex32, _>(file(), |z| {
            (z.re, z.im)
        })?),
        T::C128 => Data::C128(read_as::<_, num_complex::Complex64, _>(file(), |z| {
            (z.re, z.im)
        })?),
        ty => {
            return Err(std::io::Error::other(format!(
                "npz storage of element type '{ty}'"
            )))
        }
    })
}

/// Little-endian `N`-byte words of `bytes` (whole words only; the caller
/// checked the length), each converted by `f`: a loop that vectorizes, where
/// reading element by element through the archive's reader costs hundreds of
/// instructions per element.
fn le_words<const N: usize, D>(bytes: &[u8], f: impl Fn([u8; N]) -> D) -> Vec<D> {
    bytes
        .chunks_exact(N)
        .map(|c| {
            let mut w = [0u8; N];
            w.copy_from_slice(c);
            f(w)
        })
        .collect()
}

/// Writes result leaves as `out0..outM-1`.
pub fn write_outputs(path: &Path, leaves: &[Value]) -> Result<(), InterpError> {
    let file = std::fs::File::create(path).map_err(|e| io(path, e))?;
    let mut w = npyz::npz::NpzWriter::new(std::io::BufWriter::new(file));
    for (k, v) in leaves.iter().enumerate() {
        let a = v.as_array()?;
        let name = format!("out{k}");
        let shape: Vec<u64> = a.dims.iter().map(|&d| d as u64).collect();
        // A fixed date (the zip epoch, 1980-01-01), so equal results are equal files.
        let opts = zip::write::FileOptions::default()
            .compression_method(zip::CompressionMethod::Stored)
            .last_modified_time(zip::DateTime::default());
        macro_rules! put {
            ($t:ty, $iter:expr) => {{
                let mut wr = w
                    .array::<$t>(&name, opts)
                    .map_err(|e| io(path, e))?
                    .default_dtype()
                    .shape(&shape)
                    .begin_nd()
                    .map_err(|e| io(path, e))?;
                wr.extend($iter).map_err(|e| io(path, e))?;
                wr.finish().map_err(|e| io(path, e))?;
            }};
        }
        match (&a.data, a.ty) {
            (Data::Pred(v), _) => put!(bool, v.iter().copied()),
            (Data::I64(v), T::S8 | T::S4 | T::S2 | T::S1) => put!(i8, v.iter().map(|&x| x as i8)),
            (Data::I64(v), T::S16) => put!(i16, v.iter().map(|&x| x as i16)),
            (Data::I64(v), T::S32) => put!(i32, v.iter().map(|&x| x as i32)),
            (Data::I64(v), T::S64) => put!(i64, v.iter().copied()),
            (Data::U64(v), T::U8 | T::U4 | T::U2 | T::U1) => put!(u8, v.iter().map(|&x| x as u8)),
            (Data::U64(v), T::U16) => put!(u16, v.iter().map(|&x| x as u16)),
            (Data::U64(v), T::U32) => put!(u32, v.iter().map(|&x| x as u32)),
            (Data::U64(v), T::U64) => put!(u64, v.iter().copied()),
            (Data::F32(v), _) => put!(f32, v.iter().copied()),
            (Data::F64(v), _) => put!(f64, v.iter().copied()),
            (Data::Bf16(v), _) => put!(u16, v.iter().map(|x| x.to_bits())),
            (Data::F16(v), _) => put!(u16, v.iter().map(|x| x.to_bits())),
            (Data::F8(v), _) => put!(u8, v.iter().copied()),
            (Data::C64(v), _) => put!(
                num_complex::Complex32,
                v.iter()
                    .map(|&(re, im)| num_complex::Complex32::new(re, im))
            ),
            (Data::C128(v), _) => put!(
                num_complex::Complex64,
                v.iter()
                    .map(|&(re, im)| num_complex::Complex64::new(re, im))
            ),
            _ => {
                return Err(InterpError::Unsupported(format!(
                    "npz storage of element type '{}'",
                    a.ty
                )))
            }
        }
    }
    w.zip_writer().finish().map_err(|e| io(path, e))?;
    Ok(())
}

/// Deterministic pseudo-random arguments for `shapes` (splitmix64 from `seed`):
/// floats uniform in [-1, 1), ints in [0, 16), pred fair coin.
pub fn random_args(shapes: &[Shape], seed: u64) -> Result<Vec<Value>, InterpError> {
    let mut state = seed;
    let mut next = move || {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    shapes
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let a = s.as_array().ok_or_else(|| {
                InterpError::Unsupported(format!("random values for tuple-shaped parameter {i}"))
            })?;
            check_type(a.ty)?;
            let dims: Vec<usize> = a.dims.iter().map(|&d| d.max(0) as usize).collect();
            let n: usize = dims.iter().product();
            // Generated straight into the array's storage: an f64 copy
            // would double the peak memory of a large input.
            let arr = if a.ty.is_float() || a.ty.is_complex() {
                let v = (0..n).map(|_| (next() >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0);
                Array::from_f64_iter(a.ty, dims, v)
            } else {
                let m = if a.ty == T::Pred { 2 } else { 16 };
                Array::from_i64_iter(a.ty, dims, (0..n).map(|_| (next() % m) as i64))
            };
            Ok(Value::Array(arr))
        })
        .collect()
}
