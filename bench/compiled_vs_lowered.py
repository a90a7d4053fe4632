"""One program, two texts: tpusim's prediction of a JAX program from its lowered HLO and from the
XLA:CPU-compiled HLO of the same program, side by side.

A TPU runs neither text; tpusim compiles each for the TPU (crates/compile). The compiled text
carries XLA:CPU's fusions, layout copies and float normalization (bf16 computed, moved and carried
in f32), which tpusim undoes first (crates/compile/src/normalize.rs). If that undoing is complete,
both texts give the same prediction: the ratio compiled/lowered is 1.

  python3 bench/compiled_vs_lowered.py                  # release binary, chip v5e
  python3 bench/compiled_vs_lowered.py --chip v4 --as-given-too
  python3 bench/compiled_vs_lowered.py --corpus        # the lowered/compiled pairs in testdata/corpus

Programs (bf16 activations, f32 parameters cast to bf16, as MaxText does):
- gpt2_train: a 4-layer GPT-2-small-width decoder train step (scan over layers, remat, AdamW-free SGD)
- gpt2_decode: one KV-cache decode step of the same model (dynamic-update-slice into the cache)
- mlp_dp8: a data-parallel MLP train step on 8 devices (gradient psum in bf16)
Needs jax; JAX is only the oracle here, never a dependency of tpusim.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
os.environ.setdefault("JAX_PLATFORMS", "cpu")
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]
BF16 = jnp.bfloat16
D, H, F, V, LAYERS, SEQ, BATCH = 768, 12, 3072, 50304, 4, 512, 8


def sds(shape, dtype=jnp.float32, sharding=None):
    return jax.ShapeDtypeStruct(shape, dtype, sharding=sharding)


def params():
    return {
        "embed": sds((V, D)),
        "wqkv": sds((LAYERS, D, 3 * D)),
        "wo": sds((LAYERS, D, D)),
        "w1": sds((LAYERS, D, F)),
        "w2": sds((LAYERS, F, D)),
        "ln": sds((LAYERS, 2, D)),
    }


def rms(x, scale):
    x32 = x.astype(jnp.float32)
    return (x32 * lax.rsqrt((x32 * x32).mean(-1, keepdims=True) + 1e-6) * scale).astype(BF16)


def attention(q, k, v, causal):
    s = jnp.einsum("bqhd,bkhd->bhqk", q, k).astype(jnp.float32) / (q.shape[-1] ** 0.5)
    if causal:
        n = s.shape[-1]
        s = jnp.where(jnp.tril(jnp.ones((s.shape[-2], n), bool)), s, -1e30)
    p = jax.nn.softmax(s, axis=-1).astype(BF16)
    return jnp.einsum("bhqk,bkhd->bqhd", p, v)


def block(x, lp):
    wqkv, wo, w1, w2, ln = lp
    b, t, _ = x.shape
    h = rms(x, ln[0])
    q, k, v = jnp.split(jnp.dot(h, wqkv.astype(BF16)), 3, axis=-1)
    split = lambda a: a.reshape(b, t, H, D // H)  # noqa: E731
    a = attention(split(q), split(k), split(v), causal=True).reshape(b, t, D)
    x = x + jnp.dot(a, wo.astype(BF16))
    h = rms(x, ln[1])
    return x + jnp.dot(jax.nn.gelu(jnp.dot(h, w1.astype(BF16))), w2.astype(BF16))


def loss(p, tokens):
    x = p["embed"].astype(BF16)[tokens]
    layers = (p["wqkv"], p["wo"], p["w1"], p["w2"], p["ln"])
    x, _ = lax.scan(jax.checkpoint(lambda h, lp: (block(h, lp), None)), x, layers)
    logits = jnp.dot(x, p["embed"].astype(BF16).T).astype(jnp.float32)
    return -jax.nn.log_softmax(logits)[..., 0].mean()


def train_step(p, tokens):
    g = jax.grad(loss)(p, tokens)
    return jax.tree_util.tree_map(lambda w, d: w - 1e-3 * d, p, g)


def decode_step(p, cache_k, cache_v, token, pos):
    x = p["embed"].astype(BF16)[token][:, None, :]

    def layer(carry, lp):
        x, = carry
        (wqkv, wo, w1, w2, ln), ck, cv = lp
        h = rms(x, ln[0])
        q, k, v = jnp.split(jnp.dot(h, wqkv.astype(BF16)), 3, axis=-1)
        heads = lambda a: a.reshape(x.shape[0], 1, H, D // H)  # noqa: E731
        ck = lax.dynamic_update_slice(ck, heads(k), (0, pos, 0, 0))
        cv = lax.dynamic_update_slice(cv, heads(v), (0, pos, 0, 0))
        a = attention(heads(q), ck, cv, causal=False).reshape(x.shape[0], 1, D)
        x = x + jnp.dot(a, wo.astype(BF16))
        h = rms(x, ln[1])
        x = x + jnp.dot(jax.nn.gelu(jnp.dot(h, w1.astype(BF16))), w2.astype(BF16))
        return (x,), (ck, cv)

    layers = (p["wqkv"], p["wo"], p["w1"], p["w2"], p["ln"])
    (x,), (ck, cv) = lax.scan(layer, (x,), (layers, cache_k, cache_v))
    return jnp.dot(x[:, 0], p["embed"].astype(BF16).T), ck, cv


def mlp_dp8():
    mesh = Mesh(jax.devices()[:8], ("data",))
    rep, dat = NamedSharding(mesh, P()), NamedSharding(mesh, P("data"))

    def step(w1, w2, x):
        def l(w1, w2):
            h = jax.nn.gelu(jnp.dot(x, w1.astype(BF16)))
            return (jnp.dot(h, w2.astype(BF16)).astype(jnp.float32) ** 2).mean()
        g1, g2 = jax.grad(l, argnums=(0, 1))(w1, w2)
        return w1 - 1e-3 * g1, w2 - 1e-3 * g2

    args = (sds((4096, 16384), sharding=rep), sds((16384, 4096), sharding=rep),
            sds((64, 512, 4096), BF16, sharding=dat))
    return jax.jit(step, in_shardings=(rep, rep, dat), out_shardings=(rep, rep)), args


def programs():
    cache = sds((LAYERS, BATCH, 1024, H, D // H), BF16)
    yield "gpt2_train", jax.jit(train_step), (params(), sds((BATCH, SEQ), jnp.int32))
    yield "gpt2_decode", jax.jit(decode_step), (params(), cache, cache, sds((BATCH,), jnp.int32),
                                                  sds((), jnp.int32))
    yield "mlp_dp8", *mlp_dp8()


def predict(tpusim: str, text: str, chip: str, devices: int, extra: list[str]) -> dict:
    topology = {1: "1x1", 8: "2x4"}[devices]
    with tempfile.NamedTemporaryFile("w", suffix=".hlo", delete=False) as f:
        f.write(text)
    try:
        p = subprocess.run([tpusim, "analyze", f.name, "--chip", chip, "--topology", topology,
                            "--json", *extra], capture_output=True, text=True)
    finally:
        os.unlink(f.name)
    if p.returncode != 0:
        raise SystemExit(f"tpusim analyze failed: {p.stderr.strip()}")
    d = json.loads(p.stdout)
    return d[0] if isinstance(d, list) else d


def corpus_pairs():
    """(name, lowered path, compiled path) for every pair committed under testdata/corpus."""
    root = ROOT / "testdata" / "corpus"
    for d in sorted((root / "jax_cases").iterdir()):
        yield d.name, d / "pre.hlo", d / "post.hlo"
    for f in sorted((root / "jax_generated").glob("*.lowered.hlo")):
        yield f.name.removesuffix(".lowered.hlo"), f, f.with_name(f.name.replace("lowered", "compiled"))


def compare_corpus(tpusim: str, chip: str) -> None:
    import math
    logs = []
    for name, lo_path, co_path in corpus_pairs():
        lo = predict_file(tpusim, lo_path, chip)
        co = predict_file(tpusim, co_path, chip)
        ratio = co["step_time_s"] / lo["step_time_s"]
        logs.append(abs(math.log(ratio)))
        print(f"{name:32s} {lo['step_time_s'] * 1e6:9.2f}us {co['step_time_s'] * 1e6:9.2f}us {ratio:6.2f}")
    logs.sort()
    print(f"pairs {len(logs)}: median |log ratio| {logs[len(logs) // 2]:.3f}, "
          f"geometric-mean deviation {math.exp(sum(logs) / len(logs)):.3f}")


def predict_file(tpusim: str, path: pathlib.Path, chip: str) -> dict:
    p = subprocess.run([tpusim, "analyze", str(path), "--chip", chip, "--json"],
                       capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"tpusim analyze {path} failed: {p.stderr.strip()}")
    d = json.loads(p.stdout)
    return d[0] if isinstance(d, list) else d


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tpusim", default=str(ROOT / "target" / "release" / "tpusim"))
    ap.add_argument("--chip", default="v5e")
    ap.add_argument("--as-given-too", action="store_true",
                    help="also print the compiled text priced untouched (--as-given)")
    ap.add_argument("--corpus", action="store_true",
                    help="compare the lowered/compiled pairs committed in testdata/corpus instead")
    args = ap.parse_args()
    if args.corpus:
        compare_corpus(args.tpusim, args.chip)
        return
    print(f"chip {args.chip}; times are tpusim's predicted step time")
    print(f"{'program':12s} {'lowered':>10s} {'compiled':>10s} {'ratio':>6s}"
          f"{'  as given':>11s}" * args.as_given_too + "   peak GiB lowered / compiled")
    for name, jf, fargs in programs():
        lowered = jf.trace(*fargs).lower()
        devices = 8 if name.endswith("dp8") else 1
        lo = predict(args.tpusim, lowered.as_text(dialect="hlo"), args.chip, devices, [])
        comp_text = lowered.compile().as_text()
        co = predict(args.tpusim, comp_text, args.chip, devices, [])
        line = (f"{name:12s} {lo['step_time_s'] * 1e3:8.3f}ms {co['step_time_s'] * 1e3:8.3f}ms "
                f"{co['step_time_s'] / lo['step_time_s']:6.2f}")
        if args.as_given_too:
            ag = predict(args.tpusim, comp_text, args.chip, devices, ["--as-given"])
            line += f" {ag['step_time_s'] * 1e3:8.3f}ms"
        line += f"   {lo['peak_memory_bytes'] / 2**30:.2f} / {co['peak_memory_bytes'] / 2**30:.2f}"
        print(line, flush=True)


if __name__ == "__main__":
    sys.exit(main())
