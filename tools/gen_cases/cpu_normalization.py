"""bf16 programs whose XLA:CPU compilation carries float normalization, produced with JAX on CPU.

XLA:CPU computes bf16 in f32: it widens bf16 operands, narrows results, runs collectives in f32
and carries loop state widened. tpusim undoes that before compiling for a TPU
(crates/compile/src/normalize.rs); crates/interp/tests/jax_cases.rs runs each post.hlo both as
compiled and after that undoing, against these reference outputs, so the undoing must keep the
program's results. Values are small multiples of 1/8 so that bf16 sums and products are exact
and a collective moved back to bf16 sums to the same values.

Each case directory under OUTDIR (default testdata/interp_cases), named `cpun_<name>`, holds
pre.hlo, post.hlo, inputs.npz (arg0..), outputs.npz (out0..) and meta.json, as
tools/gen_cases/spmd.py writes them.
Run: python3 tools/gen_cases/cpu_normalization.py [OUTDIR]   (needs jax, numpy)
"""
import json
import os
import shutil
import sys

# Without excess precision XLA:CPU rounds every bf16 result as the program says, so post.hlo
# agrees with pre.hlo (run by tpusim at bf16) and keeps its f32 -> bf16 -> f32 round trips,
# which the undoing must not fold.
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8 --xla_allow_excess_precision=false"
os.environ.setdefault("JAX_PLATFORMS", "cpu")
import numpy as np
import jax
import jax.numpy as jnp
from jax import lax, shard_map
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "testdata", "interp_cases")
rng = np.random.default_rng(11)
BF16 = jnp.bfloat16


def eighths(shape, dtype=np.float32, lo=-8, hi=8):
    return (rng.integers(lo, hi, size=shape) / 8.0).astype(dtype)


def layernorm(x, scale):
    x32 = x.astype(jnp.float32)
    mean = x32.mean(-1, keepdims=True)
    var = ((x32 - mean) ** 2).mean(-1, keepdims=True)
    return ((x32 - mean) * lax.rsqrt(var + 1e-6) * scale).astype(BF16)


def mlp(x, w1, w2, scale):
    """A MaxText-style block: f32 parameters cast to bf16, bf16 activations."""
    h = layernorm(x, scale)
    h = jnp.dot(h, w1.astype(BF16))
    # Element-wise math in f32, as MaxText does it (bf16 element-wise ops would round at each
    # step in pre.hlo but once in XLA:CPU's f32 program, and the two would not agree).
    h = jax.nn.gelu(h.astype(jnp.float32)).astype(BF16)
    s = jax.nn.softmax(h.astype(jnp.float32), axis=-1).astype(BF16)
    return jnp.dot(s, w2.astype(BF16))


def scan_loss(ws, x):
    """Per-layer weights stacked on a leading axis, scanned with remat: the forward loop stacks
    bf16 activations (dynamic-update-slice), the backward loop reads them back."""
    def layer(h, w):
        h = jnp.tanh(jnp.dot(h, w.astype(BF16)))
        return h, h.sum(-1)
    h, per_layer = lax.scan(jax.checkpoint(layer), x, ws)
    return (h.astype(jnp.float32) ** 2).sum() + per_layer.astype(jnp.float32).sum()


def bits(a):
    """npz holds bf16 as its uint16 bits (the dtype name goes in meta.json)."""
    a = np.asarray(a)
    return a.view(np.uint16) if a.dtype.name == "bfloat16" else a


def attention_loss(q, k, v):
    """Multi-head attention and its gradient: XLA:CPU's dot kernels want batch dimensions major,
    so it copies operands to transposed layouts and bitcasts them to 3-D."""
    s = jnp.einsum("bqhd,bkhd->bhqk", q, k).astype(jnp.float32)
    p = jax.nn.softmax(s, axis=-1).astype(BF16)
    o = jnp.einsum("bhqk,bkhd->bqhd", p, v)
    return (o.astype(jnp.float32) ** 2).sum()


def save(name, desc, lowered, ins, outs, out_hlo_shardings=None, devices=1):
    d = os.path.join(OUT, "cpun_" + name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    with open(os.path.join(d, "pre.hlo"), "w") as fh:
        fh.write(lowered.as_text(dialect="hlo"))
    with open(os.path.join(d, "post.hlo"), "w") as fh:
        fh.write(lowered.compile().as_text())
    np.savez(os.path.join(d, "inputs.npz"), **{f"arg{i}": bits(a) for i, a in enumerate(ins)})
    np.savez(os.path.join(d, "outputs.npz"), **{f"out{i}": bits(a) for i, a in enumerate(outs)})
    outputs = [{"shape": list(a.shape), "dtype": a.dtype.name} for a in outs]
    for o, s in zip(outputs, out_hlo_shardings or []):
        o["hlo_sharding"] = s
    meta = {"description": desc,
            "inputs": [{"shape": list(np.shape(a)), "dtype": np.asarray(a).dtype.name} for a in ins],
            "outputs": outputs,
            "jax_version": jax.__version__,
            "generator": "tools/gen_cases/cpu_normalization.py"}
    if devices > 1:
        meta.update(num_devices=devices, sharded=True)
    with open(os.path.join(d, "meta.json"), "w") as fh:
        json.dump(meta, fh, indent=1)
    print("ok", name)


def single(name, desc, f, ins):
    jf = jax.jit(f)
    outs = [np.asarray(o) for o in jax.tree_util.tree_leaves(jf(*ins))]
    save(name, desc, jf.lower(*ins), ins, outs)


def main():
    x = eighths((8, 32)).astype(BF16)
    w1, w2 = eighths((32, 64)) / 4, eighths((64, 32)) / 4
    scale = eighths((32,), lo=4, hi=12)
    single("bf16_mlp", "bf16 layernorm, matmuls, gelu and softmax with f32 parameters cast to bf16",
           mlp, [x, w1, w2, scale])

    ws = eighths((3, 16, 16)) / 4
    h0 = eighths((4, 16)).astype(BF16)
    single("bf16_scan_grad", "gradient of a remat lax.scan over stacked bf16 layers",
           jax.grad(scan_loss), [ws, h0])

    q, k, v = (eighths((2, 8, 4, 16)).astype(BF16) for _ in range(3))
    single("bf16_attention_grad", "gradient of bf16 multi-head attention (einsums over heads)",
           jax.grad(attention_loss, argnums=(0, 1, 2)), [q, k, v])

    mesh = Mesh(np.array(jax.devices()[:8]), ("x",))
    def dp_step(a, w):
        g = jnp.dot(a, w.astype(BF16))
        total = lax.psum(g, "x")
        gathered = lax.all_gather(a, "x", axis=0, tiled=True)
        return total, gathered
    f = shard_map(dp_step, mesh=mesh, in_specs=(P("x"), P()), out_specs=(P(), P()), check_vma=False)
    a = eighths((16, 8)).astype(BF16)
    w = eighths((8, 4), lo=-2, hi=3)
    shardings = [NamedSharding(mesh, P("x")), NamedSharding(mesh, P())]
    placed = [jax.device_put(v, s) for v, s in zip([a, w], shardings)]
    jf = jax.jit(f, in_shardings=shardings)
    result = jf(*placed)
    outs = [np.asarray(o) for o in result]
    hlo = [str(o.sharding._to_xla_hlo_sharding(o.ndim)) for o in result]
    save("bf16_psum", "bf16 psum of a matmul and a bf16 all-gather over 8 devices (shard_map)",
         jf.lower(*placed), [a, w], outs, hlo, devices=8)


if __name__ == "__main__":
    main()
