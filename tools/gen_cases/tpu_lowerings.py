"""TPU-platform lowerings for tpusim's SPMD partitioner: programs lowered on a machine without TPUs.

`jax.jit(f).trace(*abstract_args).lower(lowering_platforms=("tpu",))` with `jax.ShapeDtypeStruct`
arguments whose NamedSharding lives on a `jax.sharding.AbstractMesh` gives the pre-partition HLO a
JAX user holds for a pod they do not have. Written to testdata/spmd_cases/tpu_<case>/ (pre.hlo,
meta.json) and, for the 256-device MaxText-style step, testdata/spmd_bench/maxtext_256.pre.hlo.

Imported by tools/gen_cases/partition.py (which runs `main`) and by bench/partition_vs_xla.py (which
uses `llama_train_step` with a real Mesh of fake CPU devices to time XLA's own partitioning).
"""
import json
import os
import shutil

import numpy as np
import jax
import jax.numpy as jnp
from jax import lax
from jax.sharding import NamedSharding, PartitionSpec as P

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", ".."))
OUT = os.path.join(REPO, "testdata", "spmd_cases")
BENCH_OUT = os.path.join(REPO, "testdata", "spmd_bench")


# ------------------------------------------------------------------ a Llama/MaxText-style decoder
# Logical dims of each parameter; `rules` maps them onto mesh axes (MaxText's logical axis rules).
LLAMA_DIMS = {
    "embed": ("vocab", "embed"),
    "attn_norm": ("layers", "embed"), "wq": ("layers", "embed", "heads", "kv"),
    "wk": ("layers", "embed", "heads", "kv"), "wv": ("layers", "embed", "heads", "kv"),
    "wo": ("layers", "heads", "kv", "embed"), "mlp_norm": ("layers", "embed"),
    "w_gate": ("layers", "embed", "mlp"), "w_up": ("layers", "embed", "mlp"), "w_down": ("layers", "mlp", "embed"),
    "final_norm": ("embed",), "unembed": ("embed", "vocab"),
}
LLAMA_LAYER_KEYS = ("attn_norm", "wq", "wk", "wv", "wo", "mlp_norm", "w_gate", "w_up", "w_down")


def llama_shapes(cfg):
    size = {"vocab": cfg["vocab"], "embed": cfg["d_model"], "layers": cfg["layers"], "heads": cfg["heads"],
            "kv": cfg["head_dim"], "mlp": cfg["d_ff"]}
    return {k: tuple(size[d] for d in dims) for k, dims in LLAMA_DIMS.items()}


def fsdp_tp_rules(fsdp, model):
    return {"embed": fsdp, "heads": model, "mlp": model, "vocab": model}


def param_specs(rules):
    return {k: P(*[rules.get(d) for d in dims]) for k, dims in LLAMA_DIMS.items()}


def _rms(x, g):
    x32 = x.astype(jnp.float32)
    y = x32 * lax.rsqrt(jnp.mean(x32 * x32, -1, keepdims=True) + 1e-6)
    return (y * g).astype(x.dtype)


def _rope(x):
    s, k = x.shape[1], x.shape[-1]
    inv = 1.0 / (10000.0 ** (jnp.arange(0, k, 2, dtype=jnp.float32) / k))
    ang = jnp.arange(s, dtype=jnp.float32)[:, None] * inv[None, :]
    sin, cos = jnp.sin(ang)[None, :, None, :], jnp.cos(ang)[None, :, None, :]
    x1, x2 = jnp.split(x.astype(jnp.float32), 2, axis=-1)
    return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1).astype(x.dtype)


def llama_loss(mesh, batch_axis, model_axis, dtype=jnp.bfloat16, remat=True):
    """Cross-entropy of a decoder-only Llama-style model: RMSNorm, RoPE attention, SwiGLU MLP,
    lax.scan over stacked layers (rematerialized), bf16 activations, f32 parameters."""
    act = NamedSharding(mesh, P(batch_axis, None, None))

    def layer(x, lp):
        c = lambda w: w.astype(dtype)  # noqa: E731
        h = _rms(x, lp["attn_norm"])
        q = _rope(jnp.einsum("bsd,dhk->bshk", h, c(lp["wq"])))
        k = _rope(jnp.einsum("bsd,dhk->bshk", h, c(lp["wk"])))
        v = jnp.einsum("bsd,dhk->bshk", h, c(lp["wv"]))
        s = jnp.einsum("bqhk,bthk->bhqt", q, k).astype(jnp.float32) * (q.shape[-1] ** -0.5)
        n = x.shape[1]
        s = jnp.where(jnp.tril(jnp.ones((n, n), bool)), s, -1e9)
        a = jnp.einsum("bhqt,bthk->bqhk", jax.nn.softmax(s, -1).astype(dtype), v)
        x = lax.with_sharding_constraint(x + jnp.einsum("bqhk,hkd->bqd", a, c(lp["wo"])), act)
        h = _rms(x, lp["mlp_norm"])
        g = jax.nn.silu(h @ c(lp["w_gate"])) * (h @ c(lp["w_up"]))
        return lax.with_sharding_constraint(x + g @ c(lp["w_down"]), act), None

    body = jax.checkpoint(layer) if remat else layer

    def loss(params, tokens):
        x = jnp.take(params["embed"], tokens, axis=0).astype(dtype)
        x = lax.with_sharding_constraint(x, act)
        x, _ = lax.scan(body, x, {k: params[k] for k in LLAMA_LAYER_KEYS})
        logits = (_rms(x, params["final_norm"]) @ params["unembed"].astype(dtype)).astype(jnp.float32)
        labels = jnp.roll(tokens, -1, axis=1)
        logp = jax.nn.log_softmax(logits, -1)
        return -jnp.mean(jnp.take_along_axis(logp, labels[..., None], -1))
    return loss


def adam_step(loss, lr=1e-4, b1=0.9, b2=0.95, eps=1e-8):
    def step(params, mu, nu, count, tokens):
        l, g = jax.value_and_grad(loss)(params, tokens)
        count = count + 1
        mu = jax.tree.map(lambda m, d: b1 * m + (1 - b1) * d, mu, g)
        nu = jax.tree.map(lambda v, d: b2 * v + (1 - b2) * d * d, nu, g)
        c1, c2 = 1 - b1 ** count.astype(jnp.float32), 1 - b2 ** count.astype(jnp.float32)
        params = jax.tree.map(lambda p, m, v: p - lr * (m / c1) / (jnp.sqrt(v / c2) + eps), params, mu, nu)
        return params, mu, nu, count, l
    return step


def llama_train_step(mesh, cfg, fsdp="fsdp", model="model"):
    """(step function, abstract args) of an Adam train step sharded FSDP x tensor on `mesh`."""
    shapes = llama_shapes(cfg)
    specs = param_specs(fsdp_tp_rules(fsdp, model))
    sds = lambda s, dt, spec: jax.ShapeDtypeStruct(s, dt, sharding=NamedSharding(mesh, spec))  # noqa: E731
    params = {k: sds(shapes[k], jnp.float32, specs[k]) for k in shapes}
    args = (params, params, params, sds((), jnp.int32, P()),
            sds((cfg["batch"], cfg["seq"]), jnp.int32, P(fsdp, None)))
    return adam_step(llama_loss(mesh, fsdp, model)), args


# MaxText-style sizes for the benchmark (a ~7B-parameter-shaped layer; the scan keeps the HLO small).
MAXTEXT_256 = dict(vocab=32768, d_model=4096, heads=32, head_dim=128, d_ff=14336, layers=32, batch=256, seq=2048)
# The README's Llama-style example and the small TPU case.
LLAMA_SMALL = dict(vocab=32000, d_model=2048, heads=16, head_dim=128, d_ff=5632, layers=16, batch=256, seq=1024)


def lower_tpu(f, args):
    return jax.jit(f).trace(*args).lower(lowering_platforms=("tpu",)).as_text(dialect="hlo")


# ------------------------------------------------------------------ TPU cases
def _sds(mesh, shape, dtype, spec):
    return jax.ShapeDtypeStruct(shape, dtype, sharding=NamedSharding(mesh, spec))


def tpu_mlp():
    mesh = jax.sharding.AbstractMesh((16, 16), ("data", "model"))
    f = lambda x, w1, w2: jax.nn.gelu(x @ w1) @ w2  # noqa: E731
    args = (_sds(mesh, (4096, 8192), jnp.bfloat16, P("data", None)),
            _sds(mesh, (8192, 16384), jnp.bfloat16, P(None, "model")),
            _sds(mesh, (16384, 8192), jnp.bfloat16, P("model", None)))
    return "tensor-parallel MLP forward, bf16, data x model on 16x16", "mlp", mesh, f, args


def tpu_llama_train():
    mesh = jax.sharding.AbstractMesh((16, 16), ("data", "model"))
    step, args = llama_train_step(mesh, LLAMA_SMALL, fsdp="data", model="model")
    return "Llama-style Adam train step, FSDP on 'data' x tensor on 'model' (16x16)", "transformer", mesh, step, args


def tpu_moe():
    mesh = jax.sharding.AbstractMesh((16, 16), ("data", "expert"))
    E, C, D, F = 16, 256, 1024, 2048

    def f(x, gate, w1, w2):
        logits = x @ gate
        onehot = jax.nn.one_hot(jnp.argmax(logits, -1), E, dtype=x.dtype)
        pos = (jnp.cumsum(onehot, 0) - 1) * onehot
        disp = onehot[:, :, None] * jax.nn.one_hot(pos.sum(-1), C, dtype=x.dtype)[:, None, :]
        xe = lax.with_sharding_constraint(jnp.einsum("sec,sd->ecd", disp, x), NamedSharding(mesh, P("expert")))
        ye = jnp.einsum("ecf,efd->ecd", jax.nn.relu(jnp.einsum("ecd,edf->ecf", xe, w1)), w2)
        return jnp.einsum("sec,ecd->sd", disp, ye)
    args = (_sds(mesh, (4096, D), jnp.bfloat16, P(("data", "expert"))),
            _sds(mesh, (D, E), jnp.bfloat16, P()),
            _sds(mesh, (E, D, F), jnp.bfloat16, P("expert")),
            _sds(mesh, (E, F, D), jnp.bfloat16, P("expert")))
    return "GShard-style MoE dispatch, experts on 'expert' (16) x tokens on both axes", "moe", mesh, f, args


def tpu_flash_attention():
    from jax.experimental.pallas.ops.tpu import flash_attention as fa
    mesh = jax.sharding.AbstractMesh((16, 16), ("data", "model"))
    spec = P("data", "model", None, None)

    def f(q, k, v):
        attn = jax.shard_map(lambda a, b, c: fa.flash_attention(a, b, c, causal=True), mesh=mesh,
                             in_specs=(spec, spec, spec), out_specs=spec, check_vma=False)
        return attn(q, k, v)
    shape = (64, 32, 1024, 128)  # batch, heads, seq, head_dim
    args = tuple(_sds(mesh, shape, jnp.bfloat16, spec) for _ in range(3))
    return "Pallas TPU flash attention (tpu_custom_call) inside shard_map, batch x heads on 16x16", "pallas", mesh, f, args


TPU_CASES = {"tpu_mlp_16x16": tpu_mlp, "tpu_llama_train_16x16": tpu_llama_train, "tpu_moe_16x16": tpu_moe,
             "tpu_flash_attention_16x16": tpu_flash_attention}


def _leaves_meta(args):
    out = []
    for a in jax.tree_util.tree_leaves(args):
        out.append({"shape": list(a.shape), "dtype": jnp.dtype(a.dtype).name, "sharding": str(a.sharding.spec)})
    return out


def write_tpu_case(name, build):
    desc, category, mesh, f, args = build()
    text = lower_tpu(f, args)
    d = os.path.join(OUT, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    with open(os.path.join(d, "pre.hlo"), "w") as fh:
        fh.write(text)
    meta = {"description": desc, "category": category, "platform": "tpu",
            "mesh": {"shape": list(mesh.axis_sizes), "axis_names": list(mesh.axis_names)},
            "num_devices": int(np.prod(mesh.axis_sizes)), "inputs": _leaves_meta(args),
            "jax_version": jax.__version__, "sharded": True, "generator": "tools/gen_cases/tpu_lowerings.py"}
    with open(os.path.join(d, "meta.json"), "w") as fh:
        fh.write(json.dumps(meta, indent=1) + "\n")
    print("ok", name, flush=True)


def write_bench():
    mesh = jax.sharding.AbstractMesh((16, 16), ("fsdp", "model"))
    step, args = llama_train_step(mesh, MAXTEXT_256)
    text = lower_tpu(step, args)
    os.makedirs(BENCH_OUT, exist_ok=True)
    with open(os.path.join(BENCH_OUT, "maxtext_256.pre.hlo"), "w") as fh:
        fh.write(text)
    print("ok maxtext_256", len(text), "bytes", flush=True)


def main(prefixes=()):
    failed = []
    for name, build in TPU_CASES.items():
        if not prefixes or any(name.startswith(p) for p in prefixes):
            try:
                write_tpu_case(name, build)
            except Exception as e:  # report each broken lowering, keep going
                failed.append(name)
                print("FAILED", name, type(e).__name__, str(e)[:400], flush=True)
    if not prefixes or any("maxtext".startswith(p) or p.startswith("maxtext") for p in prefixes):
        write_bench()
    return failed


if __name__ == "__main__":
    import sys
    raise SystemExit(1 if main(sys.argv[1:]) else 0)
