"""Large f32 sums for the functional interpreter, produced with JAX on CPU.

XLA:CPU folds a reduction with partial accumulators combined as a tree, so a
sum of millions of f32 values is accurate to a few ulp where a left-to-right
fold drifts by 1e-4 or more. Each case builds its data inside the program from
a scalar seed (an integer hash of iota, converted exactly to f32), so only the
seed and the few reduced values are committed.

Each case directory under OUTDIR (default testdata/reductions) holds:
  pre.hlo      HLO before XLA optimisation   (lower().as_text(dialect="hlo"))
  inputs.npz   arg0 (the u32 seed)    outputs.npz  out0..outM (flattened results)
  meta.json    description, shapes, dtypes and each output's relative error
               against a float64 sum of the same data (XLA's own accuracy)
Run: python tools/gen_cases/reductions.py [OUTDIR]   (needs jax, numpy)
"""
import json
import os
import sys

os.environ.setdefault("JAX_PLATFORMS", "cpu")
import numpy as np
import jax
import jax.numpy as jnp
from jax import lax

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "testdata", "reductions")


def data(seed, shape, offset):
    """Uniform values k * 2^-24 - offset (k < 2^24): every step is exact in f32."""
    n = int(np.prod(shape))
    h = lax.iota(jnp.uint32, n) + seed
    h = h * jnp.uint32(0x9E3779B1)
    h = h ^ (h >> 15)
    h = h * jnp.uint32(0x85EBCA77)
    h = h ^ (h >> 13)
    x = (h >> 8).astype(jnp.float32) * jnp.float32(2.0**-24) - jnp.float32(offset)
    return x.reshape(shape)


# name -> (description, shape, offset, reduced axes per output)
CASES = {
    "sum_all_4m": ("sum of 4M values over all dims (rank 1 and rank 2)", (2048, 2048), 0.0,
                   [None, (1,), (0,)]),
    "sum_trailing_1m": ("row sums of f32[16,65536]", (16, 65536), 0.0, [(1,)]),
    "sum_signed_4m": ("signed values (mean 0.25) of f32[8,131072,4] over all, trailing (1,2), leading (0,1) and middle (1) dims",
                      (8, 131072, 4), 0.25, [None, (1, 2), (0, 1), (1,)]),
    "sum_leading_1m": ("column sums of f32[262144,4] (a non-trailing dim)", (262144, 4), 0.0,
                       [(0,)]),
}


def f64_reference(seed, shape, offset, axes):
    n = int(np.prod(shape))
    h = (np.arange(n, dtype=np.uint32) + np.uint32(seed)).astype(np.uint32)
    h = (h * np.uint32(0x9E3779B1)).astype(np.uint32)
    h ^= h >> 15
    h = (h * np.uint32(0x85EBCA77)).astype(np.uint32)
    h ^= h >> 13
    x = (h >> 8).astype(np.float64) * 2.0**-24 - offset
    return np.sum(x.reshape(shape), axis=axes)


def main():
    seed = np.uint32(12345)
    for name, (desc, shape, offset, axess) in CASES.items():
        def f(s, shape=shape, offset=offset, axess=axess):
            x = data(s, shape, offset)
            return tuple(jnp.sum(x, axis=a) for a in axess)
        lowered = jax.jit(f).lower(seed)
        outs = [np.asarray(o) for o in jax.jit(f)(seed)]
        errs = []
        for o, a in zip(outs, axess):
            ref = f64_reference(seed, shape, offset, a)
            errs.append(float(np.max(np.abs(o - ref) / np.abs(ref))))
        d = os.path.join(OUT, name)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "pre.hlo"), "w") as fh:
            fh.write(lowered.as_text(dialect="hlo"))
        np.savez(os.path.join(d, "inputs.npz"), arg0=seed)
        np.savez(os.path.join(d, "outputs.npz"), **{f"out{k}": o.reshape(-1) for k, o in enumerate(outs)})
        meta = {
            "description": desc,
            "data_shape": list(shape),
            "axes": [list(a) if a else None for a in axess],
            "outputs": [{"shape": list(o.shape), "dtype": str(o.dtype)} for o in outs],
            "xla_rel_err_vs_f64": errs,
            "jax_version": jax.__version__,
            "generator": "tools/gen_cases/reductions.py",
        }
        with open(os.path.join(d, "meta.json"), "w") as fh:
            json.dump(meta, fh, indent=1)
        print(name, errs)


if __name__ == "__main__":
    main()
