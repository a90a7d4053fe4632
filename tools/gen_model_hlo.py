"""Whole-model forward passes for bench/kernels, lowered to TPU HLO.

Our own JAX forward passes with the published architectures of GPT-2 124M,
Qwen2.5-0.5B and SmolLM2-135M (bf16 weights and activations, eager attention
with a causal mask, logits for every position), lowered for TPU at every
(model, seq, batch) of bench/kernels/data/e2e_device_truth_tpuv4.csv and
written, gzipped, to bench/kernels/models/<model>_s<seq>_b<batch>.hlo.gz.

The HLO is XLA's pre-optimization module (what `jax.jit(...).lower` gives);
tpusim fuses it with its own TPU-style fusion pass before timing.

Run: python3 tools/gen_model_hlo.py
"""

import csv
import gzip
import math
import os

import jax
import jax.numpy as jnp

BF16 = jnp.bfloat16
ROOT = os.path.join(os.path.dirname(__file__), "..", "bench", "kernels")

# Published configurations (Hugging Face config.json of each model).
CONFIGS = {
    "gpt2": dict(kind="gpt2", layers=12, d=768, heads=12, kv_heads=12, ff=3072,
                 vocab=50257, max_pos=1024),
    "qwen2.5-0.5b": dict(kind="llama", layers=24, d=896, heads=14, kv_heads=2, ff=4864,
                         vocab=151936, qkv_bias=True, rope_theta=1e6),
    "smollm2-135m": dict(kind="llama", layers=30, d=576, heads=9, kv_heads=3, ff=1536,
                         vocab=49152, qkv_bias=False, rope_theta=1e5),
}


def param_shapes(c):
    d, hd = c["d"], c["d"] // c["heads"]
    kv = c["kv_heads"] * hd
    if c["kind"] == "gpt2":
        layer = dict(ln1_g=(d,), ln1_b=(d,), w_qkv=(d, 3 * d), b_qkv=(3 * d,), w_o=(d, d),
                     b_o=(d,), ln2_g=(d,), ln2_b=(d,), w_fc=(d, c["ff"]), b_fc=(c["ff"],),
                     w_proj=(c["ff"], d), b_proj=(d,))
        top = dict(wte=(c["vocab"], d), wpe=(c["max_pos"], d), lnf_g=(d,), lnf_b=(d,))
    else:
        layer = dict(n1=(d,), w_q=(d, d), w_k=(d, kv), w_v=(d, kv), w_o=(d, d), n2=(d,),
                     w_gate=(d, c["ff"]), w_up=(d, c["ff"]), w_down=(c["ff"], d))
        if c["qkv_bias"]:
            layer.update(b_q=(d,), b_k=(kv,), b_v=(kv,))
        top = dict(embed=(c["vocab"], d), norm=(d,))
    return dict(top=top, layers=[layer] * c["layers"])


def layer_norm(x, g, b):
    xf = x.astype(jnp.float32)
    mu = xf.mean(-1, keepdims=True)
    var = ((xf - mu) ** 2).mean(-1, keepdims=True)
    return ((xf - mu) * jax.lax.rsqrt(var + 1e-5) * g + b).astype(BF16)


def rms_norm(x, g):
    xf = x.astype(jnp.float32)
    y = xf * jax.lax.rsqrt((xf * xf).mean(-1, keepdims=True) + 1e-6)
    return (y * g).astype(BF16)


def attention(q, k, v, heads, kv_heads, upcast):
    # q: [B,S,H,hd], k/v: [B,S,KV,hd]; eager: scores, mask, softmax, weighted sum.
    b, s, _, hd = q.shape
    if kv_heads != heads:
        k = jnp.repeat(k, heads // kv_heads, axis=2)
        v = jnp.repeat(v, heads // kv_heads, axis=2)
    scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(hd)
    mask = jnp.tril(jnp.ones((s, s), dtype=bool))
    scores = jnp.where(mask, scores, jnp.asarray(-1e9, scores.dtype))
    if upcast:
        p = jax.nn.softmax(scores.astype(jnp.float32), axis=-1).astype(BF16)
    else:
        p = jax.nn.softmax(scores, axis=-1)
    return jnp.einsum("bhqk,bkhd->bqhd", p, v).reshape(b, s, heads * hd)


def rope(x, theta):
    b, s, h, hd = x.shape
    inv = 1.0 / (theta ** (jnp.arange(0, hd, 2, dtype=jnp.float32) / hd))
    ang = jnp.arange(s, dtype=jnp.float32)[:, None] * inv[None, :]
    cos = jnp.concatenate([jnp.cos(ang)] * 2, -1)[None, :, None, :]
    sin = jnp.concatenate([jnp.sin(ang)] * 2, -1)[None, :, None, :]
    x1, x2 = x[..., : hd // 2], x[..., hd // 2:]
    rot = jnp.concatenate([-x2, x1], -1)
    return (x.astype(jnp.float32) * cos + rot.astype(jnp.float32) * sin).astype(BF16)


def forward(c, params, tokens):
    b, s = tokens.shape
    d, heads, kvh = c["d"], c["heads"], c["kv_heads"]
    hd = d // heads
    top = params["top"]
    if c["kind"] == "gpt2":
        x = top["wte"][tokens] + top["wpe"][:s][None]
        for p in params["layers"]:
            h = layer_norm(x, p["ln1_g"], p["ln1_b"])
            qkv = h @ p["w_qkv"] + p["b_qkv"]
            q, k, v = jnp.split(qkv, 3, axis=-1)
            a = attention(q.reshape(b, s, heads, hd), k.reshape(b, s, heads, hd),
                          v.reshape(b, s, heads, hd), heads, heads, upcast=False)
            x = x + (a @ p["w_o"] + p["b_o"])
            h = layer_norm(x, p["ln2_g"], p["ln2_b"])
            x = x + (jax.nn.gelu(h @ p["w_fc"] + p["b_fc"], approximate=True) @ p["w_proj"]
                     + p["b_proj"])
        x = layer_norm(x, top["lnf_g"], top["lnf_b"])
        return x @ top["wte"].T
    x = top["embed"][tokens]
    for p in params["layers"]:
        h = rms_norm(x, p["n1"])
        q, k, v = h @ p["w_q"], h @ p["w_k"], h @ p["w_v"]
        if c["qkv_bias"]:
            q, k, v = q + p["b_q"], k + p["b_k"], v + p["b_v"]
        q = rope(q.reshape(b, s, heads, hd), c["rope_theta"])
        k = rope(k.reshape(b, s, kvh, hd), c["rope_theta"])
        a = attention(q, k, v.reshape(b, s, kvh, hd), heads, kvh, upcast=True)
        x = x + a @ p["w_o"]
        h = rms_norm(x, p["n2"])
        x = x + (jax.nn.silu(h @ p["w_gate"]) * (h @ p["w_up"])) @ p["w_down"]
    x = rms_norm(x, top["norm"])
    return x @ top["embed"].T


def lower(name, seq, batch):
    c = CONFIGS[name]
    shapes = param_shapes(c)
    spec = jax.tree_util.tree_map(lambda s: jax.ShapeDtypeStruct(s, BF16), shapes,
                                  is_leaf=lambda s: isinstance(s, tuple))
    tokens = jax.ShapeDtypeStruct((batch, seq), jnp.int32)
    f = jax.jit(lambda p, t: forward(c, p, t))
    return f.trace(spec, tokens).lower(lowering_platforms=("tpu",)).as_text(dialect="hlo")


def main():
    out = os.path.join(ROOT, "models")
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(ROOT, "data", "e2e_device_truth_tpuv4.csv")) as f:
        rows = [r for r in csv.DictReader(f) if r["status"] == "ok"]
    for r in rows:
        name, seq, batch = r["model"], int(r["seq"]), int(r["batch"])
        text = lower(name, seq, batch)
        path = os.path.join(out, f"{name}_s{seq}_b{batch}.hlo.gz")
        with gzip.open(path, "wt", compresslevel=9) as g:
            g.write(text)
        print(path, len(text))


if __name__ == "__main__":
    main()
