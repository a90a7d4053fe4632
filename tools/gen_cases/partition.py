"""Reference cases for tpusim's SPMD partitioner, produced by JAX/XLA on 8 host CPU devices.

Each case directory testdata/spmd_cases/<case>/ holds (format: testdata/spmd_cases/README.md):
  pre.hlo               the unpartitioned program, as `jax.jit(f, in_shardings=...).lower(...)` gives it
  xla_propagated.hlo    XLA's module after Shardy propagation, just before its SPMD partitioner
  xla_partitioned.hlo   XLA's module right after its SPMD partitioner (pass `spmd-partitioning`)
  post.hlo              the final compiled module (`compiled.as_text()`)
  structure.json        per-device parameter/result shapes and the multiset of collectives of
                        xla_partitioned.hlo (tools/gen_cases/hlo_structure.py; definitions in the README)
  inputs.npz            arg0..argN: GLOBAL arrays (bf16 stored as uint16 bits)
  outputs.npz           out0..outM: GLOBAL results
  meta.json             description, category, mesh, shapes, dtypes, shardings

TPU-platform lowerings (AbstractMesh, `lowering_platforms=("tpu",)`) go to testdata/spmd_cases/tpu_<case>/
(pre.hlo + meta.json only; tools/gen_cases/tpu_lowerings.py) and the 256-device MaxText-style step to
testdata/spmd_bench/maxtext_256.pre.hlo.

Run: python3 tools/gen_cases/partition.py [NAME_PREFIX ...]   (all cases when none is given)
JAX is only the oracle here, never a dependency of tpusim.
"""
import glob
import json
import os
import re
import shutil
import sys
import tempfile

DUMP = tempfile.mkdtemp(prefix="tpusim_spmd_dump_")
os.environ["XLA_FLAGS"] = (
    "--xla_force_host_platform_device_count=8 "
    f"--xla_dump_to={DUMP} --xla_dump_hlo_pass_re=spmd-partitioning|shardy-xla "
    "--xla_dump_large_constants=true"
)

import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax import lax, shard_map  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P  # noqa: E402

import tpu_lowerings  # noqa: E402  (same directory: the AbstractMesh/TPU cases)
from hlo_structure import structure  # noqa: E402  (same directory: structure.json's summary)

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", ".."))
OUT = os.path.join(REPO, "testdata", "spmd_cases")
BF16 = ml_dtypes.bfloat16

CASES = []


def case(name, category, desc):
    def deco(fn):
        CASES.append((name, category, desc, fn))
        return fn
    return deco


def rng_for(name):
    # One generator per case, seeded from its name: adding a case never changes another's data.
    return np.random.default_rng(sum(ord(c) * (i + 1) for i, c in enumerate(name)))


def mesh(shape, names):
    return Mesh(np.array(jax.devices()[: int(np.prod(shape))]).reshape(shape), names)


class Case:
    """What a case builder returns: the function, its global inputs and their specs on a mesh."""

    def __init__(self, f, ins, specs, m, out_specs=None):
        self.f, self.ins, self.specs, self.mesh, self.out_specs = f, ins, specs, m, out_specs


# ------------------------------------------------------------------ models
def normal(r, shape, scale=1.0, dtype=np.float32):
    return (r.standard_normal(shape) * scale).astype(dtype)


def mlp_init(r, d, h, o, dtype=np.float32):
    return {"w1": normal(r, (d, h), d ** -0.5, dtype), "b1": np.zeros((h,), dtype),
            "w2": normal(r, (h, o), h ** -0.5, dtype), "b2": np.zeros((o,), dtype)}


def mlp_apply(p, x):
    h = jax.nn.gelu(x @ p["w1"] + p["b1"])
    return h @ p["w2"] + p["b2"]


def mlp_loss(p, x, y):
    return jnp.mean(jnp.square(mlp_apply(p, x).astype(jnp.float32) - y))


# Tiny decoder-only transformer; logical dim names per parameter (MaxText-style axis rules).
T_CFG = dict(B=8, S=8, D=16, H=8, K=4, F=32, V=64, L=2)
T_DIMS = {
    "embed": ("vocab", "embed"), "norm1": ("embed",), "wq": ("embed", "heads", "kv"),
    "wk": ("embed", "heads", "kv"), "wv": ("embed", "heads", "kv"), "wo": ("heads", "kv", "embed"),
    "norm2": ("embed",), "w1": ("embed", "mlp"), "w2": ("mlp", "embed"), "unembed": ("embed", "vocab"),
}
LAYER_KEYS = ("norm1", "wq", "wk", "wv", "wo", "norm2", "w1", "w2")


def t_init(r, stacked, dtype=np.float32):
    c = T_CFG
    shapes = {"embed": (c["V"], c["D"]), "norm1": (c["D"],), "wq": (c["D"], c["H"], c["K"]),
              "wk": (c["D"], c["H"], c["K"]), "wv": (c["D"], c["H"], c["K"]), "wo": (c["H"], c["K"], c["D"]),
              "norm2": (c["D"],), "w1": (c["D"], c["F"]), "w2": (c["F"], c["D"]), "unembed": (c["D"], c["V"])}
    p = {}
    for k, s in shapes.items():
        if stacked and k in LAYER_KEYS:
            s = (c["L"],) + s
        p[k] = np.ones(s, dtype) if k.startswith("norm") else normal(r, s, s[-1] ** -0.5 if len(s) else 1, dtype)
    return p


def rms(x, g):
    x32 = x.astype(jnp.float32)
    return (x32 * lax.rsqrt(jnp.mean(x32 * x32, -1, keepdims=True) + 1e-6)).astype(x.dtype) * g


def t_layer(x, lp):
    h = rms(x, lp["norm1"])
    q = jnp.einsum("bsd,dhk->bshk", h, lp["wq"])
    k = jnp.einsum("bsd,dhk->bshk", h, lp["wk"])
    v = jnp.einsum("bsd,dhk->bshk", h, lp["wv"])
    s = jnp.einsum("bqhk,bthk->bhqt", q, k).astype(jnp.float32) / np.sqrt(q.shape[-1])
    n = x.shape[1]
    s = jnp.where(jnp.tril(jnp.ones((n, n), bool)), s, -1e9)
    a = jnp.einsum("bhqt,bthk->bqhk", jax.nn.softmax(s, -1).astype(x.dtype), v)
    x = x + jnp.einsum("bqhk,hkd->bqd", a, lp["wo"])
    h = rms(x, lp["norm2"])
    return x + jax.nn.gelu(h @ lp["w1"]) @ lp["w2"]


def t_loss(p, tokens, stacked):
    x = jnp.take(p["embed"], tokens, axis=0)
    if stacked:
        x, _ = lax.scan(lambda c, lp: (t_layer(c, lp), None), x, {k: p[k] for k in LAYER_KEYS})
    else:
        x = t_layer(x, {k: p[k] for k in LAYER_KEYS})
    logits = (x @ p["unembed"]).astype(jnp.float32)
    labels = jnp.roll(tokens, -1, axis=1)
    lp = jax.nn.log_softmax(logits, -1)
    return -jnp.mean(jnp.take_along_axis(lp, labels[..., None], -1))


def sgd(loss, lr=0.1):
    def step(p, *batch):
        l, g = jax.value_and_grad(loss)(p, *batch)
        return jax.tree.map(lambda a, b: (a - lr * b).astype(a.dtype), p, g), l
    return step


def adam(loss, lr=1e-2, b1=0.9, b2=0.99, eps=1e-8):
    def step(p, m, v, count, *batch):
        l, g = jax.value_and_grad(loss)(p, *batch)
        count = count + 1
        m = jax.tree.map(lambda a, b: b1 * a + (1 - b1) * b.astype(jnp.float32), m, g)
        v = jax.tree.map(lambda a, b: b2 * a + (1 - b2) * jnp.square(b.astype(jnp.float32)), v, g)
        c1 = 1 - b1 ** count.astype(jnp.float32)
        c2 = 1 - b2 ** count.astype(jnp.float32)
        p = jax.tree.map(lambda a, mm, vv: (a - lr * (mm / c1) / (jnp.sqrt(vv / c2) + eps)).astype(a.dtype), p, m, v)
        return p, m, v, count, l
    return step


def logical_spec(dims, rules):
    return P(*[rules.get(d) for d in dims])


# Parallelism strategies: mesh shape, axis names, logical-dim -> mesh-axis rules, batch/seq axes.
STRATEGIES = {
    "dp8": ((8,), ("data",), {}, "data", None),
    "fsdp8": ((8,), ("fsdp",), {"embed": "fsdp"}, "fsdp", None),
    "tp8": ((8,), ("model",), {"heads": "model", "mlp": "model", "vocab": "model"}, None, None),
    "dp2_tp4": ((2, 4), ("data", "model"), {"heads": "model", "mlp": "model", "vocab": "model"}, "data", None),
    "dp4_tp2": ((4, 2), ("data", "model"), {"heads": "model", "mlp": "model", "vocab": "model"}, "data", None),
    "fsdp2_tp4": ((2, 4), ("fsdp", "model"), {"embed": "fsdp", "heads": "model", "mlp": "model", "vocab": "model"},
                  "fsdp", None),
    "fsdp4_tp2": ((4, 2), ("fsdp", "model"), {"embed": "fsdp", "heads": "model", "mlp": "model", "vocab": "model"},
                  "fsdp", None),
    "dp2_fsdp2_tp2": ((2, 2, 2), ("data", "fsdp", "model"),
                      {"embed": "fsdp", "heads": "model", "mlp": "model", "vocab": "model"}, ("data", "fsdp"), None),
    "dp2_sp4": ((2, 4), ("data", "seq"), {}, "data", "seq"),
    "sp8": ((8,), ("seq",), {}, None, "seq"),
    "dp2_sp2_tp2": ((2, 2, 2), ("data", "seq", "model"), {"heads": "model", "mlp": "model"}, "data", "seq"),
}

MLP_DIMS = {"w1": ("embed", "mlp"), "b1": ("mlp",), "w2": ("mlp", "embed"), "b2": ("embed",)}


def flat_case(step, tree_args, tree_specs, m, out_specs=None):
    """Flattens pytree arguments: the jitted function takes (and the files hold) leaves only."""
    leaves, treedef = jax.tree_util.tree_flatten(tree_args)
    spec_leaves = treedef.flatten_up_to(tree_specs)

    def f(*xs):
        return step(*jax.tree_util.tree_unflatten(treedef, list(xs)))
    return Case(f, leaves, spec_leaves, m, out_specs)


def mlp_family(name, strategy, opt, dtype=np.float32):
    shape, names, rules, batch, _ = STRATEGIES[strategy]

    def build():
        r = rng_for(name)
        m = mesh(shape, names)
        p = mlp_init(r, 16, 32, 16, dtype)
        x, y = normal(r, (16, 16), 1, dtype), normal(r, (16, 16), 1, np.float32)
        ps = {k: logical_spec(MLP_DIMS[k], rules) for k in p}
        bs = P(batch, None)
        if opt == "fwd":
            return Case(lambda p1, p2, p3, p4, xx: mlp_apply({"w1": p1, "b1": p2, "w2": p3, "b2": p4}, xx),
                        [p["w1"], p["b1"], p["w2"], p["b2"], x], [ps["w1"], ps["b1"], ps["w2"], ps["b2"], bs], m)
        if opt == "sgd":
            return flat_case(sgd(mlp_loss), (p, x, y), (ps, bs, bs), m)
        zeros = jax.tree.map(lambda a: np.zeros(a.shape, np.float32), p)
        return flat_case(adam(mlp_loss), (p, zeros, zeros, np.int32(0), x, y), (ps, ps, ps, P(), bs, bs), m)
    return build


def transformer_family(name, strategy, opt, stacked=False, dtype=np.float32):
    shape, names, rules, batch, seq = STRATEGIES[strategy]

    def build():
        r = rng_for(name)
        m = mesh(shape, names)
        p = t_init(r, stacked, dtype)
        ps = {k: logical_spec((("layers",) if stacked and k in LAYER_KEYS else ()) + T_DIMS[k], rules) for k in p}
        tokens = r.integers(0, T_CFG["V"], (T_CFG["B"], T_CFG["S"])).astype(np.int32)
        ts = P(batch, seq)

        def loss(pp, tk):
            return t_loss(pp, tk, stacked)
        if opt == "sgd":
            return flat_case(sgd(loss), (p, tokens), (ps, ts), m)
        zeros = jax.tree.map(lambda a: np.zeros(a.shape, np.float32), p)
        return flat_case(adam(loss), (p, zeros, zeros, np.int32(0), tokens), (ps, ps, ps, P(), ts), m)
    return build


for _s in ("dp8", "fsdp8", "tp8", "dp2_tp4", "dp4_tp2", "fsdp2_tp4", "dp2_fsdp2_tp2"):
    for _o in ("fwd", "sgd", "adam"):
        case(f"mlp_{_o}_{_s}", "mlp", f"2-layer MLP ({_o}) under {_s}")(mlp_family(f"mlp_{_o}_{_s}", _s, _o))
case("mlp_sgd_bf16_fsdp2_tp4", "mlp", "bf16 MLP SGD step, FSDP x tensor on 2x4")(
    mlp_family("mlp_sgd_bf16_fsdp2_tp4", "fsdp2_tp4", "sgd", BF16))


@case("mlp_loss_large_batch", "mlp",
      "f32 MLP SGD step, batch 4096 on 8 devices: the loss is a mean of 4096x256 = 2^20 squared errors "
      "(issue 14: a sequential f32 fold is visibly off at this size)")
def _():
    # Targets come from a small replicated teacher matrix inside the program (y = tanh(x @ t)), so
    # inputs.npz holds x (4096x16) and no 4096x256 target array: the case stays well under 1 MB.
    r, m = rng_for("mlp_loss_large_batch"), mesh((8,), ("data",))
    p = mlp_init(r, 16, 64, 256)
    x, t = normal(r, (4096, 16)), normal(r, (16, 256), 16 ** -0.5)
    ps = {k: P() for k in p}

    def loss(pp, xx, tt):
        return mlp_loss(pp, xx, jnp.tanh(xx @ tt))
    return flat_case(sgd(loss), (p, x, t), (ps, P("data", None), P()), m)

for _s in ("dp8", "fsdp8", "tp8", "dp2_tp4", "dp4_tp2", "fsdp2_tp4", "fsdp4_tp2", "dp2_fsdp2_tp2", "dp2_sp4", "sp8",
           "dp2_sp2_tp2"):
    case(f"tfm_sgd_{_s}", "transformer", f"1-layer decoder train step (SGD) under {_s}")(
        transformer_family(f"tfm_sgd_{_s}", _s, "sgd"))
for _s in ("dp8", "fsdp2_tp4", "dp2_fsdp2_tp2", "tp8"):
    case(f"tfm_adam_{_s}", "transformer", f"1-layer decoder train step (Adam) under {_s}")(
        transformer_family(f"tfm_adam_{_s}", _s, "adam"))
for _s in ("fsdp8", "fsdp2_tp4", "dp2_fsdp2_tp2", "dp2_sp4"):
    case(f"tfm_scan_sgd_{_s}", "scan", f"2-layer decoder, lax.scan over stacked layers, SGD under {_s}")(
        transformer_family(f"tfm_scan_sgd_{_s}", _s, "sgd", stacked=True))
case("tfm_scan_adam_fsdp4_tp2", "scan", "2-layer decoder, scan over layers, Adam, FSDP x tensor on 4x2")(
    transformer_family("tfm_scan_adam_fsdp4_tp2", "fsdp4_tp2", "adam", stacked=True))
case("tfm_scan_bf16_fsdp2_tp4", "scan", "bf16 2-layer decoder, scan over layers, SGD, FSDP x tensor on 2x4")(
    transformer_family("tfm_scan_bf16_fsdp2_tp4", "fsdp2_tp4", "sgd", stacked=True, dtype=BF16))


# ------------------------------------------------------------------ single-feature programs
def smap(f, m, in_specs, out_specs, **kw):
    return shard_map(f, mesh=m, in_specs=in_specs, out_specs=out_specs, check_vma=False, **kw)


def wsc(x, m, spec):
    return lax.with_sharding_constraint(x, NamedSharding(m, spec))


@case("dot_contracting_allreduce", "dot", "both operands sharded on the contracting dim: partial sums + all-reduce")
def _():
    r, m = rng_for("dca"), mesh((8,), ("x",))
    return Case(lambda a, b: a @ b, [normal(r, (4, 32)), normal(r, (32, 6))], [P(None, "x"), P("x", None)], m)


@case("dot_contracting_reduce_scatter", "dot", "contracting-sharded dot whose result is sharded: reduce-scatter")
def _():
    r, m = rng_for("dcr"), mesh((8,), ("x",))
    return Case(lambda a, b: a @ b, [normal(r, (16, 32)), normal(r, (32, 8))], [P(None, "x"), P("x", None)], m,
                P("x", None))


@case("dot_both_free", "dot", "lhs rows on 'a', rhs columns on 'b' of 2x4: no communication")
def _():
    r, m = rng_for("dbf"), mesh((2, 4), ("a", "b"))
    return Case(lambda a, b: jnp.tanh(a @ b), [normal(r, (8, 12)), normal(r, (12, 16))], [P("a", None), P(None, "b")], m)


@case("dot_batch_parallel", "dot", "batched einsum sharded on the batch dim of both operands")
def _():
    r, m = rng_for("dbp"), mesh((4, 2), ("a", "b"))
    return Case(lambda a, b: jnp.einsum("bij,bjk->bik", a, b), [normal(r, (8, 4, 6)), normal(r, (8, 6, 2))],
                [P("a", None, "b"), P("a", "b", None)], m)


@case("dot_reshard_operand", "dot", "operands sharded on mismatched dims: the partitioner reshards the cheaper one")
def _():
    r, m = rng_for("dro"), mesh((8,), ("x",))
    return Case(lambda a, b: a @ b, [normal(r, (64, 16)), normal(r, (16, 8))], [P(None, "x"), P(None, "x")], m)


@case("conv_batch_and_feature", "conv", "2-D convolution, batch on 'a' and output features on 'b' (2x4)")
def _():
    r, m = rng_for("conv"), mesh((2, 4), ("a", "b"))
    f = lambda x, k: lax.conv_general_dilated(x, k, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))
    return Case(f, [normal(r, (4, 6, 6, 3)), normal(r, (3, 3, 3, 8))], [P("a"), P(None, None, None, "b")], m)


@case("conv_spatial_halo", "conv", "convolution with the spatial dim sharded 4 ways: halo exchange")
def _():
    r, m = rng_for("convh"), mesh((4, 2), ("s", "c"))
    f = lambda x, k: lax.conv_general_dilated(x, k, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))
    return Case(f, [normal(r, (2, 16, 8, 2)), normal(r, (3, 3, 2, 4))], [P(None, "s"), P()], m)


@case("maxpool_sharded_spatial", "reduce_window", "max pooling (reduce-window) over a dim sharded 4 ways")
def _():
    r, m = rng_for("pool"), mesh((4, 2), ("s", "b"))
    f = lambda x: lax.reduce_window(x, -jnp.inf, lax.max, (1, 3, 1), (1, 1, 1), "SAME")
    return Case(f, [normal(r, (4, 16, 6))], [P("b", "s")], m)


@case("reduce_sum_max_argmax", "reduce", "sum/max/argmax over a sharded dim and mean over an unsharded one")
def _():
    r, m = rng_for("red"), mesh((2, 4), ("a", "b"))
    f = lambda x: (x.sum(1), x.max(1), jnp.argmax(x, 1), x.mean(0))
    return Case(f, [normal(r, (8, 16))], [P("a", "b")], m)


@case("reduce_layernorm_3axis", "reduce", "layernorm over a feature dim sharded on a 2x2x2 mesh")
def _():
    r, m = rng_for("ln"), mesh((2, 2, 2), ("a", "b", "c"))

    def f(x, g):
        mu = x.mean(-1, keepdims=True)
        var = jnp.mean(jnp.square(x - mu), -1, keepdims=True)
        return (x - mu) * lax.rsqrt(var + 1e-5) * g
    return Case(f, [normal(r, (4, 4, 8)), normal(r, (8,))], [P("a", "b", "c"), P("c")], m)


@case("cumsum_sharded", "reduce", "cumulative sum along a sharded dim (reduce-window over a sharded dim)")
def _():
    r, m = rng_for("cum"), mesh((8,), ("x",))
    return Case(lambda x: jnp.cumsum(x, axis=0), [normal(r, (16, 3))], [P("x")], m)


@case("reshape_merge_split", "reshape", "reshape merging a sharded dim with its neighbour, then splitting")
def _():
    r, m = rng_for("rs"), mesh((2, 4), ("a", "b"))
    f = lambda x: (x.reshape(8, 32) * 2.0, x.reshape(4, 2, 4, 8).sum(1))
    return Case(f, [normal(r, (8, 4, 8))], [P("a", "b")], m)


@case("reshape_forces_reshard", "reshape", "reshape whose output sharding cannot follow the input: reshard")
def _():
    r, m = rng_for("rsf"), mesh((8,), ("x",))
    return Case(lambda x: x.reshape(16, 8).T, [normal(r, (8, 16))], [P(None, "x")], m, P("x", None))


@case("transpose_reshard", "reshape", "transpose then constrain to the other dim: all-to-all")
def _():
    r, m = rng_for("tr"), mesh((8,), ("x",))
    return Case(lambda x: wsc(x.T + 1.0, m, P("x", None)), [normal(r, (16, 8))], [P("x", None)], m)


@case("reshard_all_to_all_2d", "reshard", "resharding dim 0 to dim 1 on a 2x4 mesh via out_shardings")
def _():
    r, m = rng_for("rsa"), mesh((2, 4), ("a", "b"))
    return Case(lambda x: jnp.sin(x), [normal(r, (8, 8))], [P("b", "a")], m, P("a", "b"))


@case("reshard_replicate_to_tiled", "reshard", "replicated input, tiled output (dynamic-slice of the replicated value)")
def _():
    r, m = rng_for("rrt"), mesh((2, 2, 2), ("a", "b", "c"))
    return Case(lambda x: x * 3.0, [normal(r, (8, 4))], [P()], m, P(("a", "b"), "c"))


@case("reshard_tiled_to_replicated", "reshard", "tiled input, replicated output: all-gather")
def _():
    r, m = rng_for("rtr"), mesh((4, 2), ("a", "b"))
    return Case(lambda x: x - 1.0, [normal(r, (8, 4))], [P("a", "b")], m, P())


@case("concat_pad_slice", "slice", "concatenate, pad and slice along a sharded dim")
def _():
    r, m = rng_for("cps"), mesh((8,), ("x",))

    def f(a, b):
        c = jnp.concatenate([a, b], 0)
        return jnp.pad(c, ((2, 6), (0, 0))), c[3:11] * 2.0, a[::2]
    return Case(f, [normal(r, (16, 4)), normal(r, (8, 4))], [P("x"), P("x")], m)


@case("shift_difference_tiled", "slice", "x[1:] - x[:-1] along a tiled dim: each device takes one row from a neighbour")
def _():
    r, m = rng_for("sdt"), mesh((8,), ("x",))
    return Case(lambda x: x[1:] - x[:-1], [normal(r, (16, 4))], [P("x")], m)


@case("pad_tiled_nonzero", "slice", "pad a tiled dim with a nonzero value into an uneven tiling: halos and a mask")
def _():
    r, m = rng_for("ptn"), mesh((8,), ("x",))
    return Case(lambda x: jnp.pad(x, ((1, 3), (0, 0)), constant_values=1.5) * 2.0,
                [normal(r, (16, 4))], [P("x")], m)


@case("causal_shift_tiled", "slice", "a causal shift (pad 2 rows in front, drop the last 2) along a tiled sequence dim")
def _():
    r, m = rng_for("cst"), mesh((2, 4), ("a", "b"))
    return Case(lambda x: jnp.pad(x, ((0, 0), (2, 0), (0, 0)))[:, :-2] + x,
                [normal(r, (4, 32, 8))], [P("a", "b")], m, P("a", "b"))


@case("strided_slice_tiled", "slice", "x[1::3] along a tiled dim: one row from each device's shard, none moved")
def _():
    r, m = rng_for("sst"), mesh((8,), ("x",))
    return Case(lambda x: x[1::3] * 3.0, [normal(r, (24, 4))], [P("x")], m, P("x"))


@case("slice_whole_into_tiled", "slice", "slice a replicated array into a tiled result: each device slices its tile, nothing moves")
def _():
    r, m = rng_for("swt"), mesh((8,), ("x",))
    return Case(lambda x: wsc(x[2:] * 2.0, m, P("x")), [normal(r, (18, 4))], [P()], m)


@case("last_token_seq_tiled", "slice", "the last position of a sequence tiled 8 ways (x[:, -1]): one device holds it")
def _():
    r, m = rng_for("ltst"), mesh((8,), ("x",))
    return Case(lambda x: x[:, -1] * 2.0, [normal(r, (4, 16, 8))], [P(None, "x")], m)


@case("first_tokens_seq_tiled", "slice", "the first 3 positions of a sequence tiled 8 ways, then merged into one dim: XLA trims the shards past the rows read, and replicates the 3-row dim by an all-reduce")
def _():
    r, m = rng_for("ftst"), mesh((8,), ("x",))
    return Case(lambda x: (x[:, :3] * 2.0).reshape(4, 24), [normal(r, (4, 16, 8))], [P(None, "x")], m)


@case("reshape_merge_uneven", "reshape", "rows tiled unevenly (10 over 4) merged with the columns into one dim tiled 4 ways: XLA moves the misaligned rows with a halo exchange")
def _():
    r, m = rng_for("rmu"), mesh((4,), ("x",))
    return Case(lambda x: wsc((x[:10] * 2.0).reshape(80), m, P("x")) + 1.0, [normal(r, (12, 8))], [P("x")], m)


@case("reshape_split_uneven", "reshape", "a dim of 80 tiled 4 ways split into 10 rows tiled 4 ways (unevenly): XLA gives each device the elements of its rows with a halo exchange, then reshapes")
def _():
    r, m = rng_for("rsu"), mesh((4,), ("x",))
    return Case(lambda x: wsc((x * 2.0).reshape(10, 8), m, P("x", None)) + 1.0, [normal(r, (80,))], [P("x")], m)


@case("last_rows_padded_tiled", "slice", "the last 2 positions of a sequence tiled 8 ways, padded by 3 ones at the end and kept tiled: a trimmed exchange whose padding is masked")
def _():
    r, m = rng_for("lrpt"), mesh((8,), ("x",))
    f = lambda x: wsc(jnp.pad(x[:, 14:], ((0, 0), (0, 3), (0, 0)), constant_values=1.0), m, P(None, "x")) * 2.0
    return Case(f, [normal(r, (4, 16, 8))], [P(None, "x")], m)


@case("uneven_tail_padded_tiled", "slice", "the last 2 of 5 rows tiled 4 ways unevenly, padded by a row of 7s and kept tiled: the trimmed exchange masks the uneven shard's padding first")
def _():
    r, m = rng_for("utpt"), mesh((4,), ("x",))
    def f(x):
        y = wsc(x[:5] * 2.0, m, P("x"))
        return wsc(jnp.pad(y[3:], ((0, 1), (0, 0)), constant_values=7.0), m, P("x")) + 1.0
    return Case(f, [normal(r, (8, 4))], [P("x")], m)


@case("reverse_uneven_tiled", "slice", "flip a dim tiled unevenly (10 rows over 4): shards pad on the left with a halo, then change places")
def _():
    r, m = rng_for("rut"), mesh((4,), ("x",))
    return Case(lambda x: jnp.flip(x[:10] * 2.0, 0) + 1.0, [normal(r, (12, 4))], [P("x")], m)


@case("concat_tiled_wide", "slice", "concatenate two arrays along a dim tiled 8 ways while the other dim could take the tiles")
def _():
    r, m = rng_for("ctw"), mesh((8,), ("x",))
    return Case(lambda a, b: jnp.concatenate([a, b], 0) * 2.0, [normal(r, (16, 64)), normal(r, (8, 64))],
                [P("x"), P("x")], m)


@case("reverse_tiled", "slice", "flip both dims of an array tiled on a 2x4 mesh: shards change places")
def _():
    r, m = rng_for("rvt"), mesh((2, 4), ("a", "b"))
    return Case(lambda x: jnp.flip(x, (0, 1)) + 1.0, [normal(r, (16, 8))], [P("a", "b")], m, P("a", "b"))


@case("dynamic_slice_update", "slice", "dynamic-slice and dynamic-update-slice with a runtime index on a sharded dim")
def _():
    r, m = rng_for("dsu"), mesh((4, 2), ("a", "b"))

    def f(x, i, u):
        return lax.dynamic_slice_in_dim(x, i, 4, 0), lax.dynamic_update_slice_in_dim(x, u, i, 0)
    return Case(f, [normal(r, (16, 4)), np.int32(5), normal(r, (3, 4))], [P("a", "b"), P(), P()], m)


@case("sort_topk", "sort", "sort along a sharded dim; top-k along an unsharded dim with sharded batch")
def _():
    r, m = rng_for("sort"), mesh((2, 4), ("a", "b"))
    f = lambda x, y: (jnp.sort(x, axis=1), lax.top_k(y, 3))
    return Case(f, [normal(r, (4, 16)), normal(r, (8, 10))], [P("a", "b"), P("b", None)], m)


@case("sort_tiled_rows_move", "sort", "sort along a dim tiled 8 ways while the other dim's 16 rows could take the tiles")
def _():
    r, m = rng_for("strm"), mesh((8,), ("x",))
    return Case(lambda x: jnp.sort(x, axis=1) * 2.0, [normal(r, (16, 64))], [P(None, "x")], m)


@case("argsort_sharded", "sort", "argsort (variadic sort with an iota) along a sharded dim")
def _():
    r, m = rng_for("asort"), mesh((8,), ("x",))
    return Case(lambda x: jnp.argsort(x, axis=0), [normal(r, (16, 2))], [P("x")], m)


@case("cond_sharded", "control", "lax.cond on a data-dependent predicate with sharded operands")
def _():
    r, m = rng_for("cond"), mesh((2, 4), ("a", "b"))

    def f(x, w):
        return lax.cond(x.sum() > 0, lambda: jnp.tanh(x @ w), lambda: (x @ w) * 0.5)
    return Case(f, [normal(r, (8, 8)), normal(r, (8, 8))], [P("a", None), P(None, "b")], m)


@case("switch_sharded", "control", "lax.switch over three branches, index from data")
def _():
    r, m = rng_for("switch"), mesh((8,), ("x",))

    def f(i, x):
        return lax.switch(i, [lambda v: v + 1.0, lambda v: v.sum(0, keepdims=True) * v, lambda v: jnp.roll(v, 1, 0)], x)
    return Case(f, [np.int32(2), normal(r, (16, 4))], [P(), P("x")], m)


@case("while_fori_sharded", "control", "fori_loop carrying a sharded matrix through a sharded matmul")
def _():
    r, m = rng_for("while"), mesh((4, 2), ("a", "b"))

    def f(x, w):
        return lax.fori_loop(0, 3, lambda i, c: jnp.tanh(c @ w), x)
    return Case(f, [normal(r, (8, 8)), normal(r, (8, 8), 0.3)], [P("a", None), P(None, "b")], m)


@case("scan_rnn", "scan", "lax.scan over a sequence with sharded batch and sharded hidden weight")
def _():
    r, m = rng_for("rnn"), mesh((2, 4), ("data", "model"))

    def f(xs, w, u):
        def cell(h, x):
            h = jnp.tanh(h @ w + x @ u)
            return h, h.sum(-1)
        return lax.scan(cell, jnp.zeros((xs.shape[1], w.shape[0])), xs)
    return Case(f, [normal(r, (5, 4, 6)), normal(r, (8, 8), 0.3), normal(r, (6, 8), 0.3)],
                [P(None, "data"), P(None, "model"), P(None, "model")], m)


@case("scan_carry_body_tiling", "scan",
      "a scan carry whose body tiles it (a batched dot) on the axis the init tiles another dim on: "
      "Shardy walks the body before the init-to-carry edge, so the carry keeps the body's tiling")
def _():
    r, m = rng_for("carry"), mesh((2,), ("a",))

    def f(a0, m0, u0):
        def body(c, _):
            x, u = c
            return (-x, u), jnp.einsum("bi,ji->ibj", x, u)
        (x, _), ys = lax.scan(body, (a0 @ m0, u0), None, length=4)
        return -x, ys
    return Case(f, [normal(r, (8, 4)), normal(r, (4, 16)), normal(r, (4, 16))],
                [P("a", None), P(), P(None, "a")], m)


@case("constant_shared_by_two_tilings", "elementwise",
      "one iota constant read by two products whose other operands are tiled on different dims: "
      "Shardy gives each use its own copy of the constant, so neither is resharded")
def _():
    r, m = rng_for("split"), mesh((4,), ("a",))

    def f(x, y):
        z = jnp.arange(64, dtype=jnp.float32).reshape(8, 8)
        return jnp.sin(x * z), jnp.cos(y * z)
    return Case(f, [normal(r, (8, 8)), normal(r, (8, 8))], [P("a", None), P(None, "a")], m)


@case("constraint_unconstrained_dim", "constraint",
      "with_sharding_constraint tiling rows and leaving columns P.UNCONSTRAINED on a value whose "
      "input tiles columns: the open dim keeps the column tiling, nothing is resharded")
def _():
    r, m = rng_for("open"), mesh((2, 4), ("a", "b"))

    def f(x):
        y = jax.lax.with_sharding_constraint(jnp.sin(x), NamedSharding(m, P("a", P.UNCONSTRAINED)))
        return y * 2
    return Case(f, [normal(r, (8, 16))], [P(None, "b")], m)


@case("embedding_vocab_sharded", "embedding", "embedding lookup, table sharded on vocab, ids sharded on batch")
def _():
    r, m = rng_for("emb1"), mesh((2, 4), ("data", "model"))
    ids = r.integers(0, 32, (8, 4)).astype(np.int32)
    return Case(lambda t, i: jnp.take(t, i, axis=0), [normal(r, (32, 6)), ids], [P("model", None), P("data")], m)


@case("embedding_vocab_grad", "embedding", "loss and gradient of a lookup in a vocab-sharded table (ids out of range too)")
def _():
    r, m = rng_for("emb_vgrad"), mesh((2, 4), ("data", "model"))
    ids = r.integers(-2, 34, (8, 4)).astype(np.int32)

    def f(t, i):
        loss = lambda t: (jnp.take(t, i, axis=0, mode="fill", fill_value=0.0) ** 2).sum()
        return jax.value_and_grad(loss)(t)
    return Case(f, [normal(r, (32, 6)), ids], [P("model", None), P("data")], m)


@case("logits_label_lookup", "embedding", "log-probabilities of the labels from vocab-sharded logits (take_along_axis)")
def _():
    r, m = rng_for("lbl"), mesh((2, 4), ("data", "model"))
    labels = r.integers(0, 16, (4, 6)).astype(np.int32)

    def f(logits, y):
        logp = jax.nn.log_softmax(logits, -1)
        return jnp.take_along_axis(logp, y[..., None], -1)[..., 0]
    return Case(f, [normal(r, (4, 6, 16)), labels], [P("data", None, "model"), P("data")], m)


@case("argmax_uneven_vocab", "reduce", "argmax and max over a dim of 10 split 4 ways (padded shards)")
def _():
    r, m = rng_for("amx"), mesh((4, 2), ("a", "b"))

    def f(x):
        x = wsc(jnp.tanh(x), m, P("b", "a"))
        return jnp.argmax(x, -1), x.max(-1)
    return Case(f, [normal(r, (6, 10))], [P("b", None)], m)


@case("embedding_feature_sharded", "embedding", "embedding lookup, table sharded on the feature dim")
def _():
    r, m = rng_for("emb2"), mesh((8,), ("x",))
    ids = r.integers(0, 10, (6,)).astype(np.int32)
    return Case(lambda t, i: t[i] * 2.0, [normal(r, (10, 16)), ids], [P(None, "x"), P()], m)


@case("embedding_grad_scatter", "embedding", "gradient of an embedding lookup: scatter-add into a sharded table")
def _():
    r, m = rng_for("emb3"), mesh((4, 2), ("data", "model"))
    ids = r.integers(0, 16, (8, 3)).astype(np.int32)

    def f(t, i):
        return jax.grad(lambda tt: jnp.sum(jnp.sin(jnp.take(tt, i, axis=0))))(t)
    return Case(f, [normal(r, (16, 4)), ids], [P(None, "model"), P("data")], m)


@case("scatter_add_sharded", "embedding", "x.at[idx].add(upd) with the operand sharded on the scattered dim")
def _():
    r, m = rng_for("scat"), mesh((8,), ("x",))
    idx = r.integers(0, 16, (12,)).astype(np.int32)
    return Case(lambda x, i, u: x.at[i].add(u), [normal(r, (16, 3)), idx, normal(r, (12, 3))], [P("x"), P(), P()], m)


def moe_dispatch(x, gate, E, C):
    """GShard top-1 dispatch per token group: x [G, S, D] -> dispatch mask [G, S, E, C], gate probs."""
    logits = jnp.einsum("gsd,de->gse", x, gate)
    onehot = jax.nn.one_hot(jnp.argmax(logits, -1), E)
    pos = (jnp.cumsum(onehot, 1) - 1.0) * onehot  # position of each token in its expert's buffer
    disp = onehot[..., None] * jax.nn.one_hot(pos.sum(-1), C)[:, :, None, :]
    return disp, jax.nn.softmax(logits, -1).max(-1, keepdims=True)


def moe_layer(x, p, m, group_spec, expert_spec, E, C):
    disp, prob = moe_dispatch(x, p["gate"], E, C)
    # Groups are sharded like the tokens; the constraint moves them to the experts' shards: all-to-all.
    by_group = P(None, *group_spec)  # [E, G, C, D] sharded on G, as the tokens are
    xe = wsc(wsc(jnp.einsum("gsec,gsd->egcd", disp, x), m, by_group), m, expert_spec)
    h = jax.nn.relu(jnp.einsum("egcd,edf->egcf", xe, p["w1"]))
    ye = wsc(wsc(jnp.einsum("egcf,efd->egcd", h, p["w2"]), m, expert_spec), m, by_group)  # and back
    y = wsc(jnp.einsum("gsec,egcd->gsd", disp, ye), m, group_spec)
    return y * prob


@case("moe_dispatch_all_to_all", "moe", "GShard-style MoE layer: token groups on 'expert', dispatched to sharded experts and back (all-to-all)")
def _():
    r, m = rng_for("moe"), mesh((8,), ("expert",))
    E, G, S, D, F, C = 8, 8, 8, 8, 16, 4
    p = {"gate": normal(r, (D, E)), "w1": normal(r, (E, D, F), 0.3), "w2": normal(r, (E, F, D), 0.3)}
    f = lambda x, gate, w1, w2: moe_layer(x, {"gate": gate, "w1": w1, "w2": w2}, m, P("expert"),  # noqa: E731
                                           P("expert"), E, C)
    return Case(f, [normal(r, (G, S, D)), p["gate"], p["w1"], p["w2"]],
                [P("expert"), P(), P("expert"), P("expert")], m)


@case("moe_train_ep2_dp4", "moe", "MoE layer train step (SGD): groups on data x expert (4x2), experts on 'expert'")
def _():
    r, m = rng_for("moe2"), mesh((4, 2), ("data", "expert"))
    E, G, S, D, F, C = 4, 8, 4, 8, 8, 4

    def loss(p, x, y):
        out = moe_layer(x, p, m, P(("data", "expert")), P("expert", "data"), E, C)
        return jnp.mean(jnp.square(out - y))
    p = {"gate": normal(r, (D, E)), "w1": normal(r, (E, D, F), 0.3), "w2": normal(r, (E, F, D), 0.3)}
    ps = {"gate": P(), "w1": P("expert"), "w2": P("expert")}
    bs = P(("data", "expert"))
    return flat_case(sgd(loss), (p, normal(r, (G, S, D)), normal(r, (G, S, D))), (ps, bs, bs), m)


@case("moe_shard_map_a2a", "moe", "expert parallelism written with shard_map all_to_all inside a jit")
def _():
    r, m = rng_for("moe3"), mesh((8,), ("expert",))

    def body(x, w):  # x: [8 tokens-per-dest, D] per device; w: [1, D, D]
        y = lax.all_to_all(x, "expert", 0, 0, tiled=True)
        y = jnp.tanh(y @ w[0])
        return lax.all_to_all(y, "expert", 0, 0, tiled=True)
    f = smap(body, m, (P("expert"), P("expert")), P("expert"))
    return Case(lambda x, w: f(x * 2.0, w) + 1.0, [normal(r, (64, 4)), normal(r, (8, 4, 4))],
                [P("expert"), P("expert")], m)


@case("shard_map_matmul_psum", "shard_map", "shard_map region (manual matmul + psum) between automatic ops")
def _():
    r, m = rng_for("smm"), mesh((8,), ("x",))
    inner = smap(lambda a, b: lax.psum(a @ b, "x"), m, (P(None, "x"), P("x", None)), P())
    return Case(lambda a, b: jnp.tanh(inner(jnp.sin(a), b)).sum(0), [normal(r, (4, 16)), normal(r, (16, 4))],
                [P(None, "x"), P("x", None)], m)


@case("shard_map_partial_manual", "shard_map", "shard_map manual over 'data' only, 'model' stays automatic")
def _():
    r, m = rng_for("smp"), mesh((2, 4), ("data", "model"))
    inner = smap(lambda x, w: lax.pmean(jnp.tanh(x @ w), "data"), m, (P("data"), P()), P(), axis_names={"data"})
    return Case(lambda x, w: inner(x, w) * 2.0, [normal(r, (8, 8)), normal(r, (8, 8))],
                [P("data", None), P(None, "model")], m)


@case("shard_map_fsdp_manual", "shard_map", "manual FSDP in shard_map: all_gather the weight, psum_scatter the gradient (reduce-scatter)")
def _():
    r, m = rng_for("smf"), mesh((8,), ("fsdp",))

    def body(x, w):
        full = lax.all_gather(w, "fsdp", axis=0, tiled=True)
        g = x.T @ jnp.tanh(x @ full)
        return lax.psum_scatter(g, "fsdp", scatter_dimension=0, tiled=True)
    f = smap(body, m, (P("fsdp"), P("fsdp")), P("fsdp"))
    return Case(f, [normal(r, (16, 8)), normal(r, (8, 8))], [P("fsdp"), P("fsdp")], m)


@case("gather_index_parallel", "embedding", "take_along_axis with operand and indices both sharded on the batch dim")
def _():
    r, m = rng_for("gip"), mesh((2, 4), ("a", "b"))
    idx = r.integers(0, 12, (8, 5)).astype(np.int32)
    return Case(lambda x, i: jnp.take_along_axis(x, i, axis=1), [normal(r, (8, 12)), idx], [P("b"), P("b")], m)


@case("shard_map_ring_3axis", "shard_map", "shard_map over a 2x2x2 mesh: ppermute ring on one axis, psum on two")
def _():
    r, m = rng_for("smr"), mesh((2, 2, 2), ("a", "b", "c"))

    def body(x):
        y = lax.ppermute(x, "c", [(0, 1), (1, 0)])
        return lax.psum(y * x, ("a", "b"))
    f = smap(body, m, (P("a", "b", "c"),), P(None, None, "c"))
    return Case(f, [normal(r, (4, 4, 4))], [P("a", "b", "c")], m)


@case("uneven_6_over_4", "uneven", "a dim of 6 split 4 ways by a sharding constraint (padded shards)")
def _():
    r, m = rng_for("u6"), mesh((4, 2), ("a", "b"))

    def f(x, w):
        h = wsc(jnp.tanh(x), m, P("a", "b"))
        return h @ w, h.sum(0)
    return Case(f, [normal(r, (6, 8)), normal(r, (8, 4))], [P(None, "a"), P()], m)


@case("uneven_10_over_4_reduce", "uneven", "a dim of 10 split 4 ways, reduced over (XLA masks the padding)")
def _():
    r, m = rng_for("u10"), mesh((4, 2), ("a", "b"))

    def f(x):
        y = wsc(jnp.exp(x), m, P("a", None))
        return y.sum(0), y.max(0), jnp.cumsum(y, 0)
    return Case(f, [normal(r, (10, 4))], [P(None, "b")], m)


@case("uneven_matmul_contracting", "uneven", "contracting dim of 10 split 4 ways inside a matmul")
def _():
    r, m = rng_for("u10m"), mesh((4, 2), ("a", "b"))

    def f(x, w):
        return wsc(x, m, P(None, "a")) @ wsc(w, m, P("a", None))
    return Case(f, [normal(r, (4, 10)), normal(r, (10, 6))], [P(), P()], m)


@case("uneven_seq_attention", "uneven", "attention with a sequence of 6 split 4 ways")
def _():
    r, m = rng_for("useq"), mesh((4, 2), ("seq", "b"))

    def f(q, k, v):
        q = wsc(q, m, P(None, "seq"))
        s = jnp.einsum("bqd,btd->bqt", q, k)
        return jnp.einsum("bqt,btd->bqd", jax.nn.softmax(s, -1), v)
    return Case(f, [normal(r, (2, 6, 4)), normal(r, (2, 6, 4)), normal(r, (2, 6, 4))], [P(), P(), P()], m)


@case("scatter_index_parallel", "embedding", "batched scatter-add (vmap) with operand, indices and updates sharded on the batch dim")
def _():
    r, m = rng_for("sip"), mesh((4, 2), ("a", "b"))
    idx = r.integers(0, 6, (8, 5)).astype(np.int32)
    f = jax.vmap(lambda x, i, u: x.at[i].add(u))
    return Case(f, [normal(r, (8, 6, 2)), idx, normal(r, (8, 5, 2))], [P("a"), P("a"), P("a")], m)


@case("rng_bit_generator_sharded", "misc", "RBG random bits (rng-bit-generator) for a sharded result, then dropout")
def _():
    r, m = rng_for("rbg"), mesh((2, 4), ("a", "b"))

    def f(x, key):
        k = jax.random.wrap_key_data(key, impl="rbg")
        return jnp.where(jax.random.bernoulli(k, 0.7, x.shape), x / 0.7, 0.0)
    return Case(f, [normal(r, (8, 16)), np.array([1, 2, 3, 4], np.uint32)], [P("a", "b"), P()], m, P("a", "b"))


@case("tfm_moe_sgd_dp2_ep4", "moe", "decoder block whose MLP is a top-1 MoE: data (2) x expert (4), SGD step")
def _():
    r, m = rng_for("tmoe"), mesh((2, 4), ("data", "expert"))
    E, G, S, D, F, C, V = 4, 8, 4, 8, 16, 4, 16

    def loss(p, tokens):
        x = jnp.take(p["embed"], tokens, axis=0)  # [G, S, D]
        h = rms(x, p["norm"])
        s = jnp.einsum("gqd,gtd->gqt", h @ p["wq"], h @ p["wk"]) / np.sqrt(D)
        x = x + jax.nn.softmax(jnp.where(jnp.tril(jnp.ones((S, S), bool)), s, -1e9), -1) @ (h @ p["wv"])
        x = x + moe_layer(rms(x, p["norm"]), p, m, P(("data", "expert")), P("expert", "data"), E, C)
        logp = jax.nn.log_softmax(x @ p["embed"].T, -1)
        return -jnp.mean(jnp.take_along_axis(logp, jnp.roll(tokens, -1, 1)[..., None], -1))
    p = {"embed": normal(r, (V, D), 0.5), "norm": np.ones((D,), np.float32), "wq": normal(r, (D, D), 0.3),
         "wk": normal(r, (D, D), 0.3), "wv": normal(r, (D, D), 0.3), "gate": normal(r, (D, E)),
         "w1": normal(r, (E, D, F), 0.3), "w2": normal(r, (E, F, D), 0.3)}
    ps = {k: P() for k in p} | {"w1": P("expert"), "w2": P("expert"), "embed": P(None, "expert")}
    tokens = r.integers(0, V, (G, S)).astype(np.int32)
    return flat_case(sgd(loss), (p, tokens), (ps, P(("data", "expert"))), m)


@case("iota_mask_rng", "misc", "iota masks and random dropout bits on a sharded activation")
def _():
    r, m = rng_for("iota"), mesh((8,), ("x",))

    def f(x, key):
        mask = jnp.arange(x.shape[0])[:, None] > jnp.arange(x.shape[1])[None, :]
        keep = jax.random.bernoulli(jax.random.wrap_key_data(key), 0.5, x.shape)
        return jnp.where(mask & keep, x, 0.0)
    return Case(f, [normal(r, (16, 8)), np.array([0, 7], np.uint32)], [P("x"), P()], m)


@case("broadcast_sharded", "misc", "broadcast of a sharded vector into a 3-D sharded result, then transpose")
def _():
    r, m = rng_for("bc"), mesh((2, 2, 2), ("a", "b", "c"))
    f = lambda v: jnp.transpose(jnp.broadcast_to(v[None, :, None], (4, 8, 6)), (2, 0, 1)) * 2.0
    return Case(f, [normal(r, (8,))], [P(("a", "b"))], m)


# ------------------------------------------------------------------ writing
def enc(a):
    a = np.asarray(a)
    if a.dtype.name == "bfloat16":
        return a.view(np.uint16), "bf16"
    return a, a.dtype.name


def dump_file(kind):
    hits = sorted(glob.glob(os.path.join(DUMP, f"*.spmd-partitioner.after_{kind}.*.txt")))
    if len(hits) != 1:
        raise RuntimeError(f"expected one XLA dump after {kind}, found {hits}")
    return open(hits[0]).read()


def strip_debug_info(hlo):
    """Drops `metadata={...}` and the FileNames/.../StackFrames section XLA's dumps carry: they are
    source locations only (no semantics) and are most of a dump's bytes."""
    hlo = re.sub(r', metadata=\{(?:[^{}"]|"(?:[^"\\]|\\.)*")*\}', "", hlo)
    hlo = re.sub(r"\n(?:FileNames|FunctionNames|FileLocations|StackFrames)\n(?:[^\n]+\n)*", "\n", hlo)
    return re.sub(r"\n{3,}", "\n\n", hlo)


def write(d, name, text):
    with open(os.path.join(d, name), "w") as fh:
        fh.write(text)


def run_case(name, category, desc, build):
    c = build()
    shardings = [NamedSharding(c.mesh, s) for s in c.specs]
    out_sh = NamedSharding(c.mesh, c.out_specs) if isinstance(c.out_specs, P) else c.out_specs

    def fn(*xs):
        return c.f(*xs)
    fn.__name__ = name
    jf = jax.jit(fn, in_shardings=shardings, out_shardings=out_sh) if out_sh is not None else \
        jax.jit(fn, in_shardings=shardings)
    placed = [jax.device_put(a, s) for a, s in zip(c.ins, shardings)]
    lowered = jf.lower(*placed)
    shutil.rmtree(DUMP, ignore_errors=True)
    compiled = lowered.compile()
    propagated, partitioned = dump_file("shardy-xla"), dump_file("spmd-partitioning")
    result = compiled(*placed)
    outs = [np.asarray(x) for x in jax.tree_util.tree_leaves(result)]
    out_leaves = jax.tree_util.tree_leaves(result)
    n = int(np.prod(c.mesh.devices.shape))

    d = os.path.join(OUT, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    write(d, "pre.hlo", lowered.as_text(dialect="hlo"))
    write(d, "xla_propagated.hlo", strip_debug_info(propagated))
    write(d, "xla_partitioned.hlo", strip_debug_info(partitioned))
    write(d, "post.hlo", strip_debug_info(compiled.as_text()))
    st = {"num_devices": n, "mesh": {"shape": list(c.mesh.devices.shape), "axis_names": list(c.mesh.axis_names)},
          "source": "xla_partitioned.hlo", **structure(partitioned, n)}
    write(d, "structure.json", json.dumps(st, indent=1) + "\n")
    ins_e, outs_e = [enc(a) for a in c.ins], [enc(a) for a in outs]
    np.savez(os.path.join(d, "inputs.npz"), **{f"arg{i}": a for i, (a, _) in enumerate(ins_e)})
    np.savez(os.path.join(d, "outputs.npz"), **{f"out{i}": a for i, (a, _) in enumerate(outs_e)})
    meta = {
        "description": desc,
        "category": category,
        "mesh": st["mesh"],
        "inputs": [{"shape": list(np.shape(a)), "dtype": t, "sharding": str(s),
                    "hlo_sharding": str(sh._to_xla_hlo_sharding(np.ndim(a)))}
                   for (a, t), s, sh in zip(ins_e, c.specs, shardings)],
        "outputs": [{"shape": list(np.shape(a)), "dtype": t, "sharding": str(leaf.sharding.spec),
                     "hlo_sharding": str(leaf.sharding._to_xla_hlo_sharding(leaf.ndim))}
                    for (a, t), leaf in zip(outs_e, out_leaves)],
        "jax_version": jax.__version__,
        "num_devices": n,
        "sharded": True,
        "generator": "tools/gen_cases/partition.py",
    }
    write(d, "meta.json", json.dumps(meta, indent=1) + "\n")
    print("ok", name, flush=True)


def selected(name, prefixes):
    return not prefixes or any(name.startswith(p) for p in prefixes)


def main():
    prefixes = sys.argv[1:]
    os.makedirs(OUT, exist_ok=True)
    failed = []
    for name, category, desc, build in CASES:
        if selected(name, prefixes):
            try:
                run_case(name, category, desc, build)
            except Exception as e:  # report every broken case, not just the first
                failed.append(name)
                print("FAILED", name, type(e).__name__, str(e)[:400], flush=True)
    failed += tpu_lowerings.main(prefixes)
    shutil.rmtree(DUMP, ignore_errors=True)
    if failed:
        sys.exit(f"{len(failed)} cases failed: {failed}")


if __name__ == "__main__":
    main()
