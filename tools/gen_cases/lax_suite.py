"""A generated differential suite over the jax.lax operator surface, with JAX
on CPU as the oracle: every elementwise op, reductions, cumulative ops, dots,
data movement, indexing, sort/top_k, conv, reduce_window, control flow,
crossed with each dtype the op accepts, special values (+-0, +-inf, NaN,
subnormals, the type's min/max, INT_MIN/-1, shifts >= the width) and shapes
(scalar, empty, odd sizes). One case is one jitted function; combinations JAX
rejects are skipped.

Output: one bundle per op family, OUTDIR/<family>.txt (default
testdata/lax_suite), read by crates/interp/tests/lax_suite.rs. Each case is

    case <name>
    in <type>[dims] <hex> <hex> ...      (one line per argument)
    out <type>[dims] <hex> <hex> ...     (one line per result leaf)
    HloModule ...                        (pre-optimization HLO, up to the
    ...                                   next `case` line)

Each element is its bit pattern in hex, as wide as the type (pred 1 digit,
s4/u4 1, 8-bit types 2, ..., c64 16 = real bits then imaginary bits, c128 32).
Deterministic: a fixed seed and no timestamps, so rerunning rewrites
byte-identical files.
Run: python tools/gen_cases/lax_suite.py [OUTDIR]   (needs jax, numpy, ml_dtypes)
     ONLY=unary,binary python tools/gen_cases/lax_suite.py   (some families)
"""
import collections
import functools
import os
import sys
import warnings

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("JAX_ENABLE_X64", "1")
import numpy as np
import ml_dtypes
import jax
import jax.numpy as jnp
from jax import lax

jax.config.update("jax_enable_x64", True)
warnings.filterwarnings("ignore")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "testdata", "lax_suite")

HLO_NAME = {
    "bool": "pred", "int8": "s8", "int16": "s16", "int32": "s32", "int64": "s64",
    "uint8": "u8", "uint16": "u16", "uint32": "u32", "uint64": "u64",
    "bfloat16": "bf16", "float16": "f16", "float32": "f32", "float64": "f64",
    "complex64": "c64", "complex128": "c128", "int4": "s4", "uint4": "u4",
    "float8_e4m3fn": "f8e4m3fn", "float8_e5m2": "f8e5m2", "float8_e4m3fnuz": "f8e4m3fnuz",
    "float8_e5m2fnuz": "f8e5m2fnuz", "float8_e4m3b11fnuz": "f8e4m3b11fnuz",
    "float8_e4m3": "f8e4m3", "float8_e3m4": "f8e3m4", "float8_e8m0fnu": "f8e8m0fnu",
    "float4_e2m1fn": "f4e2m1fn",
}
DT = {
    "pred": np.bool_, "s8": np.int8, "s16": np.int16, "s32": np.int32, "s64": np.int64,
    "u8": np.uint8, "u16": np.uint16, "u32": np.uint32, "u64": np.uint64,
    "bf16": ml_dtypes.bfloat16, "f16": np.float16, "f32": np.float32, "f64": np.float64,
    "c64": np.complex64, "c128": np.complex128, "s4": ml_dtypes.int4, "u4": ml_dtypes.uint4,
    "f8e4m3fn": ml_dtypes.float8_e4m3fn, "f8e5m2": ml_dtypes.float8_e5m2,
    "f8e4m3fnuz": ml_dtypes.float8_e4m3fnuz, "f8e5m2fnuz": ml_dtypes.float8_e5m2fnuz,
    "f8e4m3b11fnuz": ml_dtypes.float8_e4m3b11fnuz, "f8e4m3": ml_dtypes.float8_e4m3,
    "f8e3m4": ml_dtypes.float8_e3m4,
}
SINTS = ["s8", "s16", "s32", "s64"]
UINTS = ["u8", "u16", "u32", "u64"]
INTS = SINTS + UINTS
FLOATS = ["bf16", "f16", "f32", "f64"]
F8S = ["f8e4m3fn", "f8e5m2", "f8e4m3fnuz", "f8e5m2fnuz", "f8e4m3b11fnuz", "f8e4m3", "f8e3m4"]
COMPLEX = ["c64", "c128"]
NUMERIC = INTS + FLOATS + COMPLEX
ALL = ["pred"] + NUMERIC

rng = np.random.default_rng(20240514)
FAMILIES = collections.OrderedDict()


def add(family, name, fn, *args):
    FAMILIES.setdefault(family, []).append((name, fn, [np.asarray(a) for a in args]))


def is_float(t):
    return t in FLOATS or t in F8S


def finfo(t):
    return ml_dtypes.finfo(DT[t])


# ------------------------------------------------------------ value sets

def float_specials(t):
    fi = finfo(t)
    mx, tiny, sub = float(fi.max), float(fi.tiny), float(fi.smallest_subnormal)
    v = [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 0.5, -0.5, 1.5, 2.5, -2.5, 3.0, 0.1,
         -7.25, 10.0, 100.0, mx, -mx, tiny, -tiny, sub, -sub, tiny / 2 if tiny / 2 >= sub else sub * 2,
         0.75, -0.999, 1e-3, np.pi]
    return np.array(v, np.float64).astype(DT[t])


def float_pair_values(t):
    fi = finfo(t)
    return [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -2.5, float(fi.max), float(fi.smallest_subnormal), 0.5]


def int_specials(t):
    ii = np.iinfo(DT[t])
    v = [0, 1, 2, 3, 7, 100, ii.max, ii.max - 1, ii.min, ii.min + 1, 5, 64, 31, 127, 200, 255]
    if ii.min < 0:
        v += [-1, -2, -3, -7, -100, -128]
    return np.array([x for x in v if ii.min <= x <= ii.max], DT[t])


def int_pair_values(t):
    ii = np.iinfo(DT[t])
    v = [0, 1, 3, ii.max, ii.min, 7, ii.bits, ii.bits + 1]
    if ii.min < 0:
        v[2] = -1
        v[5] = -7
    return v


def complex_specials(t):
    parts = [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.5, 1e30 if t == "c64" else 1e300]
    return np.array([complex(r, i) for r in parts for i in parts], DT[t])


def specials(t):
    if t == "pred":
        return np.array([False, True, True, False, True], np.bool_)
    if t in INTS:
        return int_specials(t)
    if t in COMPLEX:
        return complex_specials(t)
    return float_specials(t)


def pairs(t):
    """Two arrays holding every pair of a small set of special values."""
    if t == "pred":
        v = [False, True]
    elif t in INTS:
        v = int_pair_values(t)
    elif t in COMPLEX:
        v = [0.0, complex(-0.0, 1), complex(np.inf, 0), complex(np.nan, 1), complex(1, -2.5),
             complex(0, -np.inf), 0.5]
    else:
        v = float_pair_values(t)
    x = [a for a in v for _ in v]
    y = [b for _ in v for b in v]
    if t in INTS:
        return np.array(x, DT[t]), np.array(y, DT[t])
    x, y = np.array(x), np.array(y)
    if t in COMPLEX or t == "pred":
        return x.astype(DT[t]), y.astype(DT[t])
    return x.astype(np.float64).astype(DT[t]), y.astype(np.float64).astype(DT[t])


def rand(t, shape, scale=None, positive=False):
    if t == "pred":
        return rng.random(shape) < 0.5
    if t in INTS:
        ii = np.iinfo(DT[t])
        lo, hi = (0 if positive or ii.min == 0 else -50), 50
        return rng.integers(lo, hi, shape).astype(DT[t])
    if t in COMPLEX:
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(DT[t])
    s = 2.0 if scale is None else scale
    v = rng.standard_normal(shape) * s
    if positive:
        v = np.abs(v) + 0.1
    return v.astype(DT[t])


# ------------------------------------------------------------ elementwise

def round_afz(x):
    return lax.round(x, lax.RoundingMethod.AWAY_FROM_ZERO)


def round_even(x):
    return lax.round(x, lax.RoundingMethod.TO_NEAREST_EVEN)


FLOAT_UNARY = {
    "abs": lax.abs, "neg": lax.neg, "sign": lax.sign, "floor": lax.floor, "ceil": lax.ceil,
    "round_afz": round_afz, "round_even": round_even, "is_finite": lax.is_finite, "exp": lax.exp,
    "exp2": lax.exp2, "expm1": lax.expm1, "log": lax.log, "log1p": lax.log1p, "logistic": lax.logistic,
    "tanh": lax.tanh, "sin": lax.sin, "cos": lax.cos, "tan": lax.tan, "asin": lax.asin, "acos": lax.acos,
    "atan": lax.atan, "sinh": lax.sinh, "cosh": lax.cosh, "asinh": lax.asinh, "acosh": lax.acosh,
    "atanh": lax.atanh, "sqrt": lax.sqrt, "rsqrt": lax.rsqrt, "cbrt": lax.cbrt, "square": lax.square,
    "erf": lax.erf, "erfc": lax.erfc, "erf_inv": lax.erf_inv, "lgamma": lax.lgamma,
    "digamma": lax.digamma, "bessel_i0e": lax.bessel_i0e, "bessel_i1e": lax.bessel_i1e,
    "ipow2": lambda x: lax.integer_pow(x, 2), "ipow3": lambda x: lax.integer_pow(x, 3),
    "ipow_m2": lambda x: lax.integer_pow(x, -2), "ipow7": lambda x: lax.integer_pow(x, 7),
    "reduce_precision_e5m2": lambda x: lax.reduce_precision(x, 5, 2),
    "reduce_precision_e8m7": lambda x: lax.reduce_precision(x, 8, 7),
    "reduce_precision_e4m3": lambda x: lax.reduce_precision(x, 4, 3),
    "reduce_precision_e5m10": lambda x: lax.reduce_precision(x, 5, 10),
}
F8_UNARY = ["abs", "neg", "sign", "floor", "ceil", "round_even", "is_finite", "exp", "log", "sqrt",
            "tanh", "sin", "logistic", "ipow2"]
INT_UNARY = {
    "abs": lax.abs, "neg": lax.neg, "sign": lax.sign, "not": lax.bitwise_not,
    "population_count": lax.population_count, "clz": lax.clz,
    "ipow2": lambda x: lax.integer_pow(x, 2), "ipow3": lambda x: lax.integer_pow(x, 3),
    "ipow5": lambda x: lax.integer_pow(x, 5),
}
COMPLEX_UNARY = {
    "abs": lax.abs, "neg": lax.neg, "sign": lax.sign, "exp": lax.exp, "expm1": lax.expm1, "log": lax.log,
    "log1p": lax.log1p, "tanh": lax.tanh, "sin": lax.sin, "cos": lax.cos, "tan": lax.tan,
    "sqrt": lax.sqrt, "rsqrt": lax.rsqrt, "real": lax.real, "imag": lax.imag, "conj": lax.conj,
    "asin": lax.asin, "acos": lax.acos, "atan": lax.atan, "sinh": lax.sinh, "cosh": lax.cosh,
    "asinh": lax.asinh, "acosh": lax.acosh, "atanh": lax.atanh, "square": lax.square,
    "ipow3": lambda x: lax.integer_pow(x, 3), "ipow_m2": lambda x: lax.integer_pow(x, -2),
}
POSITIVE_DOMAIN = {"log", "log1p", "sqrt", "rsqrt", "acosh", "lgamma", "digamma"}


def unary_inputs(t, op):
    yield "specials", specials(t)
    if t == "pred":
        return
    positive = op in POSITIVE_DOMAIN
    scale = 0.6 if op in ("asin", "acos", "atanh", "erf_inv") else None
    yield "rand3x5", rand(t, (3, 5), scale=scale, positive=positive)
    yield "scalar", rand(t, (), scale=scale, positive=positive)
    yield "empty", np.zeros((0, 3), DT[t])


def elementwise_unary():
    for t in FLOATS + F8S:
        ops = FLOAT_UNARY if t in FLOATS else {k: FLOAT_UNARY[k] for k in F8_UNARY}
        for op, fn in ops.items():
            for v, x in unary_inputs(t, op):
                if t in F8S and v != "specials":
                    continue
                add("unary", f"{op}.{t}.{v}", fn, x)
    for t in INTS:
        for op, fn in INT_UNARY.items():
            for v, x in unary_inputs(t, op):
                add("unary", f"{op}.{t}.{v}", fn, x)
    for t in COMPLEX:
        for op, fn in COMPLEX_UNARY.items():
            for v, x in unary_inputs(t, op):
                if v == "empty" and op not in ("abs", "exp"):
                    continue
                add("unary", f"{op}.{t}.{v}", fn, x)
    add("unary", "not.pred.specials", lax.bitwise_not, specials("pred"))
    add("unary", "population_count.pred.specials", lax.population_count, specials("pred"))


ARITH = {"add": lax.add, "sub": lax.sub, "mul": lax.mul, "div": lax.div, "rem": lax.rem,
         "max": lax.max, "min": lax.min}
COMPARE = {"eq": lax.eq, "ne": lax.ne, "lt": lax.lt, "le": lax.le, "gt": lax.gt, "ge": lax.ge}
FLOAT_BINARY = {"pow": lax.pow, "atan2": lax.atan2, "nextafter": lax.nextafter}
BITWISE = {"and": lax.bitwise_and, "or": lax.bitwise_or, "xor": lax.bitwise_xor}
SHIFTS = {"shift_left": lax.shift_left, "shift_right_arithmetic": lax.shift_right_arithmetic,
          "shift_right_logical": lax.shift_right_logical}


def binary_inputs(t):
    yield "pairs", pairs(t)
    if t != "pred":
        yield "rand3x5", (rand(t, (3, 5)), rand(t, (3, 5), positive=t in INTS))
    if t in ("f32", "s32", "pred"):
        yield "empty", (np.zeros((0,), DT[t]), np.zeros((0,), DT[t]))


def elementwise_binary():
    for t in ALL + F8S:
        ops = {}
        if t != "pred":
            ops.update(ARITH)
        elif True:
            ops.update({"max": lax.max, "min": lax.min})
        if t in FLOATS:
            ops.update(FLOAT_BINARY)
        if t in COMPLEX:
            ops["pow"] = lax.pow
        if t in INTS or t == "pred":
            ops.update(BITWISE)
        if t in INTS:
            ops.update(SHIFTS)
        fam = "binary"
        for op, fn in ops.items():
            for v, (x, y) in binary_inputs(t):
                if t in F8S and v not in ("pairs",):
                    continue
                add(fam, f"{op}.{t}.{v}", fn, x, y)
        cmp = COMPARE if t not in COMPLEX else {"eq": lax.eq, "ne": lax.ne}
        for op, fn in cmp.items():
            for v, (x, y) in binary_inputs(t):
                if t in F8S and v != "pairs":
                    continue
                add("compare", f"{op}.{t}.{v}", fn, x, y)
    for t in ["f32", "f64"]:
        x, y = pairs(t)
        add("binary", f"complex.{t}.pairs", lax.complex, x, y)
    # pow with an integer exponent, integer_pow with large exponents
    for t in ["f32", "f64", "c64"]:
        x = specials(t)
        add("binary", f"pow_int_exponent.{t}.specials", lax.pow, x,
            np.resize(np.array([0, 1, -1, 2, 3, -3, 31, -31], np.int32), x.shape))


def ternary():
    for t in ALL + F8S:
        x, y = pairs(t)
        p = rng.random(x.shape) < 0.5
        add("ternary", f"select.{t}.pairs", lax.select, p, x, y)
        add("ternary", f"select_scalar_pred.{t}.pairs", lambda x, y: lax.select(x == x, x, y), x, y)
        add("ternary", f"select_n3.{t}.rand", lambda i, x, y: lax.select_n(i, x, y, x),
            rng.integers(0, 3, x.shape).astype(np.int32), x, y)
        if t == "pred" or t in COMPLEX:
            continue
        s = specials(t)
        lo, hi = np.sort(rand(t, (2,)))
        add("ternary", f"clamp_scalar.{t}.specials", lax.clamp, lo, s, hi)
        add("ternary", f"clamp_array.{t}.pairs", lambda x, y: lax.clamp(lax.min(x, y), x, y), x, y)


# ------------------------------------------------------------ conversions

CONVERT_TYPES = ALL + F8S + ["s4", "u4"]


def convert_inputs(t):
    if t in ("s4", "u4"):
        return np.arange(-8, 8).astype(DT[t]) if t == "s4" else np.arange(16).astype(DT[t])
    s = specials(t)
    if t in FLOATS:
        # rounding points: halves, the integer range boundaries, large values
        extra = np.array([0.5, 1.5, 2.5, -0.5, -1.5, 127.5, 128.0, 255.5, 256.0, -128.5, -129.0,
                          32767.5, 65535.0, 65536.0, 2.0 ** 31, -2.0 ** 31, 2.0 ** 32, 2.0 ** 63,
                          -2.0 ** 63, 2.0 ** 64, 1e20, -1e20, 3.0e38, 65504.0, 65520.0, 3.39e38],
                         np.float64).astype(DT[t])
        s = np.concatenate([s, extra])
    return s


def conversions():
    for a in CONVERT_TYPES:
        x = convert_inputs(a)
        for b in CONVERT_TYPES:
            if a == b:
                continue
            if a in F8S and b in F8S and (a, b) not in (("f8e4m3fn", "f8e5m2"), ("f8e5m2", "f8e4m3fn")):
                continue
            add("convert", f"convert.{a}.to.{b}", functools.partial(lax.convert_element_type, new_dtype=DT[b]), x)
    # bitcasts between types of equal width, and width-changing bitcasts
    groups = [["s8", "u8", "f8e4m3fn", "f8e5m2"], ["s16", "u16", "f16", "bf16"], ["s32", "u32", "f32"],
              ["s64", "u64", "f64", "c64"]]
    for g in groups:
        for a in g:
            x = specials(a) if a not in COMPLEX else complex_specials(a)
            for b in g:
                if a != b:
                    add("convert", f"bitcast.{a}.to.{b}",
                        functools.partial(lax.bitcast_convert_type, new_dtype=DT[b]), x)
    for a, b, shape in [("f32", "u8", (5,)), ("u8", "f32", (3, 4)), ("s64", "s16", (2,)), ("s16", "f64", (3, 4)),
                        ("f64", "u32", (3,)), ("u32", "f16", (4,)), ("c128", "f64", (3,)), ("bf16", "s8", (4,))]:
        x = rand(a, shape)
        add("convert", f"bitcast.{a}.to.{b}.width",
            functools.partial(lax.bitcast_convert_type, new_dtype=DT[b]), x)


# ------------------------------------------------------------ reductions

def identity(t, kind):
    if kind == "sum":
        return np.array(0, DT[t])
    if kind == "prod":
        return np.array(1, DT[t])
    if kind in ("and", "or"):
        return np.array(kind == "and", DT[t]) if t == "pred" else np.array(-1 if kind == "and" else 0).astype(DT[t])
    if t in INTS:
        ii = np.iinfo(DT[t])
        return np.array(ii.min if kind == "max" else ii.max, DT[t])
    return np.array(-np.inf if kind == "max" else np.inf, DT[t])


REDUCERS = {"sum": lax.add, "prod": lax.mul, "max": lax.max, "min": lax.min, "and": lax.bitwise_and,
            "or": lax.bitwise_or}


def reductions():
    for t in ALL:
        kinds = ["sum", "prod", "max", "min"]
        if t in COMPLEX:
            kinds = ["sum", "prod"]
        if t == "pred":
            kinds = ["and", "or", "max", "min"]
        if t in INTS:
            kinds += ["and", "or"]
        x = rand(t, (3, 5), scale=1.0)
        if t in FLOATS:
            x = x.copy()
            x[1, 2] = np.nan
            x[2, 4] = -np.inf if t != "pred" else x[2, 4]
        if t in COMPLEX:
            x = x.copy()
            x[2, 1] = complex(np.nan, 1)
        z = np.zeros((0, 4), DT[t])
        for k in kinds:
            init = identity(t, k)
            op = REDUCERS[k]
            for axes in [(0,), (1,), (0, 1)]:
                add("reduce", f"reduce_{k}.{t}.axes{''.join(map(str, axes))}",
                    lambda x, i, op=op, axes=axes: lax.reduce(x, i, op, axes), x, init)
            add("reduce", f"reduce_{k}.{t}.empty", lambda x, i, op=op: lax.reduce(x, i, op, (0,)), z, init)
        y = rand(t, (17,), scale=1.0)
        if t in FLOATS:
            y = y.copy()
            y[3] = np.nan
        add("reduce", f"reduce_sum.{t}.odd17", lambda x: lax.reduce(x, np.array(0, x.dtype), lax.add, (0,)), y)
        if t not in COMPLEX:
            for axis in (0, 1):
                for fn, nm in ((lax.argmax, "argmax"), (lax.argmin, "argmin")):
                    add("reduce", f"{nm}.{t}.axis{axis}",
                        lambda x, fn=fn, axis=axis: fn(x, axis, np.int32), x)
            add("reduce", f"argmax.{t}.specials", lambda x: lax.argmax(x, 0, np.int32), specials(t))
            add("reduce", f"argmin.{t}.specials", lambda x: lax.argmin(x, 0, np.int32), specials(t))
    # variadic reduce: (max, argmax) pair by hand, f32 and s32
    for t in ("f32", "s32", "bf16"):
        x = rand(t, (4, 6))

        def maxarg(x, t=t):
            idx = lax.broadcasted_iota(np.int32, x.shape, 1)

            def body(a, b):
                (av, ai), (bv, bi) = a, b
                pick = (av > bv) | ((av == bv) & (ai < bi))
                return lax.select(pick, av, bv), lax.select(pick, ai, bi)
            return lax.reduce((x, idx), (identity(t, "max"), np.int32(0)), body, (1,))
        add("reduce", f"variadic_maxarg.{t}.rand", maxarg, x)


def cumulative():
    for t in NUMERIC + ["pred"]:
        x = rand(t, (4, 5), scale=1.0)
        ops = {"cumsum": lax.cumsum, "cumprod": lax.cumprod, "cummax": lax.cummax, "cummin": lax.cummin}
        if t in COMPLEX:
            ops = {"cumsum": lax.cumsum, "cumprod": lax.cumprod}
        if t in FLOATS:
            ops["cumlogsumexp"] = lax.cumlogsumexp
        if t == "pred":
            ops = {"cummax": lax.cummax, "cummin": lax.cummin}
        for nm, fn in ops.items():
            for axis in (0, 1):
                for rev in (False, True):
                    add("cumulative", f"{nm}.{t}.axis{axis}{'_rev' if rev else ''}",
                        lambda x, fn=fn, axis=axis, rev=rev: fn(x, axis=axis, reverse=rev), x)


# ------------------------------------------------------------ dots and convs

def dots():
    for t in NUMERIC + ["pred"]:
        a, b = rand(t, (3, 4), scale=1.0), rand(t, (4, 5), scale=1.0)
        add("dot", f"matmul.{t}.3x4x5", lambda a, b: lax.dot(a, b), a, b)
        add("dot", f"vecdot.{t}.7", lambda a, b: lax.dot(a, b), rand(t, (7,)), rand(t, (7,)))
        add("dot", f"matvec.{t}.3x4", lambda a, b: lax.dot(a, b), a, rand(t, (4,)))
        ba, bb = rand(t, (2, 3, 4), scale=1.0), rand(t, (2, 5, 4), scale=1.0)
        add("dot", f"batch_contract_last.{t}", lambda a, b: lax.dot_general(a, b, (((2,), (2,)), ((0,), (0,)))),
            ba, bb)
        add("dot", f"contract_dim0.{t}", lambda a, b: lax.dot_general(a, b, (((0,), (0,)), ((), ()))),
            rand(t, (4, 3)), rand(t, (4, 2)))
        add("dot", f"two_contract_dims.{t}",
            lambda a, b: lax.dot_general(a, b, (((1, 2), (0, 1)), ((), ()))), rand(t, (2, 3, 4)), rand(t, (3, 4, 2)))
        add("dot", f"outer.{t}", lambda a, b: lax.dot_general(a, b, (((), ()), ((), ()))), rand(t, (3,)), rand(t, (4,)))
        add("dot", f"empty_contract.{t}", lambda a, b: lax.dot(a, b), np.zeros((3, 0), DT[t]), np.zeros((0, 2), DT[t]))
    widen = [("bf16", "f32"), ("f16", "f32"), ("s8", "s32"), ("u8", "u32"), ("f32", "f64"), ("s16", "s64"),
             ("f8e4m3fn", "f32"), ("f8e5m2", "f32"), ("f8e4m3fn", "bf16")]
    for a, r in widen:
        x, y = rand(a, (3, 4), scale=1.0), rand(a, (4, 2), scale=1.0)
        add("dot", f"matmul_preferred.{a}.to.{r}",
            lambda x, y, r=r: lax.dot(x, y, preferred_element_type=DT[r]), x, y)
    for t in ["f32", "f64", "bf16"]:
        x = np.array([[np.inf, 1, 0], [np.nan, 0, 1], [1e30, 1e30, -1e30]], np.float64).astype(DT[t])
        y = np.array([[0, 1], [1, np.inf], [2, -1]], np.float64).astype(DT[t])
        add("dot", f"matmul_specials.{t}", lambda a, b: lax.dot(a, b), x, y)
    for t in ["s32", "s8", "u8", "s64"]:
        ii = np.iinfo(DT[t])
        x = np.array([[ii.max, ii.max, 1], [ii.min, -1 if ii.min else 1, 3]], DT[t])
        y = np.array([[2], [1], [ii.max]], DT[t])
        add("dot", f"matmul_wrap.{t}", lambda a, b: lax.dot(a, b), x, y)


def convs():
    cases = [
        ("1d_same", (2, 3, 9), (4, 3, 3), dict(window_strides=(1,), padding="SAME")),
        ("1d_stride2_valid", (1, 2, 10), (3, 2, 4), dict(window_strides=(2,), padding="VALID")),
        ("2d_pad_dilate", (1, 2, 6, 5), (3, 2, 3, 2),
         dict(window_strides=(1, 2), padding=((1, 2), (0, 1)), lhs_dilation=(2, 1), rhs_dilation=(1, 2))),
        ("2d_groups", (2, 4, 5, 5), (6, 2, 3, 3), dict(window_strides=(1, 1), padding="SAME", feature_group_count=2)),
        ("1d_batch_groups", (4, 2, 7), (4, 2, 3), dict(window_strides=(1,), padding="VALID", batch_group_count=2)),
        ("2d_negative_pad", (1, 1, 6, 6), (2, 1, 2, 2), dict(window_strides=(1, 1), padding=((-1, 0), (0, -2)))),
    ]
    for t in ["f32", "f64", "bf16", "f16", "c64", "s32"]:
        for nm, ls, rs, kw in cases:
            add("conv", f"conv_{nm}.{t}", lambda x, w, kw=kw: lax.conv_general_dilated(x, w, **kw),
                rand(t, ls, scale=1.0), rand(t, rs, scale=1.0))
    x, w = rand("f32", (1, 5, 5, 2), scale=1.0), rand("f32", (3, 3, 2, 4), scale=1.0)
    add("conv", "conv_nhwc_hwio.f32", lambda x, w: lax.conv_general_dilated(
        x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")), x, w)
    add("conv", "conv_transpose.f32", lambda x, w: lax.conv_transpose(
        x, w, (2, 2), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")), x, w)
    add("conv", "conv_preferred.bf16.to.f32", lambda x, w: lax.conv_general_dilated(
        x, w, (1,), "SAME", preferred_element_type=np.float32), rand("bf16", (2, 3, 8)), rand("bf16", (2, 3, 3)))


def windows():
    for t in ["f32", "f64", "bf16", "f16", "s32", "u8", "s8", "pred"]:
        x = rand(t, (2, 5, 6), scale=1.0)
        if t in FLOATS:
            x = x.copy()
            x[0, 1, 1] = np.nan
        ops = {"max": lax.max, "min": lax.min}
        if t != "pred":
            ops["sum"] = lax.add
        for k, op in ops.items():
            init = identity(t, k)
            for nm, kw in [("2x2_s1_valid", dict(window_dimensions=(1, 2, 2), window_strides=(1, 1, 1), padding="VALID")),
                           ("3x3_s2_same", dict(window_dimensions=(1, 3, 3), window_strides=(1, 2, 2), padding="SAME")),
                           ("pad_dilate", dict(window_dimensions=(1, 2, 3), window_strides=(1, 1, 2),
                                               padding=((0, 0), (1, 2), (2, 0)), base_dilation=(1, 2, 1),
                                               window_dilation=(1, 1, 2)))]:
                add("window", f"reduce_window_{k}_{nm}.{t}",
                    lambda x, i, op=op, kw=kw: lax.reduce_window(x, i, op, **kw), x, init)
    for t in ["f32", "f64", "bf16", "f16"]:
        x = rand(t, (2, 6, 5), scale=1.0)
        x = x.copy()
        x[0, 0, 0] = x[0, 0, 1]  # a tie inside a window

        def pool_grad(x, t=t):
            def pool(x):
                return jnp.sum(lax.reduce_window(x, identity(t, "max"), lax.max, (1, 3, 2), (1, 2, 2), "SAME")
                               .astype(np.float32) ** 2)
            return jax.grad(pool)(x)
        add("window", f"select_and_scatter_add_maxpool_grad.{t}", pool_grad, x)

        def pool_grad_valid(x, t=t):
            def pool(x):
                return jnp.sum(lax.reduce_window(x, identity(t, "max"), lax.max, (1, 2, 2), (1, 1, 1), "VALID")
                               .astype(np.float32) * 1.5)
            return jax.grad(pool)(x)
        add("window", f"select_and_scatter_add_overlap.{t}", pool_grad_valid, x)


# ------------------------------------------------------------ data movement

def movement():
    for t in ALL + ["f8e4m3fn", "f8e5m2", "s4", "u4"]:
        x = rand(t, (3, 4)) if t not in ("s4", "u4", "f8e4m3fn", "f8e5m2") else \
            rand("f32" if t.startswith("f8") else "s8", (3, 4), scale=1.0).astype(np.float32 if t.startswith("f8") else np.int8)
        if t in ("s4", "u4"):
            x = (np.abs(x) % 8).astype(DT[t])
        elif t.startswith("f8"):
            x = x.astype(DT[t])
        v = rand("s32", (1,)).astype(x.dtype) if False else x.reshape(-1)[:1].reshape(())
        M = "movement"
        add(M, f"broadcast_in_dim.{t}", lambda x: lax.broadcast_in_dim(x, (2, 3, 5, 4), (1, 3)), x)
        add(M, f"broadcast_scalar.{t}", lambda v: lax.broadcast(v, (2, 3)), v)
        add(M, f"reshape.{t}", lambda x: lax.reshape(x, (2, 6)), x)
        add(M, f"reshape_dims.{t}", lambda x: lax.reshape(x, (4, 3), dimensions=(1, 0)), x)
        add(M, f"transpose.{t}", lambda x: lax.transpose(x, (1, 0)), x)
        add(M, f"transpose3.{t}", lambda x: lax.transpose(x.reshape(2, 3, 2), (2, 0, 1)), x)
        add(M, f"rev.{t}", lambda x: lax.rev(x, (0, 1)), x)
        add(M, f"pad_interior.{t}", lambda x, v: lax.pad(x, v, ((1, 2, 1), (0, 1, 2))), x, v)
        add(M, f"pad_negative.{t}", lambda x, v: lax.pad(x, v, ((-1, 1, 0), (2, -2, 1))), x, v)
        add(M, f"concatenate.{t}", lambda x: lax.concatenate([x, x[:1], x[:0]], 0), x)
        add(M, f"concatenate_dim1.{t}", lambda x: lax.concatenate([x, x[:, 1:3]], 1), x)
        add(M, f"slice_strided.{t}", lambda x: lax.slice(x, (0, 1), (3, 4), (2, 2)), x)
        add(M, f"slice_empty.{t}", lambda x: lax.slice(x, (1, 1), (1, 4)), x)
        for i, j in [(1, 1), (-1, 2), (5, 100), (2, -7)]:
            add(M, f"dynamic_slice_{i}_{j}.{t}".replace("-", "m"),
                lambda x, i, j: lax.dynamic_slice(x, (i, j), (2, 2)), x, np.int32(i), np.int32(j))
            add(M, f"dynamic_update_slice_{i}_{j}.{t}".replace("-", "m"),
                lambda x, i, j: lax.dynamic_update_slice(x, x[:2, :3], (i, j)), x, np.int32(i), np.int32(j))
        add(M, f"dynamic_slice_s64_index.{t}", lambda x, i: lax.dynamic_slice(x, (i, i), (1, 3)), x, np.int64(2))
        add(M, f"dynamic_slice_u8_index.{t}", lambda x, i: lax.dynamic_slice(x, (i, i), (1, 3)), x, np.uint8(200))
        idx = np.array([0, 2, -1, 5, 1], np.int32)
        add(M, f"gather_clip.{t}", lambda x, i: jnp.take(x, i, axis=1, mode="clip"), x, idx)
        if t in ALL and t != "pred":
            add(M, f"gather_fill.{t}", lambda x, i: jnp.take(x, i, axis=0, mode="fill", fill_value=7), x, idx)
        add(M, f"gather_2d_points.{t}", lambda x, i, j: x[i, j], x, np.array([0, 2, 1, 2], np.int32),
            np.array([3, 0, 1, 3], np.int32))
        sidx = np.array([1, 3, 1, 7, -1], np.int32)
        upd = x[:, :1].reshape(-1)
        upd = np.resize(x.reshape(-1), (5,))
        scatters = {"set": lambda x, i, u: x[0].at[i].set(u, mode="drop")}
        if t != "pred" and t not in ("s4", "u4", "f8e4m3fn", "f8e5m2"):
            scatters.update({"add": lambda x, i, u: x[0].at[i].add(u, mode="drop"),
                             "mul": lambda x, i, u: x[0].at[i].multiply(u, mode="drop")})
            if t not in COMPLEX:
                scatters.update({"min": lambda x, i, u: x[0].at[i].min(u, mode="drop"),
                                 "max": lambda x, i, u: x[0].at[i].max(u, mode="drop")})
        for k, fn in scatters.items():
            add(M, f"scatter_{k}.{t}", fn, x, sidx, upd)
        add(M, f"scatter_add_2d_window.{t}", lambda x, i, t=t: x.at[i].add(x[:2], mode="drop") if t != "pred"
            else x.at[i].set(x[:2], mode="drop"), x, np.array([2, 0], np.int32))
        if t in ALL:
            add(M, f"iota.{t}", lambda t=t: lax.iota(DT[t], 7) if t != "pred" else lax.iota(np.int32, 7) > 3)
            add(M, f"broadcasted_iota.{t}", lambda t=t: lax.broadcasted_iota(DT[t], (3, 4), 1)
                if t != "pred" else lax.broadcasted_iota(np.int32, (3, 4), 1) > 1)


def sorting():
    for t in ALL + ["f8e4m3fn", "f8e5m2"]:
        s = specials(t)
        if t in COMPLEX:
            s = rand(t, (11,))
        add("sort", f"sort.{t}.specials", lambda x: lax.sort(x), s)
        x = rand(t, (3, 7), scale=1.0) if not t.startswith("f8") else rand("f32", (3, 7)).astype(DT[t])
        add("sort", f"sort_dim0.{t}", lambda x: lax.sort(x, dimension=0), x)
        add("sort", f"sort_dim1.{t}", lambda x: lax.sort(x, dimension=1), x)
        add("sort", f"sort_keyval.{t}", lambda k, v: lax.sort((k, v), num_keys=1),
            x, np.arange(21, dtype=np.int32).reshape(3, 7))
        add("sort", f"sort_stable_ties.{t}", lambda k, v: lax.sort((k, v), num_keys=1, is_stable=True),
            np.resize(s[:4], (12,)), np.arange(12, dtype=np.int32))
        if t != "pred" and t not in COMPLEX:
            add("sort", f"top_k3.{t}", lambda x: lax.top_k(x, 3), x)
            add("sort", f"top_k.{t}.specials", lambda x: lax.top_k(x, 4), s)
            add("sort", f"argsort.{t}", lambda x: jnp.argsort(x, axis=1, stable=True), x)
    add("sort", "sort_two_keys.s32_f32", lambda a, b: lax.sort((a, b), num_keys=2),
        rng.integers(0, 3, (10,)).astype(np.int32), rand("f32", (10,)))
    add("sort", "sort_empty.f32", lambda x: lax.sort(x), np.zeros((0,), np.float32))


def control():
    for t in ["f32", "f64", "s32", "u8", "bf16", "c64", "pred", "s64"]:
        x = rand(t, (5,))
        if t == "pred":
            add("control", f"while_fori.{t}", lambda x: lax.fori_loop(0, 3, lambda i, c: ~c, x), x)
            add("control", f"cond.{t}", lambda p, x: lax.cond(p, lambda: x, lambda: ~x), np.bool_(True), x)
            continue
        add("control", f"while_fori.{t}",
            lambda x: lax.fori_loop(0, 4, lambda i, c: c * c.dtype.type(2) + c, x), x)
        add("control", f"while_dynamic.{t}",
            lambda x, n: lax.fori_loop(0, n, lambda i, c: c + lax.convert_element_type(i, c.dtype), x), x, np.int32(5))
        add("control", f"while_until.{t}",
            lambda x: lax.while_loop(lambda c: c[0] < 6, lambda c: (c[0] + 1, c[1] + c[1]), (np.int32(0), x))[1], x)
        for p in (True, False):
            add("control", f"cond_{str(p).lower()}.{t}",
                lambda p, x: lax.cond(p, lambda v: v + v, lambda v: v * v, x), np.bool_(p), x)
        for i in (-1, 1, 7):
            add("control", f"switch_{i}.{t}".replace("-", "m"),
                lambda i, x, t=t: lax.switch(i, [lambda v: v, lambda v: v + v, lambda v: -v if t[0] != "u" else v * v], x),
                np.int32(i), x)
        add("control", f"scan_cumsum.{t}",
            lambda x: lax.scan(lambda c, v: (c + v, c * v), x[0] * 0, x), x)
        add("control", f"scan_reverse.{t}",
            lambda x: lax.scan(lambda c, v: (c + v, c), x[0] * 0, x, reverse=True), x)
        add("control", f"map.{t}", lambda x: lax.map(lambda v: v * v + v, x), x)


GENERATORS = [elementwise_unary, elementwise_binary, ternary, conversions, reductions, cumulative, dots,
              convs, windows, movement, sorting, control]


# ------------------------------------------------------------ driver

def hex_elems(a):
    a = np.asarray(a)
    name = a.dtype.name
    flat = a.reshape(-1)
    if name == "bool":
        return ["1" if b else "0" for b in flat]
    if name in ("int4", "uint4"):
        return ["%x" % (int(b) & 0xF) for b in flat.astype(np.int8)]
    if name == "complex64":
        bits = flat.view(np.uint32).reshape(-1, 2)
        return ["%08x%08x" % (int(r), int(i)) for r, i in bits]
    if name == "complex128":
        bits = flat.view(np.uint64).reshape(-1, 2)
        return ["%016x%016x" % (int(r), int(i)) for r, i in bits]
    width = a.dtype.itemsize
    bits = flat.view({1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[width])
    fmt = "%0" + str(2 * width) + "x"
    return [fmt % int(b) for b in bits]


def array_line(kind, a):
    a = np.asarray(a)
    shape = ",".join(str(d) for d in a.shape)
    return " ".join([kind, f"{HLO_NAME[a.dtype.name]}[{shape}]"] + hex_elems(a))


def main():
    only = set(os.environ.get("ONLY", "").split(",")) - {""}
    for g in GENERATORS:
        g()
    os.makedirs(OUT, exist_ok=True)
    total, skipped = 0, collections.Counter()
    for family, cases in FAMILIES.items():
        if only and family not in only:
            continue
        seen, chunks = set(), []
        for name, fn, args in cases:
            assert name not in seen, name
            seen.add(name)
            try:
                jf = jax.jit(fn)
                text = jf.lower(*args).as_text(dialect="hlo")
                outs = [np.asarray(o) for o in jax.tree_util.tree_leaves(jf(*args))]
            except Exception as e:  # JAX rejects this op/dtype combination: skip it
                skipped[family] += 1
                if os.environ.get("VERBOSE"):
                    print("skip", name, type(e).__name__, str(e).splitlines()[0] if str(e) else "")
                continue
            lines = [f"case {name}"] + [array_line("in", a) for a in args] + [array_line("out", o) for o in outs]
            chunks.append("\n".join(lines) + "\n" + text.strip() + "\n")
        with open(os.path.join(OUT, f"{family}.txt"), "w") as fh:
            fh.write(f"# generated by tools/gen_cases/lax_suite.py (jax {jax.__version__}); do not edit\n")
            fh.write("\n".join(chunks))
        total += len(chunks)
        print(f"{family}: {len(chunks)} cases, {skipped[family]} skipped")
    print(f"total: {total} cases")


if __name__ == "__main__":
    main()
