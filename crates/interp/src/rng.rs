//! `rng-bit-generator` (HLO_SEMANTICS §9.1): XLA's Philox4x32-10 and Threefry2x32-20
//! expansions, bit for bit. `rng_default` is Philox, as on CPU/GPU.

use crate::lift::internal;
use crate::value::{elem_count, wrap_unsigned, Array, Data, Value};
use crate::InterpError;
use std::cell::Cell;
use tpusim_hlo::PrimitiveType as T;

/// Philox4x32 with 10 rounds on counter words `x` and key `(k0, k1)`.
pub fn philox4x32(mut x: [u32; 4], key: (u32, u32)) -> [u32; 4] {
    let (mut k0, mut k1) = key;
    for _ in 0..10 {
        let p0 = (x[0] as u64) * 0xD251_1F53;
        let p1 = (x[2] as u64) * 0xCD9E_8D57;
        let (h0, l0) = ((p0 >> 32) as u32, p0 as u32);
        let (h1, l1) = ((p1 >> 32) as u32, p1 as u32);
        x = [h1 ^ x[1] ^ k0, l1, h0 ^ x[3] ^ k1, l0];
        k0 = k0.wrapping_add(0x9E37_79B9);
        k1 = k1.wrapping_add(0xBB67_AE85);
    }
    x
}

/// Threefry2x32 with 20 rounds on `(x0, x1)` with key words `(k0, k1)`.
pub fn threefry2x32(x: (u32, u32), key: (u32, u32)) -> (u32, u32) {
    const ROT: [[u32; 4]; 2] = [[13, 15, 26, 6], [17, 29, 16, 24]];
    let ks = [key.0, key.1, 0x1BD1_1BDA ^ key.0 ^ key.1];
    let (mut x0, mut x1) = (x.0.wrapping_add(ks[0]), x.1.wrapping_add(ks[1]));
    for g in 0..5usize {
        for &r in &ROT[g % 2] {
            x0 = x0.wrapping_add(x1);
            x1 = x1.rotate_left(r) ^ x0;
        }
        x0 = x0.wrapping_add(ks[(g + 1) % 3]);
        x1 = x1.wrapping_add(ks[(g + 2) % 3]).wrapping_add(g as u32 + 1);
    }
    (x0, x1)
}

fn lo(x: u64) -> u32 {
    x as u32
}
fn hi(x: u64) -> u32 {
    (x >> 32) as u32
}

/// `count` 32-bit Philox outputs and the new 128-bit counter.
fn philox_words(state: &[u64], count: usize) -> (Vec<u32>, u128) {
    let key = (lo(state[0]), hi(state[0]));
    let counter = if state.len() >= 3 {
        state[1] as u128 | (state[2] as u128) << 64
    } else {
        state[1] as u128 | (state[0] as u128) << 64
    };
    let blocks = count.div_ceil(4);
    let mut out = Vec::with_capacity(blocks * 4);
    for j in 0..blocks {
        let c = counter.wrapping_add(j as u128);
        let (l, h) = (c as u64, (c >> 64) as u64);
        out.extend_from_slice(&philox4x32([lo(l), hi(l), lo(h), hi(h)], key));
    }
    out.truncate(count);
    (out, counter.wrapping_add(blocks as u128))
}

fn philox(state: &[u64], ty: T, dims: &[usize]) -> Result<(Vec<u64>, Vec<u64>), InterpError> {
    let e = elem_count(dims);
    let (bits, counter) = if ty.bit_width() == 64 {
        let (w, c) = philox_words(state, 2 * e);
        let v = w
            .chunks(2)
            .map(|p| p[0] as u64 | (p[1] as u64) << 32)
            .collect();
        (v, c)
    } else {
        let (w, c) = philox_words(state, e);
        (w.into_iter().map(u64::from).collect(), c)
    };
    let mut new_state = state.to_vec();
    new_state[1] = counter as u64;
    if state.len() >= 3 {
        new_state[2] = (counter >> 64) as u64;
    }
    Ok((new_state, bits))
}

/// The dim Threefry's 32-bit expansion splits in half: the first even-sized one, else
/// the largest.
fn split_dim(dims: &[usize]) -> usize {
    if let Some(d) = dims.iter().position(|&n| n % 2 == 0) {
        return d;
    }
    let max = dims.iter().copied().max().unwrap_or(0);
    dims.iter().position(|&n| n == max).unwrap_or(0)
}

/// The state with word 1 (Threefry's counter) replaced.
fn with_counter(state: &[u64], counter: u64) -> Vec<u64> {
    let mut s = state.to_vec();
    s[1] = counter;
    s
}

fn threefry(state: &[u64], ty: T, dims: &[usize]) -> Result<(Vec<u64>, Vec<u64>), InterpError> {
    let key = (lo(state[0]), hi(state[0]));
    let counter = state[1];
    let block = |i: u64| {
        let c = counter.wrapping_add(i);
        threefry2x32((lo(c), hi(c)), key)
    };
    let e = elem_count(dims);
    if ty.bit_width() == 64 {
        let bits = (0..e as u64)
            .map(|i| {
                let (a, b) = block(i);
                a as u64 | (b as u64) << 32
            })
            .collect();
        return Ok((with_counter(state, counter.wrapping_add(e as u64)), bits));
    }
    let full: Vec<usize> = if dims.is_empty() {
        vec![1]
    } else {
        dims.to_vec()
    };
    let d = split_dim(&full);
    let mut half = full.clone();
    half[d] = full[d].div_ceil(2);
    let hn = elem_count(&half);
    let words: Vec<(u32, u32)> = (0..hn as u64).map(block).collect();
    // Output position (outer, 2j + w, inner) takes word w of half element (outer, j, inner).
    let inner: usize = full[d + 1..].iter().product();
    let outer: usize = full[..d].iter().product();
    let mut bits = Vec::with_capacity(e);
    for o in 0..outer {
        for p in 0..full[d] {
            let j = p / 2;
            for i in 0..inner {
                let (a, b) = words[(o * half[d] + j) * inner + i];
                bits.push(u64::from(if p % 2 == 0 { a } else { b }));
            }
        }
    }
    Ok((with_counter(state, counter.wrapping_add(hn as u64)), bits))
}

/// `rng-bit-generator(state), algorithm=A` → `(new_state, bits)`.
pub(crate) fn rng_bit_generator(
    state: &Array,
    algorithm: &str,
    bits_ty: T,
    bits_dims: Vec<usize>,
) -> Result<Value, InterpError> {
    let Data::U64(s) = &state.data else {
        return Err(internal("rng-bit-generator state must be u64"));
    };
    if !bits_ty.is_unsigned_int() && !bits_ty.is_signed_int() {
        return Err(InterpError::Unsupported(format!(
            "rng-bit-generator output type '{bits_ty}'"
        )));
    }
    let (new_state, raw) = match algorithm {
        "rng_three_fry" if s.len() >= 2 => threefry(s, bits_ty, &bits_dims)?,
        "rng_philox" | "rng_default" if s.len() >= 2 => philox(s, bits_ty, &bits_dims)?,
        "rng_three_fry" | "rng_philox" | "rng_default" => {
            return Err(internal("rng-bit-generator state needs at least two words"))
        }
        other => {
            return Err(InterpError::Unsupported(format!(
                "rng-bit-generator algorithm '{other}'"
            )))
        }
    };
    let w = bits_ty.bit_width();
    let bits: Vec<u64> = raw.into_iter().map(|x| wrap_unsigned(x, w)).collect();
    let bits = if bits_ty.is_unsigned_int() {
        Array::new(bits_ty, bits_dims, Data::U64(bits))
    } else {
        let v: Vec<i64> = bits
            .iter()
            .map(|&x| crate::value::wrap_signed(x as i64, w))
            .collect();
        Array::new(bits_ty, bits_dims, Data::I64(v))
    };
    Ok(Value::tuple(vec![
        Value::Array(Array::new(
            state.ty,
            state.dims.clone(),
            Data::U64(new_state),
        )),
        Value::Array(bits),
    ]))
}

/// Philox key of the `rng` stream. XLA leaves `rng` values implementation-defined, so
/// this interpreter uses its own reproducible stream: Philox under this key, counter
/// starting at 0 each execution and shared with `rng-get-and-update-state`.
const RNG_STREAM_KEY: u64 = 0x7470_7573_696d_726e;

/// `n` 64-bit words of the `rng` stream; advances `state`.
fn stream_words(state: &Cell<u128>, n: usize) -> Vec<u64> {
    let c = state.get();
    let words = [RNG_STREAM_KEY, c as u64, (c >> 64) as u64];
    let (w, next) = philox_words(&words, 2 * n);
    state.set(next);
    w.chunks(2)
        .map(|p| p[0] as u64 | (p[1] as u64) << 32)
        .collect()
}

/// A uniform double in `[0, 1)` from the top 53 bits of `w`.
fn unit(w: u64) -> f64 {
    (w >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

/// `rng-get-and-update-state(), delta=N`: the u64[2] state, then the state advances by N.
pub(crate) fn rng_get_and_update_state(state: &Cell<u128>, delta: i64) -> Value {
    let s = state.get();
    state.set(s.wrapping_add(delta as u128));
    Value::Array(Array::new(
        T::U64,
        vec![2],
        Data::U64(vec![s as u64, (s >> 64) as u64]),
    ))
}

/// `rng(a, b), distribution=D` with this interpreter's own stream (not XLA's values,
/// which are implementation-defined): uniform in `[a, b)`, or normal with mean a and
/// standard deviation b.
pub(crate) fn rng(
    state: &Cell<u128>,
    a: &Array,
    b: &Array,
    distribution: &str,
    ty: T,
    dims: Vec<usize>,
) -> Result<Array, InterpError> {
    let n = elem_count(&dims);
    let floaty = ty.is_float();
    let ints = ty.is_signed_int() || ty.is_unsigned_int();
    match distribution {
        "rng_uniform" if floaty => {
            let (lo, hi) = (scalar_f64(a)?, scalar_f64(b)?);
            let w = stream_words(state, n);
            let v: Vec<f64> = w.iter().map(|&x| lo + (hi - lo) * unit(x)).collect();
            let mut out = Array::from_f64s(ty, dims, &v);
            // Rounding to the element type may reach `hi`; such values restart at `lo`.
            let rounded = out.to_f64s();
            let at_hi: Vec<usize> = (0..n).filter(|&i| lo < hi && rounded[i] >= hi).collect();
            if !at_hi.is_empty() {
                let lo_arr = Array::from_f64s(ty, vec![1], &[lo]);
                out.data.put(&at_hi, &lo_arr.data.splat(0, at_hi.len()))?;
            }
            Ok(out)
        }
        "rng_uniform" if ints => {
            let (lo, hi) = (a.scalar_i64()? as i128, b.scalar_i64()? as i128);
            let range = hi - lo;
            let w = stream_words(state, n);
            let v: Vec<i64> = w
                .iter()
                .map(|&x| {
                    if range > 0 {
                        (lo + x as i128 % range) as i64
                    } else {
                        lo as i64
                    }
                })
                .collect();
            Ok(Array::from_i64s(ty, dims, &v))
        }
        "rng_normal" if floaty => {
            let (mean, sd) = (scalar_f64(a)?, scalar_f64(b)?);
            let w = stream_words(state, 2 * n);
            let v: Vec<f64> = w
                .chunks(2)
                .map(|p| {
                    let (u1, u2) = (1.0 - unit(p[0]), unit(p[1]));
                    let z = (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos();
                    mean + sd * z
                })
                .collect();
            Ok(Array::from_f64s(ty, dims, &v))
        }
        _ => Err(InterpError::Unsupported(format!(
            "rng distribution '{distribution}' on '{ty}'"
        ))),
    }
}

fn scalar_f64(a: &Array) -> Result<f64, InterpError> {
    a.to_f64s()
        .first()
        .copied()
        .ok_or_else(|| internal("rng bound must be a scalar"))
}
