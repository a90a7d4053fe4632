"""Edge-case reference programs for the functional interpreter (numerics, conv, dot,
fft, linear algebra, control flow), produced with JAX on CPU.

Each case directory under OUTDIR (default testdata/interp_cases) holds:
  pre.hlo      HLO before XLA optimisation   (lower().as_text(dialect="hlo"))
  post.hlo     HLO after XLA CPU optimisation (compile().as_text())
  inputs.npz   arg0..argN    outputs.npz  out0..outM  (flattened result)
  meta.json    description, shapes and dtypes
bf16/f16 travel as uint16 bit patterns and f8 as uint8 bit patterns.
Run: python tools/gen_cases/numeric_ops.py [OUTDIR]   (needs jax, numpy, ml_dtypes)

The CPU lowerings of cholesky and triangular_solve are LAPACK custom calls; this
script removes them so that the HLO holds the `cholesky` / `triangular-solve` ops
(XLA CPU then expands them itself), which is what the interpreter must execute;
the num_lapack case puts them back to cover the custom calls jaxlib emits on CPU.
"""
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
from jax._src.interpreters import mlir
from jax._src.lax import linalg as lax_linalg

LAPACK_LOWERINGS = {prim: mlir._platform_specific_lowerings["cpu"].pop(prim)
                    for prim in (lax_linalg.cholesky_p, lax_linalg.triangular_solve_p)}

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "testdata", "interp_cases")
rng = np.random.default_rng(42)

BF16, F8E4, F8E5 = ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2
F32, F64, C64 = np.float32, np.float64, np.complex64
NAN, INF = np.nan, np.inf

CASES = []


def case(name, desc):
    def deco(fn):
        CASES.append(("num_" + name, desc, fn))
        return fn
    return deco


def rnd(shape, dtype=F32, scale=1.0):
    if np.issubdtype(np.dtype(dtype), np.complexfloating):
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype) * scale
    return (rng.standard_normal(shape) * scale).astype(dtype)


def arr(values, dtype):
    return np.array(values, dtype=dtype)


# Special values that every float op sees. No subnormals: XLA:CPU (like the TPU)
# flushes them to zero, while the interpreter keeps IEEE gradual underflow as XLA's
# reference evaluator does, so their results legitimately differ.
EDGE = [NAN, INF, -INF, 0.0, -0.0, 1e-30, -1e-30, 0.5, -0.5, 1.0, -1.0, 2.5, -3.5,
        10.0, -10.0, 88.0, 89.0, -104.0, 1e10, -1e10, 3.4e38]
POS = [NAN, INF, 0.0, -0.0, 1.2e-38, 1e-30, 1e-6, 0.25, 0.5, 1.0, 1.5, 2.0, 10.0, 1e10, 3.4e38, -1.0, -INF]
UNIT = [NAN, -INF, INF, -1.5, -1.0, -0.999, -0.5, -0.0, 0.0, 1e-8, 0.5, 0.999, 1.0, 1.5]

# ---------------------------------------------------------------- elementwise, f32

@case("minmax_nan_inf", "maximum/minimum/clamp/compare with NaN, inf and signed zeros")
def _():
    x = arr([NAN, 1.0, NAN, INF, -INF, 0.0, -0.0, 2.0, -3.0, INF], F32)
    y = arr([1.0, NAN, NAN, -INF, INF, -0.0, 0.0, 2.0, 5.0, INF], F32)
    def f(x, y):
        return (lax.max(x, y), lax.min(x, y), lax.clamp(F32(-1.0), x, F32(1.0)), x < y, x == y, x != y,
                x >= y, jnp.isfinite(x), jnp.sign(x))
    return f, [x, y]


def unary_case(name, dtype, values, fns, desc):
    @case(name, desc)
    def _():
        x = arr(values, dtype)
        return (lambda x: tuple(g(x) for g in fns)), [x]


unary_case("exp_log_f32", F32, EDGE + POS,
           [jnp.exp, jnp.expm1, jnp.log, jnp.log1p, jnp.sqrt, lax.rsqrt, jnp.cbrt],
           "exp, expm1, log, log1p, sqrt, rsqrt, cbrt on special values")
unary_case("hyperbolic_f32", F32, EDGE,
           [jnp.tanh, jnp.sinh, jnp.cosh, jnp.arcsinh, jax.nn.sigmoid, lax.logistic],
           "tanh, sinh, cosh, asinh, logistic on special values")
unary_case("trig_f32", F32, [NAN, INF, -INF, 0.0, -0.0, 1e-30, 0.5, -0.5, 1.0, 3.14159, -2.0, 10.0, 100.0],
           [jnp.sin, jnp.cos, jnp.tan, jnp.arctan],
           "sin, cos, tan, atan on special values")
unary_case("inverse_trig_f32", F32, UNIT,
           [jnp.arcsin, jnp.arccos, jnp.arctanh, jnp.arccosh],
           "asin, acos, atanh, acosh inside and outside their domains")
unary_case("erf_f32", F32, EDGE, [lax.erf, lax.erfc, lax.erf_inv], "erf, erfc, erf_inv (JAX expands)")
unary_case("rounding_f32", F32, [NAN, INF, -INF, 0.0, -0.0, 0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 0.49999997, 1e8 + 1, -7.3],
           [jnp.floor, jnp.ceil, jnp.round, lax.round, jnp.trunc, jnp.abs, jnp.negative, jnp.sign],
           "floor, ceil, round-nearest-even/afz, trunc, abs, negate, sign")
unary_case("exp_log_f64", F64, EDGE + POS + [1e-300, 700.0, 710.0, -750.0],
           [jnp.exp, jnp.expm1, jnp.log, jnp.log1p, jnp.sqrt, lax.rsqrt, jnp.tanh, jnp.sin, jnp.cos,
            jnp.arctan, lax.logistic, jnp.floor, jnp.round],
           "f64 transcendentals on special values")


@case("binary_special_f32", "power, atan2, remainder, divide on special values")
def _():
    base = [NAN, 1.0, 0.0, -0.0, 2.0, -2.0, INF, -INF, 0.5, -8.0, 1.0, NAN, 3.0, -1.0]
    expo = [0.0, NAN, -1.0, -1.0, 0.5, 3.0, -2.0, 3.0, INF, 1.0 / 3, INF, 0.0, -INF, INF]
    x, y = arr(base, F32), arr(expo, F32)
    def f(x, y):
        return lax.pow(x, y), lax.atan2(x, y), lax.rem(x, y), x / y, x * y, x - y
    return f, [x, y]


# ---------------------------------------------------------------- integers

@case("int_div_rem", "signed/unsigned divide and remainder by zero, INT_MIN / -1")
def _():
    a = arr([7, -7, 7, -7, -2**31, -2**31, 5, 0, 2**31 - 1], np.int32)
    b = arr([2, 2, -2, -2, -1, 0, 0, 0, -1], np.int32)
    ua = arr([7, 0, 2**32 - 1, 5, 9], np.uint32)
    ub = arr([2, 0, 0, 0, 4], np.uint32)
    a8 = arr([-128, -128, 127, 5], np.int8)
    b8 = arr([-1, 0, 0, -2], np.int8)
    def f(a, b, ua, ub, a8, b8):
        return lax.div(a, b), lax.rem(a, b), lax.div(ua, ub), lax.rem(ua, ub), lax.div(a8, b8), lax.rem(a8, b8)
    return f, [a, b, ua, ub, a8, b8]


@case("int_overflow", "wrapping add/mul/negate/abs at every width")
def _():
    ins = [arr([127, -128, 100, -1], np.int8), arr([32767, -32768, 300, 7], np.int16),
           arr([2**31 - 1, -2**31, 65536, 3], np.int32), arr([2**63 - 1, -2**63, 2**40, 5], np.int64),
           arr([255, 0, 200, 17], np.uint8), arr([65535, 0, 300, 7], np.uint16),
           arr([2**32 - 1, 0, 2**20, 3], np.uint32), arr([2**64 - 1, 0, 2**40, 9], np.uint64)]
    def f(*xs):
        out = []
        for x in xs:
            out += [x + x, x * x, x - x[::-1], -x]
            if jnp.issubdtype(x.dtype, jnp.signedinteger):
                out.append(jnp.abs(x))
        return tuple(out)
    return f, ins


@case("shifts", "shifts by counts >= width and negative counts, all widths")
def _():
    def f(a, n, ua, un, b, m):
        return (lax.shift_left(a, n), lax.shift_right_logical(a, n), lax.shift_right_arithmetic(a, n),
                lax.shift_left(ua, un), lax.shift_right_logical(ua, un), lax.shift_right_arithmetic(ua, un),
                lax.shift_left(b, m), lax.shift_right_logical(b, m), lax.shift_right_arithmetic(b, m))
    a = arr([1, -1, -8, 12345, -2**31, 7, 7, 7], np.int32)
    n = arr([0, 31, 32, 33, 1, -1, 100, 4], np.int32)
    ua = arr([1, 2**32 - 1, 2**31, 5, 6], np.uint32)
    un = arr([31, 32, 31, 2**32 - 1, 3], np.uint32)
    b = arr([-128, 64, -1, 3], np.int8)
    m = arr([7, 8, 9, -1], np.int8)
    return f, [a, n, ua, un, b, m]


@case("int_bits_pow", "popcount, clz, integer power (negative exponent), not/and/or/xor")
def _():
    def f(a, u):
        return (lax.population_count(a), lax.clz(a), lax.integer_pow(a, 3), lax.integer_pow(a, 0), ~a,
                a & 5, a | 5, a ^ 5, lax.population_count(u), lax.clz(u), jnp.sign(a))
    a = arr([0, 1, -1, 2, -3, 127, -128, 9], np.int8)
    u = arr([0, 1, 2**16 - 1, 256, 7, 4096], np.uint16)
    return f, [a, u]


@case("convert_saturate", "float->int saturation and NaN->0, int->float rounding, pred")
def _():
    x = arr([NAN, INF, -INF, 1e10, -1e10, 300.7, -300.7, 127.9, -128.9, 2.5, -2.5, 0.0, 4294967296.0, 1e20], F32)
    i64 = arr([2**53 + 1, -(2**63), 2**63 - 1, 16777217, -16777219], np.int64)
    u64 = arr([2**64 - 1, 2**63, 16777217], np.uint64)
    def f(x, i64, u64):
        outs = tuple(x.astype(t) for t in (jnp.int8, jnp.uint8, jnp.int16, jnp.uint16, jnp.int32,
                                           jnp.uint32, jnp.int64, jnp.uint64, jnp.bool_,
                                           jnp.float16, jnp.bfloat16, jnp.float64))
        return outs + (i64.astype(jnp.float32), i64.astype(jnp.float64), i64.astype(jnp.int8),
                       u64.astype(jnp.float32), u64.astype(jnp.int32), (x > 0).astype(jnp.float32),
                       x.astype(jnp.float8_e4m3fn), x.astype(jnp.float8_e5m2))
    return f, [x, i64, u64]


# ---------------------------------------------------------------- narrow floats

@case("bf16_arith", "bf16 arithmetic and transcendentals rounded to nearest even")
def _():
    x = rnd((64,), F32, 3.0).astype(BF16)
    y = rnd((64,), F32, 3.0).astype(BF16)
    def f(x, y):
        return x + y, x * y, x / y, x - y, jnp.exp(x), jnp.tanh(x), jnp.sqrt(jnp.abs(x)), jnp.maximum(x, y), jnp.sum(x * y)
    return f, [x, y]


@case("f16_arith", "f16 arithmetic, overflow to inf, subnormals")
def _():
    x = arr([65504.0, 60000.0, 1e-7, 6e-8, -2.5, 3.14159, 100.0, 0.1, NAN, -INF], np.float16)
    y = arr([2.0, 1.5, 0.5, 0.5, 3.0, 1.0, 700.0, 0.2, 1.0, 1.0], np.float16)
    def f(x, y):
        return x + y, x * y, x / y, jnp.exp(y), jnp.log(jnp.abs(x)), jnp.sin(x), x.astype(jnp.float32) * 2
    return f, [x, y]


@case("f8_arith", "f8e4m3fn / f8e5m2 arithmetic and conversions (saturation to NaN/inf)")
def _():
    vals = [0.0, -0.0, 0.5, 1.0, 1.125, 3.0, 448.0, -448.0, 0.015625, 0.001953125, 240.0, -7.0]
    a = arr(vals, F8E4)
    b = arr(vals[::-1], F8E4)
    c = arr([0.0, 1.0, 57344.0, -57344.0, 0.25, 3.0, 1.5e-5, 2.0, -INF, INF, NAN, 5.0], F8E5)
    def f(a, b, c):
        return a + b, a * b, a - b, c * c, c + c, a.astype(jnp.float32), c.astype(jnp.bfloat16), (a.astype(jnp.float32) * 3.3).astype(jnp.float8_e4m3fn)
    return f, [a, b, c]


@case("reduce_precision", "reduce-precision with several exponent/mantissa widths on f32, bf16, f16")
def _():
    x = arr(EDGE + [1.0 + 2**-10, 1.0 + 3 * 2**-11, 65519.0, 65520.0, 1e-5, 6.1e-5, 3e-8, -1.00048828125], F32)
    def f(x):
        outs = tuple(lax.reduce_precision(x, e, m) for e, m in ((8, 7), (5, 10), (4, 3), (5, 2), (8, 23), (11, 52), (3, 0), (6, 1)))
        xb = x.astype(jnp.bfloat16)
        xh = x.astype(jnp.float16)
        return outs + (lax.reduce_precision(xb, 5, 3), lax.reduce_precision(xh, 5, 3), lax.reduce_precision(xh, 4, 2),
                       lax.reduce_precision(xb, 8, 2))
    return f, [x]


NARROW = [NAN, INF, -INF, 0.0, -0.0, 1e-3, -1e-3, 0.1, 0.5, -0.5, 1.0, -1.0, 2.5, -3.5, 7.0, 10.0, -10.0, 60.0, 200.0, -300.0]


@case("narrow_transcendentals", "bf16 and f16 transcendentals and NaN-propagating min/max on special values")
def _():
    xb = arr(NARROW, F32).astype(BF16)
    xh = arr(NARROW, np.float16)
    fns = [jnp.exp, jnp.log, jnp.tanh, jnp.sqrt, lax.rsqrt, jnp.sin, jnp.cos, lax.logistic, lax.erf,
           jnp.expm1, jnp.log1p, jnp.floor, jnp.round, lambda v: jnp.maximum(v, v[::-1]),
           lambda v: jnp.minimum(v, v[::-1]), lambda v: v * v[::-1] + v]
    def f(xb, xh):
        return tuple(g(xb) for g in fns) + tuple(g(xh) for g in fns)
    return f, [xb, xh]


@case("int_compare_minmax", "compare, min/max, clamp and select on extreme s64/u64/s8/u8 values and pred")
def _():
    a = arr([-2**63, 2**63 - 1, 0, -1, 5], np.int64)
    b = arr([2**63 - 1, -2**63, 0, 1, 5], np.int64)
    ua = arr([0, 2**64 - 1, 2**63, 1, 7], np.uint64)
    ub = arr([2**64 - 1, 0, 2**63 - 1, 1, 7], np.uint64)
    p = arr([True, False, True, False, True], np.bool_)
    def f(a, b, ua, ub, p):
        return (a < b, a >= b, jnp.maximum(a, b), jnp.minimum(a, b), ua < ub, jnp.maximum(ua, ub),
                jnp.where(p, a, b), jnp.where(p, ua, ub), p & (a < b), p | ~p, p ^ (ua > ub),
                jnp.clip(a, -10, 10), lax.clamp(np.uint64(1), ua, np.uint64(6)),
                a.astype(jnp.uint64), ua.astype(jnp.int64), ua.astype(jnp.int8), a.astype(jnp.uint8),
                p.astype(jnp.int32), jnp.sum(p.astype(jnp.int32)), jnp.sum(a), jnp.prod(ua))
    return f, [a, b, ua, ub, p]


# ---------------------------------------------------------------- complex

@case("c64_arith", "c64 add/sub/mul/div/exp/log/sqrt/abs/negate/compare, complex/real/imag, convert")
def _():
    a = rnd((12,), C64)
    b = rnd((12,), C64)
    r = rnd((12,), F32)
    def f(a, b, r):
        return (a + b, a - b, a * b, a / b, jnp.exp(a), jnp.log(a), jnp.sqrt(a), jnp.abs(a), -a,
                a == b, a != a, lax.complex(r, r * 2), jnp.real(a), jnp.imag(a), r.astype(jnp.complex64),
                jnp.conj(a), jnp.sum(a * b), a.real.astype(jnp.int32))
    return f, [a, b, r]


@case("c64_transcendentals", "c64 power, sign, rsqrt, expm1, log1p, sin, cos, tan, tanh")
def _():
    a = rnd((10,), C64)
    b = rnd((10,), C64, 0.5)
    def f(a, b):
        return (lax.pow(a, b), jnp.sign(a), lax.rsqrt(a), jnp.expm1(a), jnp.log1p(a), jnp.sin(a),
                jnp.cos(a), jnp.tan(a), jnp.tanh(a))
    return f, [a, b]


@case("dot_pred", "dot with a pred result (an or of ands), plain and batched")
def _():
    a = rng.random((3, 40)) < 0.15
    b = rng.random((40, 6)) < 0.15
    dims = (((1,), (0,)), ((), ()))
    bdims = (((2,), (1,)), ((0,), (0,)))
    return (lambda a, b: (lax.dot_general(a, b, dims),
                          lax.dot_general(a.reshape(1, 3, 40), b.reshape(1, 40, 6), bdims))), [a, b]


@case("c64_dot", "complex matrix products (dot_general with batch dims)")
def _():
    a = rnd((2, 3, 4), C64)
    b = rnd((2, 4, 5), C64)
    return (lambda a, b: (jnp.einsum("bij,bjk->bik", a, b), jnp.dot(a[0], b[1]))), [a, b]


# ---------------------------------------------------------------- fft

@case("fft_1d", "FFT and IFFT along the last dim, odd and even lengths")
def _():
    a = rnd((3, 8), C64)
    b = rnd((2, 7), C64)
    return (lambda a, b: (jnp.fft.fft(a), jnp.fft.ifft(a), jnp.fft.fft(b), jnp.fft.ifft(b))), [a, b]


@case("fft_nd", "2-D and 3-D FFT/IFFT")
def _():
    a = rnd((2, 4, 6), C64)
    b = rnd((3, 4, 5), C64)
    return (lambda a, b: (jnp.fft.fft2(a), jnp.fft.ifft2(a), jnp.fft.fftn(b), jnp.fft.ifftn(b))), [a, b]


@case("rfft", "RFFT and IRFFT in 1-D, 2-D and 3-D (even and odd lengths)")
def _():
    x = rnd((2, 8), F32)
    y = rnd((3, 4, 6), F32)
    z = rnd((2, 5, 7), F32)
    def f(x, y, z):
        return (jnp.fft.rfft(x), jnp.fft.irfft(jnp.fft.rfft(x)), jnp.fft.rfftn(y), jnp.fft.irfftn(jnp.fft.rfftn(y), y.shape),
                jnp.fft.rfft2(z), jnp.fft.irfft2(jnp.fft.rfft2(z), z.shape[1:]), jnp.fft.irfft(jnp.fft.rfft(z), 7))
    return f, [x, y, z]


# ---------------------------------------------------------------- linear algebra

def spd(n, batch=()):
    m = rnd(batch + (n, n), F32)
    return (m @ np.swapaxes(m, -1, -2) + n * np.eye(n, dtype=F32)).astype(F32)


@case("triangular_solve", "triangular-solve: left/right side, lower/upper, transpose, unit diagonal, batched")
def _():
    a = (rnd((2, 4, 4), F32) + 4 * np.eye(4, dtype=F32)).astype(F32)
    b = rnd((2, 4, 3), F32)
    c = rnd((2, 3, 4), F32)
    ts = lax.linalg.triangular_solve
    def f(a, b, c):
        return (ts(a, b, left_side=True, lower=True), ts(a, b, left_side=True, lower=False, transpose_a=True),
                ts(a, c, left_side=False, lower=True), ts(a, c, left_side=False, lower=False, unit_diagonal=True),
                ts(a, b, left_side=True, lower=True, transpose_a=True, unit_diagonal=True))
    return f, [a, b, c]


@case("triangular_solve_c64", "complex triangular-solve with ADJOINT")
def _():
    a = (rnd((3, 3), C64) + 3 * np.eye(3, dtype=C64)).astype(C64)
    b = rnd((3, 2), C64)
    ts = lax.linalg.triangular_solve
    def f(a, b):
        return (ts(a, b, left_side=True, lower=True, transpose_a=True, conjugate_a=True),
                ts(a, b, left_side=True, lower=False))
    return f, [a, b]


@case("cholesky", "batched cholesky (lower and upper) of SPD matrices, and a non-PD input")
def _():
    a = spd(4, (2,))
    bad = arr([[1.0, 2.0], [2.0, 1.0]], F32)
    ch = lax.linalg.cholesky
    def f(a, bad):
        return ch(a, symmetrize_input=False), ch(bad, symmetrize_input=False)
    return f, [a, bad]


@case("lapack", "jaxlib's CPU LAPACK custom calls: potrf (cholesky, incl. non-PD) and trsm (solves)")
def _():
    a = spd(3, (2,))
    bad = arr([[1.0, 2.0], [2.0, 1.0]], F32)
    b = rnd((2, 3, 2), F32)
    ac = (rnd((3, 3), C64) + 3 * np.eye(3, dtype=C64)).astype(C64)
    bc = rnd((2, 3), C64)
    ts = lax.linalg.triangular_solve
    def f(a, bad, b, ac, bc):
        return (lax.linalg.cholesky(a), lax.linalg.cholesky(bad),
                ts(a, b, left_side=True, lower=True, transpose_a=True),
                ts(a, jnp.swapaxes(b, 1, 2), left_side=False, lower=False, unit_diagonal=True),
                ts(ac, bc, left_side=False, lower=True, transpose_a=True, conjugate_a=True))
    return f, [a, bad, b, ac, bc], {"lapack": True}


# ---------------------------------------------------------------- decompositions
# LU, QR, SVD, eigh and eig lower to jaxlib's LAPACK custom calls on CPU
# (getrf, geqrf + orgqr/ungqr, gesdd, syevd/heevd, geev) and, lowered for TPU,
# to LuDecomposition, Qr, ProductOfElementaryHouseholderReflectors and Eigh
# (SVD becomes a QDWH program around Qr and Eigh; eig has no TPU lowering).
# The *_tpu cases' pre.hlo is the TPU lowering, checked against the CPU result.
# LU and QR outputs are determined (LAPACK's pivoting and Householder
# conventions) and so are singular values and eigenvalues: those are compared.
# Singular and eigenvectors are defined up to sign or phase, so the programs
# return predicates checking them instead: reconstruction and orthonormality
# within TOL_ULPS * n * eps (relative), which a wrong vector fails by far.
# eig's eigenvalue order is LAPACK's own: the programs return the sorted real
# and sorted imaginary parts, which do not depend on it.

F64, C128 = np.float64, np.complex128
TOL_ULPS = 200


def mats(shape, rank_deficient=False):
    """One matrix of each of f32, f64, c64, c128 (the last two dims `shape`)."""
    out = []
    for dt in (F32, F64, C64, C128):
        a = rnd(shape, dt)
        if rank_deficient:
            a[..., :, -1] = a[..., :, 0] + a[..., :, 1]
        out.append(a)
    return out


def _eps(x):
    return jnp.finfo(x.dtype).eps


def _adj(x):
    return jnp.conj(jnp.swapaxes(x, -1, -2))


def _close(x, y, scale, n):
    """max |x - y| <= TOL_ULPS * n * eps * scale (scale: the matrices' size)."""
    tol = TOL_ULPS * n * _eps(jnp.real(x)) * scale
    return jnp.max(jnp.abs(x - y)) <= jnp.max(tol)


def _orthonormal(q, n):
    k = q.shape[-1]
    return _close(_adj(q) @ q, jnp.eye(k, dtype=q.dtype), 1.0, n)


def _norm(a):
    return jnp.max(jnp.abs(a), axis=(-2, -1), keepdims=True) * a.shape[-1]


def lu_outputs(a):
    lu, piv, perm = lax.linalg.lu(a)
    return lu, piv, perm


def qr_outputs(a):
    q, r = jnp.linalg.qr(a)
    qc, rc = jnp.linalg.qr(a, mode="complete")
    packed, taus = lax_linalg.geqrf(a)
    return q, r, qc, rc, packed, taus


def svd_outputs(a, full):
    u, s, vh = jnp.linalg.svd(a, full_matrices=full)
    k = min(a.shape[-2:])
    n = max(a.shape[-2:])
    recon = (u[..., :, :k] * s[..., None, :].astype(a.dtype)) @ vh[..., :k, :]
    return (s, jnp.linalg.svd(a, compute_uv=False), _close(recon, a, _norm(a), n),
            _orthonormal(u, n), _orthonormal(_adj(vh), n))


def eigh_outputs(a):
    h = (a + _adj(a)) / 2
    w, v = jnp.linalg.eigh(h)
    n = a.shape[-1]
    recon = (v * w[..., None, :].astype(a.dtype)) @ _adj(v)
    return w, jnp.linalg.eigvalsh(h), _close(recon, h, _norm(h), n), _orthonormal(v, n)


def eig_outputs(a):
    w, vl, vr = lax.linalg.eig(a, compute_left_eigenvectors=True)
    n = a.shape[-1]
    ac = a.astype(w.dtype)
    right = _close(ac @ vr, vr * w[..., None, :], _norm(a), n)
    left = _close(_adj(vl) @ ac, w[..., :, None] * _adj(vl), _norm(a), n)
    unit = _close(jnp.sum(jnp.abs(vr) ** 2, axis=-2), 1.0, 1.0, n)
    return jnp.sort(w.real, axis=-1), jnp.sort(w.imag, axis=-1), right, left, unit


def per_matrix(fn, *args):
    return lambda *xs: tuple(fn(x, *args) for x in xs)


def singular(dt):
    # Zero pivots in the first two columns: getrf's info > 0 (LU stays unscaled there).
    return arr([[0, 0, 1, 2], [0, 0, 2, 1], [1, 2, 3, 4], [2, 4, 6, 1]], dt)


@case("lu", "LAPACK getrf (lax.linalg.lu, jnp.linalg.solve/det/inv): f32/f64/c64/c128, batched, tall, wide, singular")
def _():
    ins = mats((2, 3, 3)) + [rnd((5, 3), F64), rnd((3, 5), C64), singular(F64), singular(C128),
                               arr([[1, 2], [1, 2]], F32)]
    b = rnd((2, 3, 1), F64)

    def f(*xs):
        outs = tuple(lu_outputs(x) for x in xs[:-1])
        return outs, jnp.linalg.solve(xs[1], xs[-1]), jnp.linalg.det(xs[1]), jnp.linalg.inv(xs[3])
    return f, ins + [b]


@case("lu_tpu", "TPU LuDecomposition (0-based pivots, permutation) against the CPU result",)
def _():
    ins = mats((2, 3, 3)) + [rnd((5, 3), F64), rnd((3, 5), C64), singular(F64)]
    return per_matrix(lu_outputs), ins, {"pre_platform": "tpu"}


@case("qr", "LAPACK geqrf + orgqr/ungqr (jnp.linalg.qr reduced/complete, geqrf): all types, batched, tall, wide, rank-deficient, zero column")
def _():
    zero_col = rnd((4, 3), F64)
    zero_col[:, 0] = 0.0
    # Rank deficient through a zero middle column: its reflector is tau = 0 exactly.
    # (A column that is only numerically dependent leaves rounding noise for the
    # later reflectors, which no two implementations share.)
    deficient = [rnd((4, 3), dt) for dt in (F32, C64)]
    for d in deficient:
        d[:, 1] = 0
    ins = mats((2, 3, 3)) + [rnd((5, 3), F32), rnd((3, 5), C128), zero_col] + deficient
    return per_matrix(qr_outputs), ins


@case("qr_tpu", "TPU Qr + ProductOfElementaryHouseholderReflectors against the CPU result")
def _():
    zero_col = rnd((4, 3), F64)
    zero_col[:, 0] = 0.0
    ins = mats((2, 3, 3)) + [rnd((5, 3), F32), rnd((3, 5), C128), zero_col]
    return per_matrix(qr_outputs), ins, {"pre_platform": "tpu"}


def svd_case(platform=None):
    ins = mats((2, 4, 3)) + [rnd((3, 5), F64), rnd((3, 5), C64)] + mats((4, 4), True)[1:3]
    if platform:  # each SVD is a whole QDWH program there: fewer matrices
        ins = [ins[0], ins[3], ins[4], ins[6]]

    def f(*xs):
        return tuple(svd_outputs(x, full) for x in xs for full in (True, False))
    return f, ins, ({"pre_platform": platform} if platform else {})


@case("svd", "LAPACK gesdd (jnp.linalg.svd full/thin, values only): all types, batched, tall, wide, rank-deficient")
def _():
    return svd_case()


@case("svd_tpu", "SVD lowered for TPU (QDWH over Qr, Householder products and Eigh) against the CPU result")
def _():
    return svd_case("tpu")


def eigh_case(platform=None):
    repeated = np.eye(4) + np.outer(np.ones(4), np.ones(4))  # eigenvalues 1, 1, 1, 5
    ins = mats((2, 4, 4)) + [repeated, rnd((3, 3), C128)]
    return per_matrix(eigh_outputs), ins, ({"pre_platform": platform} if platform else {})


@case("eigh", "LAPACK syevd/heevd (jnp.linalg.eigh, eigvalsh): all types, batched, repeated eigenvalues")
def _():
    return eigh_case()


@case("eigh_tpu", "TPU Eigh against the CPU result")
def _():
    return eigh_case("tpu")


@case("eig", "LAPACK geev (lax.linalg.eig with left and right vectors): all types, batched, complex pairs, rank one")
def _():
    rot = arr([[0, -2, 0], [2, 0, 0], [0, 0, 3]], F64)  # eigenvalues ±2i, 3
    r1 = np.outer(rnd((4,), F64), rnd((4,), F64))       # rank one: 0, 0, 0, v·u
    ins = mats((2, 3, 3)) + [rot, r1]
    return per_matrix(eig_outputs), ins


# ---------------------------------------------------------------- convolution

def conv(lhs, rhs, **kw):
    return lax.conv_general_dilated(lhs, rhs, **kw)


@case("conv1d", "1-D convolutions: stride, padding (negative too), rhs dilation, NWC/WIO")
def _():
    x = rnd((2, 11, 3))
    k = rnd((3, 3, 4), scale=0.5)
    dn = ("NWC", "WIO", "NWC")
    def f(x, k):
        return (conv(x, k, window_strides=(2,), padding=((1, 2),), dimension_numbers=dn),
                conv(x, k, window_strides=(1,), padding=((-1, 1),), rhs_dilation=(2,), dimension_numbers=dn),
                conv(x, k, window_strides=(3,), padding="SAME", dimension_numbers=dn))
    return f, [x, k]


@case("conv2d", "2-D convolutions: NCHW/OIHW and NHWC/HWIO, strides, padding, lhs and rhs dilation")
def _():
    x = rnd((2, 3, 9, 8))
    k = rnd((4, 3, 3, 2), scale=0.4)
    xh = rnd((1, 7, 6, 2))
    kh = rnd((2, 3, 2, 5), scale=0.4)
    def f(x, k, xh, kh):
        return (conv(x, k, window_strides=(2, 1), padding=((1, 1), (0, 2))),
                conv(x, k, window_strides=(1, 2), padding=((2, -1), (1, 1)), lhs_dilation=(2, 1), rhs_dilation=(1, 2)),
                conv(xh, kh, window_strides=(1, 1), padding="SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")),
                conv(xh, kh, window_strides=(2, 2), padding="VALID", dimension_numbers=("NHWC", "HWIO", "NCHW")))
    return f, [x, k, xh, kh]


@case("conv3d", "3-D convolution NDHWC/DHWIO with stride and padding")
def _():
    x = rnd((1, 5, 6, 4, 2))
    k = rnd((2, 3, 2, 2, 3), scale=0.4)
    return (lambda x, k: conv(x, k, window_strides=(1, 2, 1), padding=((1, 0), (1, 1), (0, 1)),
                              dimension_numbers=("NDHWC", "DHWIO", "NDHWC"))), [x, k]


@case("conv_groups", "feature groups (grouped and depthwise) and batch groups from the kernel gradient")
def _():
    x = rnd((2, 6, 7, 5))
    k = rnd((6, 3, 3, 2), scale=0.4)
    kd = rnd((6, 1, 3, 3), scale=0.4)
    def grouped(x, k):
        return conv(x, k, window_strides=(1, 1), padding=((1, 1), (0, 0)), feature_group_count=2)
    def f(x, k, kd):
        dk = jax.grad(lambda k: jnp.sum(grouped(x, k) ** 2))(k)
        dx = jax.grad(lambda x: jnp.sum(jnp.sin(grouped(x, k))))(x)
        return (grouped(x, k), conv(x, kd, window_strides=(2, 1), padding="SAME", feature_group_count=6), dk, dx)
    return f, [x, k, kd]


@case("conv_grad_strided", "gradients of a strided, dilated conv (lhs dilation, batch_group_count)")
def _():
    x = rnd((2, 3, 8, 7))
    k = rnd((4, 3, 3, 3), scale=0.4)
    def c(x, k):
        return conv(x, k, window_strides=(2, 2), padding=((1, 1), (1, 0)), rhs_dilation=(1, 2))
    def f(x, k):
        return jax.grad(lambda x, k: jnp.sum(c(x, k) ** 2), argnums=(0, 1))(x, k)
    return f, [x, k]


@case("conv_bf16", "bf16 convolution with f32 accumulation, and bf16 x bf16 -> f32 preferred")
def _():
    x = rnd((1, 6, 6, 4)).astype(BF16)
    k = rnd((3, 3, 4, 3), scale=0.4).astype(BF16)
    dn = ("NHWC", "HWIO", "NHWC")
    def f(x, k):
        return (conv(x, k, window_strides=(1, 1), padding="SAME", dimension_numbers=dn),
                conv(x, k, window_strides=(1, 1), padding="VALID", dimension_numbers=dn, preferred_element_type=jnp.float32))
    return f, [x, k]


@case("conv_int_complex", "int8 convolution accumulating in int32, and a complex convolution (JAX splits it into real convs)")
def _():
    x = rng.integers(-128, 128, (2, 7, 3)).astype(np.int8)
    k = rng.integers(-128, 128, (3, 3, 4)).astype(np.int8)
    xc = rnd((1, 6, 2), C64)
    kc = rnd((2, 2, 3), C64)
    dn = ("NWC", "WIO", "NWC")
    def f(x, k, xc, kc):
        return (conv(x, k, window_strides=(1,), padding=((1, 1),), dimension_numbers=dn, preferred_element_type=jnp.int32),
                conv(xc, kc, window_strides=(2,), padding=((0, 1),), dimension_numbers=dn))
    return f, [x, k, xc, kc]


# ---------------------------------------------------------------- dot

@case("dot_general", "dot_general: outer product (no contracting dims), several batch and contracting dims, vector dots")
def _():
    a = rnd((3, 4))
    b = rnd((5,))
    c = rnd((2, 3, 4, 5))
    d = rnd((2, 5, 4, 3))
    def f(a, b, c, d):
        return (lax.dot_general(a, b, (((), ()), ((), ()))),
                lax.dot_general(c, d, (((2, 3), (2, 1)), ((0,), (0,)))),
                lax.dot_general(c, d, (((1,), (3,)), ((0, 2), (0, 2)))),
                jnp.dot(b, b), jnp.einsum("ij,kj->ik", a, a))
    return f, [a, b, c, d]


@case("dot_mixed_types", "int8 x int8 -> int32, wrapping int32 dot, uint8 dot, bf16 -> f32 preferred, f16 dot, f8 dot")
def _():
    a8 = rng.integers(-128, 128, (4, 16)).astype(np.int8)
    b8 = rng.integers(-128, 128, (16, 3)).astype(np.int8)
    a32 = rng.integers(-2**31, 2**31, (3, 5)).astype(np.int32)
    b32 = rng.integers(-2**31, 2**31, (5, 2)).astype(np.int32)
    u8 = rng.integers(0, 256, (3, 6)).astype(np.uint8)
    bf = rnd((4, 8)).astype(BF16)
    hf = rnd((4, 8)).astype(np.float16)
    f8 = rnd((4, 8)).astype(F8E4)
    def f(a8, b8, a32, b32, u8, bf, hf, f8):
        return (lax.dot(a8, b8, preferred_element_type=jnp.int32), a32 @ b32, u8 @ u8.T,
                lax.dot(bf, bf.T, preferred_element_type=jnp.float32), bf @ bf.T, hf @ hf.T,
                lax.dot(f8, f8.T, preferred_element_type=jnp.float32))
    return f, [a8, b8, a32, b32, u8, bf, hf, f8]


@case("ragged_dot", "ragged-dot in its three modes (non-contracting, contracting, batch ragged dim)")
def _():
    from jax._src.lax.lax import RaggedDotDimensionNumbers as RD
    a = rnd((6, 4))
    b = rnd((3, 4, 5))
    g = arr([2, 1, 2], np.int32)
    c = rnd((3, 8))
    d = rnd((8, 2))
    h = arr([3, 0, 5], np.int32)
    e = rnd((4, 3, 2))
    w = rnd((4, 2, 5))
    k = arr([1, 2], np.int32)
    def f(a, b, g, c, d, h, e, w, k):
        contracting = RD((((1,), (0,)), ((), ())), lhs_ragged_dimensions=(1,), rhs_group_dimensions=())
        batch = RD((((2,), (1,)), ((0,), (0,))), lhs_ragged_dimensions=(0,), rhs_group_dimensions=())
        return (lax.ragged_dot(a, b, g), lax.ragged_dot_general(c, d, h, contracting),
                lax.ragged_dot_general(e, w, k, batch))
    # XLA:CPU cannot compile ragged-dot: pre.hlo is lowered for TPU (where JAX emits
    # the op); post.hlo and the outputs come from JAX's CPU decomposition.
    return f, [a, b, g, c, d, h, e, w, k], {"pre_platform": "tpu"}


@case("scaled_dot", "lax.scaled_dot: f8e4m3fn operands with f8e8m0fnu block scales (an xla.scaled_dot composite call)")
def _():
    E8M0 = ml_dtypes.float8_e8m0fnu
    a = rnd((4, 64)).astype(F8E4)
    b = rnd((64, 3)).astype(F8E4)
    sa = (2.0 ** rng.integers(-3, 4, (4, 2))).astype(E8M0)
    sb = (2.0 ** rng.integers(-3, 4, (2, 3))).astype(E8M0)
    def f(a, b, sa, sb):
        return lax.scaled_dot(a, b, lhs_scale=sa, rhs_scale=sb, preferred_element_type=jnp.float32)
    return f, [a, b, sa, sb]


# ---------------------------------------------------------------- shapes and control flow

@case("empty_shapes", "ops on zero-element arrays: reduce to init, concatenate, dot with k=0, pad")
def _():
    e = np.zeros((0, 3), F32)
    x = rnd((2, 3))
    def f(e, x):
        return (jnp.sum(e, axis=0), jnp.max(e, axis=0, initial=-jnp.inf), jnp.concatenate([e, x], axis=0), e.T @ e,
                jnp.exp(e), lax.pad(e, F32(1.0), ((1, 1, 0), (0, 0, 0))), x @ e.T)
    return f, [e, x]


@case("pad_negative_interior", "lax.pad with negative edges and interior padding")
def _():
    x = rnd((4, 5))
    def f(x):
        return (lax.pad(x, F32(-1.0), ((-1, 2, 1), (2, -3, 2))), lax.pad(x, F32(0.0), ((0, 0, 3), (-2, -2, 0))),
                lax.pad(x, F32(9.0), ((-3, -1, 0), (1, 1, 1))))
    return f, [x]


@case("control_flow", "zero-trip while and fori_loop, lax.scan, lax.cond, lax.switch")
def _():
    x = rnd((3,))
    n = np.int32(0)
    i = np.int32(5)
    def f(x, n, i):
        w = lax.while_loop(lambda c: c[0] < n, lambda c: (c[0] + 1, c[1] * 2.0), (jnp.int32(0), x))
        fl = lax.fori_loop(0, n, lambda k, v: v + 1.0, x)
        sc = lax.scan(lambda c, v: (c + v, c * v), jnp.float32(0), x)
        cd = lax.cond(i > 3, lambda v: v * 2.0, lambda v: v - 1.0, x)
        sw = lax.switch(i, [lambda v: v, lambda v: -v, lambda v: v + 10.0], x)
        return w, fl, sc, cd, sw
    return f, [x, n, i]


# ---------------------------------------------------------------- driver

def enc(a):
    a = np.asarray(a)
    name = a.dtype.name
    if name == "bfloat16" or name == "float16":
        return a.view(np.uint16), name
    if name.startswith("float8"):
        return a.view(np.uint8), name
    return a, name


def save(name, desc, lowered, ins, outs, pre_text=None):
    d = os.path.join(OUT, name)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "pre.hlo"), "w") as fh:
        fh.write(pre_text or lowered.as_text(dialect="hlo"))
    with open(os.path.join(d, "post.hlo"), "w") as fh:
        fh.write(lowered.compile().as_text())
    ins_e, outs_e = [enc(a) for a in ins], [enc(a) for a in outs]
    np.savez(os.path.join(d, "inputs.npz"), **{f"arg{i}": a for i, (a, _) in enumerate(ins_e)})
    np.savez(os.path.join(d, "outputs.npz"), **{f"out{i}": a for i, (a, _) in enumerate(outs_e)})
    meta = {"description": desc,
            "inputs": [{"shape": list(np.shape(a)), "dtype": t} for a, t in ins_e],
            "outputs": [{"shape": list(np.shape(a)), "dtype": t} for a, t in outs_e],
            "jax_version": jax.__version__,
            "generator": "tools/gen_cases/numeric_ops.py"}
    with open(os.path.join(d, "meta.json"), "w") as fh:
        json.dump(meta, fh, indent=1)


def main():
    only = set(os.environ.get("ONLY", "").split(",")) - {""}
    for name, desc, fn in CASES:
        if only and name not in only:
            continue
        try:
            f, ins, *opts = fn()
            opts = opts[0] if opts else {}
            cpu_rules = mlir._platform_specific_lowerings["cpu"]
            if opts.get("lapack"):
                cpu_rules.update(LAPACK_LOWERINGS)
            try:
                jf = jax.jit(f)
                lowered = jf.lower(*ins)
                outs = [np.asarray(l) for l in jax.tree_util.tree_leaves(jf(*ins))]
                pre_text = None
                if "pre_platform" in opts:
                    pre_text = jf.trace(*ins).lower(lowering_platforms=(opts["pre_platform"],)).as_text(dialect="hlo")
            finally:
                for prim in LAPACK_LOWERINGS:
                    cpu_rules.pop(prim, None)
        except Exception as e:  # report and go on: one broken case must not hide the rest
            print("FAILED", name, type(e).__name__, str(e).splitlines()[0])
            continue
        save(name, desc, lowered, ins, outs, pre_text)
        print("ok", name)


if __name__ == "__main__":
    main()
