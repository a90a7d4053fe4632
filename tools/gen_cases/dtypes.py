"""Every element type XLA has, with JAX on CPU as the oracle: the f8 variants
and f4e2m1fn (conversions over special values and every bit pattern,
arithmetic over all pairs), s4/u4/s2/u2 (wrapping arithmetic, saturating
converts), c128 (elementwise at inf/nan/zero components, dot, reduce, fft,
converts) and dots with a pred result.

Each case directory under OUTDIR (default testdata/interp_cases), named
`dt_<type>_<what>`, holds pre.hlo, post.hlo, inputs.npz (arg0..), outputs.npz
(out0..) and meta.json, like tools/gen_cases/numeric_ops.py. npz storage:
bf16/f16 as uint16 bits, every f8/f4 type as uint8 bits (f4 one element per
byte), s4/s2 as int8 and u4/u2 as uint8 values.
Run: python tools/gen_cases/dtypes.py [OUTDIR]   (needs jax, numpy, ml_dtypes)
"""
import itertools
import json
import os
import sys

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("JAX_ENABLE_X64", "1")
import numpy as np
import ml_dtypes
import jax
import jax.numpy as jnp
from jax import lax

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "testdata", "interp_cases")
rng = np.random.default_rng(7)

MINIFLOATS = {
    "f8e4m3fnuz": ml_dtypes.float8_e4m3fnuz,
    "f8e5m2fnuz": ml_dtypes.float8_e5m2fnuz,
    "f8e4m3b11fnuz": ml_dtypes.float8_e4m3b11fnuz,
    "f8e4m3": ml_dtypes.float8_e4m3,
    "f8e3m4": ml_dtypes.float8_e3m4,
    "f4e2m1fn": ml_dtypes.float4_e2m1fn,
    "f8e4m3fn": ml_dtypes.float8_e4m3fn,
    "f8e5m2": ml_dtypes.float8_e5m2,
}
SMALL_INTS = {"s4": ml_dtypes.int4, "u4": ml_dtypes.uint4, "s2": ml_dtypes.int2, "u2": ml_dtypes.uint2}

CASES = []


def case(name, desc):
    def deco(fn):
        CASES.append(("dt_" + name, desc, fn))
        return fn
    return deco


def all_patterns(dt):
    n = 16 if ml_dtypes.finfo(dt).bits == 4 else 256
    return np.arange(n, dtype=np.uint8).view(dt)


def specials(dt):
    """f32 values that probe rounding, overflow, underflow and the special encodings."""
    fi = ml_dtypes.finfo(dt)
    mx, tiny, sub = float(fi.max), float(fi.tiny), float(fi.smallest_subnormal)
    eps = float(fi.eps)
    base = [0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 1.0, -1.0, mx, -mx, tiny, -tiny, sub, -sub,
            mx * (1 + eps / 4), mx * (1 + eps / 2), mx * (1 + eps), mx * 1.5, 1e30, -1e30,
            sub * 0.5, -sub * 0.5, sub * 0.50001, sub * 1.5, sub * 2.5, tiny - sub / 2, tiny * (1 - eps / 4),
            1 + eps / 2, 1 + eps * 1.5, 1 + eps / 2 * 1.0001, -(1 + eps / 2), 3.0, 0.1, 1e-30, 2.0 ** -150]
    grid = np.linspace(-mx * 1.1, mx * 1.1, 61).tolist()
    return np.array(base + grid, np.float32)


def minifloat_cases(tname, dt):
    @case(f"{tname}_convert", f"{tname} conversions: f32/f64/bf16/f16 specials to {tname}, every bit pattern out")
    def _():
        x = specials(dt)
        x64 = x.astype(np.float64)
        bits = all_patterns(dt)

        def f(x, x64, b):
            t = x.astype(dt)
            return (t, t.astype(jnp.float32), x64.astype(dt), x.astype(jnp.bfloat16).astype(dt),
                    x.astype(jnp.float16).astype(dt), b.astype(jnp.float32), b.astype(jnp.float16),
                    b.astype(jnp.bfloat16), b.astype(jnp.int32), b.astype(jnp.bool_),
                    b.astype(ml_dtypes.float8_e4m3fn), b.astype(jnp.float64), b.astype(ml_dtypes.int4))
        return f, [x, x64, bits]

    @case(f"{tname}_arith", f"{tname} add/sub/mul/div/max/min/compare over pattern pairs, unary ops")
    def _():
        bits = all_patterns(dt)
        # Every pattern against a sample of 16 (all 16 for f4).
        other = bits if len(bits) == 16 else bits[rng.choice(len(bits), 16, replace=False)]
        x = np.repeat(bits, len(other))
        y = np.tile(other, len(bits))

        def f(x, y):
            return (x + y, x - y, x * y, x / y, lax.max(x, y), lax.min(x, y), x < y, x == y,
                    -x, lax.abs(x), lax.sqrt(x), lax.exp(x), lax.floor(x), lax.sign(x))
        return f, [x, y]

    @case(f"{tname}_reduce_dot", f"{tname} reduce sum/max and a dot with {tname} result")
    def _():
        fi = ml_dtypes.finfo(dt)
        scale = min(float(fi.max) / 16, 4.0)
        a = (rng.standard_normal((4, 8)) * scale).astype(dt)
        b = (rng.standard_normal((8, 3)) * scale).astype(dt)

        def f(a, b):
            out = (jnp.sum(a, axis=1), jnp.max(a, axis=0), lax.dot(a, b))
            # XLA:CPU rejects a widening dot of a sub-byte type (its verifier
            # sees a custom element size on the converted operand).
            if fi.bits == 4:
                return out
            return out + (lax.dot(a, b, preferred_element_type=jnp.float32),)
        return f, [a, b]


def minifloat_more(tname, dt):
    @case(f"{tname}_more", f"{tname} transcendental and rounding ops, clamp/select, bitcast, sort, cumsum, pooling")
    def _():
        bits = all_patterns(dt)
        fi = ml_dtypes.finfo(dt)
        y = np.roll(bits, 5)
        lo = np.full(bits.shape, -float(fi.max) / 4).astype(dt)
        hi = np.full(bits.shape, float(fi.max) / 4).astype(dt)
        m = (rng.standard_normal((4, 8)) * min(float(fi.max) / 8, 2.0)).astype(dt)
        ubits = jnp.uint8 if fi.bits == 8 else None
        has_inf = np.isinf(np.array(np.inf, np.float32).astype(dt).astype(np.float32))
        init = np.array(-np.inf if has_inf else -float(fi.max), np.float32).astype(dt)

        def f(x, y, lo, hi, m):
            out = (lax.log(x), lax.log1p(x), lax.expm1(x), lax.tanh(x), lax.logistic(x), lax.sin(x),
                   lax.cos(x), lax.atan2(x, y), lax.pow(x, y), lax.rem(x, y), lax.round(x), lax.ceil(x),
                   lax.is_finite(x), lax.clamp(lo, x, hi), lax.select(x > y, x, y), lax.rsqrt(x),
                   lax.integer_pow(x, 3), jnp.sort(m, axis=1), jnp.cumsum(m, axis=1),
                   lax.reduce_window(m, init, lax.max, (2, 2), (1, 1), "VALID"),
                   jnp.mean(m, axis=0), m.T @ m[:, :3] if fi.bits == 8 else m.T)
            if ubits is not None:
                out += (lax.bitcast_convert_type(x, ubits),
                        lax.bitcast_convert_type(lax.bitcast_convert_type(x, jnp.int8), dt))
            return out
        return f, [bits, y, lo, hi, m]


def minifloat_movement(tname, dt):
    @case(f"{tname}_ops", f"{tname} conv, argmax, top_k, gather/scatter-add, dynamic slices, pad, reduce_precision")
    def _():
        fi = ml_dtypes.finfo(dt)
        scale = min(float(fi.max) / 16, 2.0)
        x = (rng.standard_normal((2, 3, 8)) * scale).astype(dt)
        w = (rng.standard_normal((4, 3, 3)) * scale).astype(dt)
        v = (rng.standard_normal((10,)) * scale).astype(dt)
        idx = np.array([1, 3, 3, 7], np.int32)

        def f(v, idx, x, w):
            return (jnp.argmax(v), lax.top_k(v, 3)[0], v[idx], v.at[idx].add(v[:4]),
                    lax.dynamic_slice(v, (idx[1],), (4,)), lax.dynamic_update_slice(v, v[:3], (idx[2],)),
                    jnp.pad(v, (2, 1), constant_values=1.0), lax.reduce_precision(v.astype(jnp.float32), 2, 3),
                    jnp.flip(v), jnp.concatenate([v, v[::2]]), jnp.cumsum(v[::-1]), jnp.argsort(v),
                    lax.conv_general_dilated(x, w, (1,), "SAME"), lax.reduce_precision(v, 2, 1),
                    lax.reduce_precision(v, 3, 2))
        return f, [v, idx, x, w]


def small_int_cases(tname, dt):
    info = ml_dtypes.iinfo(dt)
    vals = np.arange(info.min, info.max + 1)

    @case(f"{tname}_arith", f"{tname} wrapping arithmetic, bit ops and compares over every pair")
    def _():
        x = np.repeat(vals, len(vals)).astype(dt)
        y = np.tile(vals, len(vals)).astype(dt)
        ny = np.where(vals == 0, 1, vals)
        yd = np.tile(ny, len(vals)).astype(dt)

        def f(x, y, yd):
            return (x + y, x - y, x * y, x // yd, lax.rem(x, yd), lax.max(x, y), lax.min(x, y),
                    x & y, x | y, x ^ y, x < y, x == y, -x, ~x,
                    lax.shift_left(x, y), lax.shift_right_logical(x, y),
                    lax.shift_right_arithmetic(x, y), (x + y) * y - x)
        return f, [x, y, yd]

    @case(f"{tname}_convert", f"{tname} saturating converts from f32/s32, widening converts out, reduce and dot")
    def _():
        fx = np.array([0.0, -0.0, 0.4, 0.5, 1.5, -1.5, 2.5, -2.6, 7.4, 7.6, 8.0, -8.0, -8.6, 100.0, -100.0,
                       15.0, 15.6, 16.0, -1.0, np.inf, -np.inf, np.nan, 3.999, 1e10], np.float32)
        ix = np.array([0, 1, -1, 7, 8, -8, -9, 15, 16, 17, 100, -100, 255, 256, -129, 2 ** 31 - 1], np.int32)
        v = vals.astype(dt)
        m = rng.integers(info.min, info.max + 1, (3, 5)).astype(dt)
        n = rng.integers(info.min, info.max + 1, (5, 2)).astype(dt)

        def f(fx, ix, v, m, *n):
            out = (fx.astype(dt), ix.astype(dt), v.astype(jnp.float32), v.astype(jnp.int8),
                   v.astype(jnp.uint8), v.astype(jnp.int32), v.astype(ml_dtypes.int4),
                   v.astype(ml_dtypes.uint4), v.astype(jnp.bool_), v.astype(ml_dtypes.float8_e4m3fn),
                   jnp.sum(m, axis=1, dtype=dt))
            return out + tuple(lax.dot(m, x) for x in n)
        # XLA:CPU has no dot for 2-bit operands.
        return f, [fx, ix, v, m] + ([n] if info.bits == 4 else [])


for _t, _dt in MINIFLOATS.items():
    minifloat_cases(_t, _dt)
    minifloat_more(_t, _dt)
    minifloat_movement(_t, _dt)

# f8e8m0fnu: conversions only, over f32-normal values. XLA:CPU computes its
# ops in f32 with subnormals flushed (2^-127, its smallest value, is an f32
# subnormal, and f64 inputs below 2^-126 flush on the way to f32); tpusim does
# not model that flush (an XLA:CPU artifact, listed in tests/dtypes.rs).
@case("f8e8m0fnu_convert", "f8e8m0fnu conversions from f32/f64 normals, every bit pattern out")
def _():
    e8 = ml_dtypes.float8_e8m0fnu
    x = specials(e8)
    x = x[~(np.abs(x) < 2.0 ** -126)]
    bits = all_patterns(e8)[1:]

    def f(x, x64, b):
        return (x.astype(e8), x.astype(e8).astype(jnp.float32), x64.astype(e8), b.astype(jnp.float32),
                b.astype(jnp.float16), b.astype(jnp.bfloat16), b.astype(ml_dtypes.float8_e4m3fn))
    return f, [x, x.astype(np.float64), bits]
def small_int_more(tname, dt):
    info = ml_dtypes.iinfo(dt)

    @case(f"{tname}_more", f"{tname} select/clamp/sort/cumsum/reduce max/bitcast and converts from f8/f4")
    def _():
        m = rng.integers(info.min, info.max + 1, (4, 6)).astype(dt)
        f8 = np.array([0.0, -0.0, 1.5, -2.5, 7.0, 7.5, -8.5, 20.0, np.nan, -np.inf, 3.25, 0.75],
                      np.float32).astype(ml_dtypes.float8_e4m3fn)
        f4 = np.arange(16, dtype=np.uint8).view(ml_dtypes.float4_e2m1fn)
        twin = {"s4": ml_dtypes.uint4, "u4": ml_dtypes.int4, "s2": ml_dtypes.uint2, "u2": ml_dtypes.int2}[tname]
        lo, hi = np.array(info.min + 1, dt), np.array(info.max - 1, dt)

        def f(m, f8, f4):
            out = (lax.select(m > 0, m, -m), jnp.cumsum(m, axis=1, dtype=dt), jnp.max(m, axis=0),
                   jnp.min(m, axis=1), lax.bitcast_convert_type(m, twin), f8.astype(dt), f4.astype(dt),
                   m.astype(ml_dtypes.float4_e2m1fn), m.astype(jnp.float16), m.astype(jnp.bfloat16))
            # XLA:CPU's 2-bit clamp returns zeros and its 2-bit sort leaves rows
            # unsorted (bugs, not semantics): only the 4-bit types cover them.
            if info.bits == 4:
                out += (lax.clamp(lo, m, hi), jnp.sort(m, axis=1))
            return out
        return f, [m, f8, f4]


for _t, _dt in SMALL_INTS.items():
    small_int_cases(_t, _dt)
    small_int_more(_t, _dt)

PARTS = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.5, 0.5, 3.0, 1e200]
GRID = np.array([complex(r, i) for r, i in itertools.product(PARTS, PARTS)], np.complex128)
LPARTS = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.5, 3.0]
LHS = np.array([complex(r, i) for r, i in itertools.product(LPARTS, LPARTS)], np.complex128)
SPARTS = [np.nan, np.inf, 0.0, -0.0, 1.0, 2.0]
SMALL = np.array([complex(r, i) for r, i in itertools.product(SPARTS, SPARTS)], np.complex128)
C128_UNARY = {
    "tanh": lax.tanh, "expm1": lax.expm1, "rsqrt": lax.rsqrt, "sign": lax.sign, "abs": lax.abs,
    "exp": lax.exp, "log": lax.log, "log1p": lax.log1p, "sqrt": lax.sqrt, "sin": lax.sin,
    "cos": lax.cos, "tan": lax.tan, "neg": lax.neg, "real": lax.real, "imag": lax.imag,
}


@case("c128_unary", "c128 unary functions on a grid of inf/nan/zero/finite components")
def _():
    def f(z):
        return tuple(fn(z) for fn in C128_UNARY.values())
    return f, [GRID]


@case("c128_binary", "c128 add/sub/mul/div/pow/eq/ne of every pair of special/finite operands")
def _():
    x = np.array([a for a in LHS for _ in SMALL], np.complex128)
    y = np.array([b for _ in LHS for b in SMALL], np.complex128)

    def f(x, y):
        return x + y, x - y, x * y, x / y, lax.pow(x, y), x == y, x != y
    return f, [x, y]


@case("c128_dot_reduce", "c128 dot (plain and batched), reduce sum/prod, fft, converts to and from c128")
def _():
    a = rng.standard_normal((3, 4, 5)) + 1j * rng.standard_normal((3, 4, 5))
    b = rng.standard_normal((3, 5, 2)) + 1j * rng.standard_normal((3, 5, 2))
    r = rng.standard_normal((6,))
    c64 = (rng.standard_normal((6,)) + 1j * rng.standard_normal((6,))).astype(np.complex64)

    def f(a, b, r, c64):
        return (lax.batch_matmul(a, b), jnp.einsum("bij,bjk->ik", a, b), jnp.sum(a, axis=2),
                jnp.prod(a[0], axis=1), jnp.fft.fft(a[0], axis=1), jnp.fft.ifft(a[0], axis=1),
                r.astype(jnp.complex128), c64.astype(jnp.complex128), a[0].astype(jnp.complex64),
                lax.complex(r, r * 2), jnp.real(a[0]).astype(jnp.float32), jnp.abs(a[0]))
    return f, [a, b, r, c64]


@case("c128_more", "c128 conv, cumsum, triangular solve, cholesky, select, pad/concat/transpose, gather, scatter-add, while, integer_pow, rfft/irfft")
def _():
    z = rng.standard_normal((2, 3, 6)) + 1j * rng.standard_normal((2, 3, 6))
    w = rng.standard_normal((4, 3, 3)) + 1j * rng.standard_normal((4, 3, 3))
    a = rng.standard_normal((4, 4)) + 1j * rng.standard_normal((4, 4))
    spd = a @ a.conj().T + 4 * np.eye(4)
    r = rng.standard_normal((8,))
    idx = np.array([0, 2, 2, 5], np.int32)

    def f(z, w, spd, r, idx):
        conv = lax.conv_general_dilated(z, w, (1,), "SAME")
        tri = jax.scipy.linalg.solve_triangular(jnp.tril(spd), spd[:, :2], lower=True)
        chol = jnp.linalg.cholesky(spd)
        x = z[0, 0]
        loop = lax.fori_loop(0, 3, lambda k, v: v * (1 + 0.5j) + 1, x)
        return (conv, jnp.cumsum(z, axis=2), tri, chol, lax.select(x.real > 0, x, -x),
                jnp.pad(x, (1, 2)), jnp.concatenate([x, x[::-1]]), z.transpose(2, 0, 1), x[idx],
                jnp.zeros(6, jnp.complex128).at[idx].add(x[:4]), loop, lax.integer_pow(x, 3),
                jnp.fft.rfft(r), jnp.fft.irfft(jnp.fft.rfft(r)), jnp.conj(x), jnp.angle(x),
                jnp.isfinite(x), jnp.where(jnp.isnan(x), 0, x), lax.reduce_precision(r, 5, 10))
    return f, [z, w, spd, r, idx]


@case("c128_more2", "c128 inverse trig/hyperbolic functions, cumprod, fft2/ifft2, sort_complex, square, reciprocal")
def _():
    z = rng.standard_normal((3, 4)) + 1j * rng.standard_normal((3, 4))

    def f(z):
        return (jnp.arcsin(z), jnp.arccos(z), jnp.arctan(z), jnp.arcsinh(z), jnp.arccosh(z),
                jnp.arctanh(z), jnp.sinh(z), jnp.cosh(z), jnp.cumprod(z, axis=1), jnp.fft.fft2(z),
                jnp.fft.ifft2(z), jnp.sort_complex(z[0]), jnp.square(z), jnp.reciprocal(z),
                z ** 2.5, jnp.exp2(z), jnp.log10(z), jnp.sum(z, axis=0).astype(jnp.complex64))
    return f, [z]


@case("c128_specials2", "c128 inverse trig/hyperbolic and derived functions on the inf/nan/zero grid")
def _():
    def f(z):
        return (jnp.arcsin(z), jnp.arccos(z), jnp.arctan(z), jnp.arcsinh(z), jnp.arccosh(z),
                jnp.arctanh(z), jnp.sinh(z), jnp.cosh(z), jnp.square(z), jnp.reciprocal(z),
                jnp.exp2(z), jnp.log10(z), z.astype(jnp.complex64), jnp.isfinite(z))
    return f, [GRID]


@case("subbyte_bitcast", "bitcast-convert between bytes and 4-/2-bit types (little-endian nibbles)")
def _():
    b = np.array([0x12, 0xF7, 0x80, 0x0F, 0x70, 0xFF], np.uint8)
    s4 = np.array([[1, 2], [-1, 7], [-8, 0]], ml_dtypes.int4)
    f4 = np.arange(16, dtype=np.uint8).view(ml_dtypes.float4_e2m1fn).reshape(8, 2)

    def f(b, s4, f4):
        return (lax.bitcast_convert_type(b, ml_dtypes.int4), lax.bitcast_convert_type(b, ml_dtypes.uint4),
                lax.bitcast_convert_type(b, ml_dtypes.float4_e2m1fn), lax.bitcast_convert_type(b, ml_dtypes.int2),
                lax.bitcast_convert_type(b.view(np.int8), ml_dtypes.uint2),
                lax.bitcast_convert_type(s4, jnp.uint8), lax.bitcast_convert_type(f4, jnp.int8))
    return f, [b, s4, f4]


@case("pred_dot", "dot with a pred result (an or of ands), plain and batched")
def _():
    x = rng.random((4, 6)) < 0.3
    y = rng.random((6, 5)) < 0.3
    bx = rng.random((2, 3, 4)) < 0.4
    by = rng.random((2, 4, 3)) < 0.4

    def f(x, y, bx, by):
        return (lax.dot(x, y, preferred_element_type=jnp.bool_),
                lax.dot_general(bx, by, (((2,), (1,)), ((0,), (0,))), preferred_element_type=jnp.bool_))
    return f, [x, y, bx, by]


# ---------------------------------------------------------------- driver

def enc(a):
    a = np.asarray(a)
    name = a.dtype.name
    if name in ("bfloat16", "float16"):
        return a.view(np.uint16), name
    if name.startswith("float8") or name.startswith("float4"):
        return a.view(np.uint8), name
    if name in ("int4", "int2"):
        return a.astype(np.int8), name
    if name in ("uint4", "uint2"):
        return a.astype(np.uint8), name
    return a, name


def save(name, desc, lowered, ins, outs):
    d = os.path.join(OUT, name)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "pre.hlo"), "w") as fh:
        fh.write(lowered.as_text(dialect="hlo"))
    with open(os.path.join(d, "post.hlo"), "w") as fh:
        fh.write(lowered.compile().as_text())
    ins_e, outs_e = [enc(a) for a in ins], [enc(a) for a in outs]
    np.savez(os.path.join(d, "inputs.npz"), **{f"arg{i}": a for i, (a, _) in enumerate(ins_e)})
    np.savez(os.path.join(d, "outputs.npz"), **{f"out{i}": a for i, (a, _) in enumerate(outs_e)})
    meta = {"description": desc,
            "inputs": [{"shape": list(np.shape(a)), "dtype": t} for a, t in ins_e],
            "outputs": [{"shape": list(np.shape(a)), "dtype": t} for a, t in outs_e],
            "jax_version": jax.__version__,
            "generator": "tools/gen_cases/dtypes.py"}
    with open(os.path.join(d, "meta.json"), "w") as fh:
        json.dump(meta, fh, indent=1)


def main():
    only = set(os.environ.get("ONLY", "").split(",")) - {""}
    for name, desc, fn in CASES:
        if only and name not in only:
            continue
        try:
            f, ins = fn()
            jf = jax.jit(f)
            lowered = jf.lower(*ins)
            outs = [np.asarray(l) for l in jax.tree_util.tree_leaves(jf(*ins))]
        except Exception as e:  # report and go on: one broken case must not hide the rest
            print("FAILED", name, type(e).__name__, str(e).splitlines()[0])
            continue
        save(name, desc, lowered, ins, outs)
        print("ok", name)


if __name__ == "__main__":
    main()
