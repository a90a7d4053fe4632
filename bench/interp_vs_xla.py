"""Execution speed of `tpusim run` against XLA's CPU backend on the same programs.

Usage: python3 bench/interp_vs_xla.py [--tpusim target/release/tpusim] [--runs 7] [--only NAME...]

For each program the script jits it with JAX, writes the pre-optimization HLO
(`lower().as_text(dialect="hlo")`) and the inputs, runs
`tpusim run --inputs IN.npz --output OUT.npz --repeat N` (which prints the median
execution time, excluding parsing and I/O, as `exec_seconds:` on stderr) and times
the compiled JAX function the same way (median of N calls after a warm-up, with
`block_until_ready`). It checks that both give the same result and prints
`ratio = tpusim / xla` (lower is better; the issue's goals: at most 2 for the
MLP and the transformer layer, at most 3 for the conv net, the KV-cache decode
step and the 1,000-iteration scan). `kv_decode_compiled` runs the module
XLA:CPU compiled (`lower().compile().as_text()`) instead of the lowered one.

Needs Python 3 with jax/jaxlib (tested with 0.10.2) and numpy; a release build of
tpusim. Both sides use every core of the machine.
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import jax
import jax.numpy as jnp

jax.config.update("jax_platforms", "cpu")


def mlp():
    """Two-layer MLP, batch 512, 1024 -> 4096 -> 1024, f32 (the issue's program)."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((512, 1024), dtype=np.float32)
    w1 = rng.standard_normal((1024, 4096), dtype=np.float32) * 0.03
    b1 = rng.standard_normal((4096,), dtype=np.float32) * 0.1
    w2 = rng.standard_normal((4096, 1024), dtype=np.float32) * 0.03
    b2 = rng.standard_normal((1024,), dtype=np.float32) * 0.1

    def f(x, w1, b1, w2, b2):
        return jax.nn.gelu(x @ w1 + b1) @ w2 + b2

    return f, [x, w1, b1, w2, b2]


def transformer_layer():
    """Pre-norm transformer block: seq 512, d_model 1024, 8 heads, ffn 4096, f32."""
    rng = np.random.default_rng(1)
    s, d, h, ff = 512, 1024, 8, 4096
    dh = d // h

    def p(*shape, scale=0.03):
        return rng.standard_normal(shape, dtype=np.float32) * scale

    args = [p(s, d, scale=1.0), p(d, 3 * d), p(d, d), p(d, ff), p(ff, d),
            np.ones(d, np.float32), np.ones(d, np.float32)]

    def norm(x, g):
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) * jax.lax.rsqrt(var + 1e-5) * g

    def f(x, wqkv, wo, w1, w2, g1, g2):
        q, k, v = jnp.split(norm(x, g1) @ wqkv, 3, axis=-1)
        q, k, v = (t.reshape(s, h, dh).transpose(1, 0, 2) for t in (q, k, v))
        att = jax.nn.softmax(q @ k.transpose(0, 2, 1) / np.sqrt(dh), axis=-1)
        o = (att @ v).transpose(1, 0, 2).reshape(s, d)
        x = x + o @ wo
        return x + jax.nn.gelu(norm(x, g2) @ w1) @ w2

    return f, args


def convnet_train():
    """Conv net forward+backward: batch 32, 32x32x3, three 3x3 convs (32/64/64
    channels, relu, 2x2 max pools via reduce_window), dense head to 10 classes,
    softmax cross-entropy; `jax.value_and_grad` with respect to the params, f32."""
    rng = np.random.default_rng(2)

    def p(*shape, scale):
        return rng.standard_normal(shape, dtype=np.float32) * scale

    x = p(32, 32, 32, 3, scale=1.0)
    labels = np.eye(10, dtype=np.float32)[rng.integers(0, 10, 32)]
    params = [p(3, 3, 3, 32, scale=0.2), np.zeros(32, np.float32),
              p(3, 3, 32, 64, scale=0.06), np.zeros(64, np.float32),
              p(3, 3, 64, 64, scale=0.04), np.zeros(64, np.float32),
              p(4 * 4 * 64, 10, scale=0.03), np.zeros(10, np.float32)]
    dn = ("NHWC", "HWIO", "NHWC")

    def pool(h):
        return jax.lax.reduce_window(h, -jnp.inf, jax.lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")

    def loss(params, x, labels):
        h = x
        for i in range(3):
            w, b = params[2 * i], params[2 * i + 1]
            h = jax.lax.conv_general_dilated(h, w, (1, 1), "SAME", dimension_numbers=dn)
            h = pool(jax.nn.relu(h + b))
        logits = h.reshape(h.shape[0], -1) @ params[6] + params[7]
        return -jnp.mean(jnp.sum(labels * jax.nn.log_softmax(logits), axis=-1))

    def f(x, labels, *params):
        return jax.value_and_grad(loss)(list(params), x, labels)

    return f, [x, labels, *params]


def kv_decode():
    """One KV-cache decode step of a 4-layer transformer: d_model 512, 8 heads,
    ffn 2048, batch 8, cache length 1024, f32. Each layer writes the new token's
    key and value into its cache with dynamic_update_slice at `pos`, attends over
    the whole cache (positions after `pos` masked) and runs a gelu MLP; returns the
    next hidden state and the updated caches."""
    rng = np.random.default_rng(3)
    nl, d, h, ff, b, t = 4, 512, 8, 2048, 8, 1024
    dh = d // h

    def p(*shape, scale=0.03):
        return rng.standard_normal(shape, dtype=np.float32) * scale

    x = p(b, d, scale=1.0)
    kc, vc = p(nl, b, t, h, dh, scale=1.0), p(nl, b, t, h, dh, scale=1.0)
    pos = np.int32(700)
    weights = [p(nl, d, 3 * d), p(nl, d, d), p(nl, d, ff), p(nl, ff, d)]

    def norm(x):
        mu = x.mean(-1, keepdims=True)
        return (x - mu) * jax.lax.rsqrt(((x - mu) ** 2).mean(-1, keepdims=True) + 1e-5)

    def f(x, kc, vc, pos, wqkv, wo, w1, w2):
        new_k, new_v = [], []
        valid = jnp.arange(t) <= pos
        for l in range(nl):
            q, k, v = jnp.split(norm(x) @ wqkv[l], 3, axis=-1)
            q, k, v = (a.reshape(b, 1, h, dh) for a in (q, k, v))
            kl = jax.lax.dynamic_update_slice(kc[l], k, (0, pos, 0, 0))
            vl = jax.lax.dynamic_update_slice(vc[l], v, (0, pos, 0, 0))
            s = jnp.einsum("bqhd,bthd->bhqt", q, kl) / np.sqrt(dh)
            s = jnp.where(valid, s, -1e30)
            o = jnp.einsum("bhqt,bthd->bqhd", jax.nn.softmax(s, axis=-1), vl)
            x = x + o.reshape(b, d) @ wo[l]
            x = x + jax.nn.gelu(norm(x) @ w1[l]) @ w2[l]
            new_k.append(kl)
            new_v.append(vl)
        return x, jnp.stack(new_k), jnp.stack(new_v)

    return f, [x, kc, vc, pos, *weights]


def scan_1000():
    """`lax.scan` of 1,000 small iterations: an f32[128] carry updated by a
    128x128 matvec and a few elementwise ops, reading one row of a [1000,128]
    input per step and emitting the carry's sum (XLA: a few ms, mostly its
    per-iteration overhead; with a [16] carry it takes well under 1 ms)."""
    rng = np.random.default_rng(4)
    n = 128
    w = rng.standard_normal((n, n), dtype=np.float32) / np.float32(np.sqrt(n))
    xs = rng.standard_normal((1000, n), dtype=np.float32)
    c0 = rng.standard_normal((n,), dtype=np.float32)

    def f(c0, w, xs):
        def step(c, x):
            c = jnp.tanh(w @ c + x) * 0.9 + 0.1 * c
            return c, c.sum()
        return jax.lax.scan(step, c0, xs)

    return f, [c0, w, xs]


# name -> (program, which HLO tpusim runs: "lowered" is the pre-optimization
# module, "compiled" the module XLA:CPU compiled, fusions and all)
PROGRAMS = {
    "mlp": (mlp, "lowered"),
    "transformer_layer": (transformer_layer, "lowered"),
    "convnet_train": (convnet_train, "lowered"),
    "kv_decode": (kv_decode, "lowered"),
    "kv_decode_compiled": (kv_decode, "compiled"),
    "scan_1000": (scan_1000, "lowered"),
}


def time_xla(f, args, runs, hlo_kind):
    g = jax.jit(f)
    dev = [jax.device_put(a) for a in args]
    out = jax.block_until_ready(g(*dev))
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        jax.block_until_ready(g(*dev))
        times.append(time.perf_counter() - t)
    lowered = g.lower(*args)
    hlo = lowered.compile().as_text() if hlo_kind == "compiled" else lowered.as_text(dialect="hlo")
    leaves = [np.asarray(x) for x in jax.tree_util.tree_leaves(out)]
    return statistics.median(times), leaves, hlo


def time_tpusim(binary, hlo, args, runs, tmp):
    hlo_path, in_path, out_path = (os.path.join(tmp, n) for n in ("m.hlo", "in.npz", "out.npz"))
    with open(hlo_path, "w") as fh:
        fh.write(hlo)
    np.savez(in_path, **{f"arg{i}": a for i, a in enumerate(args)})
    cmd = [binary, "run", hlo_path, "--inputs", in_path, "--output", out_path, "--repeat", str(runs)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"tpusim failed: {r.stderr.strip()}")
    m = re.search(r"exec_seconds:\s*([0-9.eE+-]+)", r.stderr)
    with np.load(out_path) as z:
        return float(m.group(1)), [z[f"out{k}"] for k in range(len(z.files))]


def max_rel_err(got, want):
    """Largest |got - want| over the largest |want|, worst over the result leaves."""
    if len(got) != len(want):
        return float("inf")
    err = 0.0
    for g, w in zip(got, want):
        if g.shape != w.shape:
            return float("inf")
        g, w = g.astype(np.float64), w.astype(np.float64)
        scale = max(1e-30, float(np.max(np.abs(w), initial=0.0)))
        err = max(err, float(np.max(np.abs(g - w), initial=0.0)) / scale)
    return err


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tpusim", default="target/release/tpusim")
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--only", nargs="+", choices=sorted(PROGRAMS), metavar="NAME",
                    help="run only these programs: " + ", ".join(PROGRAMS))
    a = ap.parse_args()
    print(f"{'program':<20} {'xla_cpu_s':>10} {'tpusim_s':>10} {'ratio':>7}  max_rel_err")
    with tempfile.TemporaryDirectory() as tmp:
        for name, (make, hlo_kind) in PROGRAMS.items():
            if a.only and name not in a.only:
                continue
            f, args = make()
            xla_s, want, hlo = time_xla(f, args, a.runs, hlo_kind)
            sim_s, got = time_tpusim(a.tpusim, hlo, args, a.runs, tmp)
            err = max_rel_err(got, want)
            print(f"{name:<20} {xla_s:>10.4f} {sim_s:>10.4f} {sim_s / xla_s:>7.2f}  {err:.2e}")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
