"""c64 ops at infinite, NaN and zero components, produced with JAX on CPU.

XLA expands complex functions into real formulas (tanh, expm1, rsqrt, pow,
sign, abs, division, ...) whose results at inf/nan/zero components follow
those formulas, not C99 Annex G. Each case applies one op to every pair of a
grid of special and ordinary components (no subnormals: XLA:CPU flushes them).

Each case directory under OUTDIR (default testdata/interp_cases), named
`cplx_<op>`, holds pre.hlo, post.hlo, inputs.npz (arg0..), outputs.npz (out0)
and meta.json, like tools/gen_cases/numeric_ops.py.
Run: python tools/gen_cases/complex_specials.py [OUTDIR]   (needs jax, numpy)
"""
import itertools
import json
import os
import sys

os.environ.setdefault("JAX_PLATFORMS", "cpu")
import numpy as np
import jax
from jax import lax

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "testdata", "interp_cases")

PARTS = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.5, 0.5, 3.0, 1e20]
GRID = np.array([complex(r, i) for r, i in itertools.product(PARTS, PARTS)], np.complex64)
# Binary ops: first operands without 1e20 (there pow's result overflows to an
# infinity whose sign hangs on the last ulp of XLA's f32 atan2 approximation),
# second operands from a smaller grid to keep the cases small.
LHS = np.array([complex(r, i) for r, i in itertools.product(PARTS[:-1], PARTS[:-1])], np.complex64)
SMALL = np.array([complex(r, i) for r, i in itertools.product(PARTS[:6] + [2.0], PARTS[:6] + [2.0])],
                 np.complex64)

UNARY = {
    "tanh": lax.tanh, "expm1": lax.expm1, "rsqrt": lax.rsqrt, "sign": lax.sign, "abs": lax.abs,
    "exp": lax.exp, "log": lax.log, "log1p": lax.log1p, "sqrt": lax.sqrt, "sin": lax.sin,
    "cos": lax.cos, "tan": lax.tan,
}
BINARY = {"divide": lax.div, "pow": lax.pow, "multiply": lax.mul}


def save(name, desc, f, ins):
    jf = jax.jit(f)
    lowered = jf.lower(*ins)
    out = np.asarray(jf(*ins))
    d = os.path.join(OUT, name)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "pre.hlo"), "w") as fh:
        fh.write(lowered.as_text(dialect="hlo"))
    with open(os.path.join(d, "post.hlo"), "w") as fh:
        fh.write(lowered.compile().as_text())
    np.savez(os.path.join(d, "inputs.npz"), **{f"arg{i}": a for i, a in enumerate(ins)})
    np.savez(os.path.join(d, "outputs.npz"), out0=out)
    meta = {"description": desc,
            "inputs": [{"shape": list(a.shape), "dtype": a.dtype.name} for a in ins],
            "outputs": [{"shape": list(out.shape), "dtype": out.dtype.name}],
            "jax_version": jax.__version__,
            "generator": "tools/gen_cases/complex_specials.py"}
    with open(os.path.join(d, "meta.json"), "w") as fh:
        json.dump(meta, fh, indent=1)
    print("ok", name)


def main():
    for op, fn in UNARY.items():
        save(f"cplx_{op}", f"c64 {op} on a grid of inf/nan/zero/finite components", fn, [GRID])
    x, y = (np.array([a for a in LHS for _ in SMALL], np.complex64),
            np.array([b for _ in LHS for b in SMALL], np.complex64))
    for op, fn in BINARY.items():
        save(f"cplx_{op}", f"c64 {op} of every pair of special/finite operands", fn, [x, y])


if __name__ == "__main__":
    main()
