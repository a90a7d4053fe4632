"""A self-written JAX rebuild of the MaxText dense decoder used by the published runs.

Architecture (MaxText commit 76bd53b0f, as described in measured_dev.json):
decoder-only, PaLM-style parallel block (one RMSNorm feeding attention and MLP,
both outputs added to the residual), multi-head attention with head_dim 256,
rotary embeddings, RMSNorm on q/k/v, relu MLP (wi, wo), embedding shared with
the output layer (logits in f32), f32 parameters and bf16 activations, scan over
layers with full rematerialization, AdamW with global-norm clipping.

GPT-3 175B (MLPerf v4.0, MaxText `decoder_block: gpt3`): sequential pre-LayerNorm
block with biases, gelu MLP, learned position embedding, shared embedding for the
logits. Its AQT int8 training is modelled as int8 x int8 -> int32 dots for every dense layer
weight, forward and both backward matmuls, with per-row/column max-abs scales; attention and the
logits stay bf16/f32 (assumption: AQT's exact scale granularity and calibration are not rebuilt).

Sharding follows MaxText's logical axis rules: mesh axes (data, fsdp, tensor);
parameters' embed dimension over fsdp, heads/mlp/vocab over tensor; the batch over
(data, fsdp); the data axis spans slices over DCN in multi-slice runs.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax.ad_checkpoint import checkpoint_name
from jax.sharding import PartitionSpec as P

BATCH_AXES = ("data", "fsdp")
# The residual stream between layers (what full remat saves per layer): batch over (data, fsdp),
# embed over tensor (MaxText's activation_batch / activation_embed rules).
RESIDUAL = (BATCH_AXES, None, "tensor")


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    # "maxtext": parallel block of MaxText 76bd53b0f (rotary, q/k/v RMSNorm);
    # "maxtext_v4": the same block at 281e04bf3 (the v4 runs): T5 relative position biases and
    #   q/k RMSNorm inside plain bf16 attention, no rotary;
    # "gpt3": MaxText's sequential GPT-3 block.
    kind: str
    emb: int
    heads: int
    head_dim: int
    mlp: int
    layers: int
    vocab: int
    # AQT-style int8 matmuls (forward and both backward dots) for the layers' dense weights.
    int8_matmuls: bool = False

    def param_count(self) -> int:
        """Trainable parameters, as MaxText counts them (every array in the state)."""
        return sum(math.prod(s.shape) for s in jax.tree.leaves(param_shapes(self)))


@dataclasses.dataclass(frozen=True)
class RunConfig:
    model: ModelConfig
    per_device_batch: int
    seq: int
    data: int  # data-parallel degree: across slices (DCN) for MaxText multi-slice, ICI for GPT-3
    ici_fsdp: int
    ici_tensor: int
    flash: bool  # Pallas TPU flash attention (only in the pre-partition program)
    iota_embed: bool = False  # token embedding as a one-hot matmul (MaxText's use_iota_embed)
    remat: str = "full"  # a key of REMAT_SAVED

    @property
    def chips(self) -> int:
        return self.data * self.ici_fsdp * self.ici_tensor

    @property
    def global_batch(self) -> int:
        return self.per_device_batch * self.chips

    @property
    def mesh_shape(self) -> tuple[int, int, int]:
        return (self.data, self.ici_fsdp, self.ici_tensor)


MESH_AXES = ("data", "fsdp", "tensor")


def maxtext_scaled(scale: int) -> ModelConfig:
    """MaxText's global_parameter_scale (pyconfig.get_individual_scales of that commit)."""
    log2 = int(round(math.log2(scale)))
    assert 2**log2 == scale, "scale must be a power of two"
    b, r = divmod(log2, 3)
    return ModelConfig(
        kind="maxtext",
        emb=2560 * 2 ** (b + (r > 1)),
        heads=8 * 2 ** (b + (r > 0)),
        head_dim=256,
        mlp=8192 * 2 ** (b + (r > 0)),
        layers=16 * 2**b,
        vocab=32768,
    )


GPT3_175B = ModelConfig(
    kind="gpt3", emb=12288, heads=96, head_dim=128, mlp=49152, layers=96, vocab=50304, int8_matmuls=True
)
GPT3_MAX_POSITIONS = 2048


# ---------------------------------------------------------------- parameters


def QKV_SHAPES(cfg: ModelConfig, s) -> dict:  # noqa: N802
    """The attention input projections. GPT-3 has one fused q/k/v kernel (MaxText's gpt3-175b.yml
    sets `fused_qkv: True`; its kernel axes are (embed, qkv, heads, kv)). Here it is laid out
    (embed, heads, qkv, kv): the same matmul with the same tiling, whose 2-D view for the int8
    path keeps the tensor-sharded heads major."""
    L, E, H, D = cfg.layers, cfg.emb, cfg.heads, cfg.head_dim
    if cfg.kind == "gpt3":
        return {"wqkv": s(L, E, H, 3, D)}
    return {"wq": s(L, E, H, D), "wk": s(L, E, H, D), "wv": s(L, E, H, D)}


def param_shapes(cfg: ModelConfig) -> dict:
    """Shapes (f32) of every parameter; per-layer weights are stacked on a leading layer axis."""
    L, E, H, D, M = cfg.layers, cfg.emb, cfg.heads, cfg.head_dim, cfg.mlp
    f32 = jnp.float32
    s = lambda *shape: jax.ShapeDtypeStruct(shape, f32)  # noqa: E731
    layer = {
        "norm": s(L, E),
        **QKV_SHAPES(cfg, s),
        "wo": s(L, H, D, E),
        "wi": s(L, E, M),
        "wo_mlp": s(L, M, E),
    }
    top = {"embedding": s(cfg.vocab, E), "final_norm": s(E)}
    if cfg.kind == "maxtext":
        layer.update(q_norm=s(L, D), k_norm=s(L, D), v_norm=s(L, D))
    elif cfg.kind == "maxtext_v4":
        layer.update(q_norm=s(L, D), k_norm=s(L, D), rel_embedding=s(L, H, T5_BUCKETS))
    else:
        layer.update(
            norm_bias=s(L, E),
            mlp_norm=s(L, E),
            mlp_norm_bias=s(L, E),
            bqkv=s(L, H, 3, D),
            bo=s(L, E),
            bi=s(L, M),
            bo_mlp=s(L, E),
        )
        top.update(final_norm_bias=s(E), position=s(GPT3_MAX_POSITIONS, E))
    return {"layers": layer, **top}


def param_specs(cfg: ModelConfig) -> dict:
    """PartitionSpecs: embed over fsdp, heads/mlp/vocab over tensor (MaxText's rules)."""
    if cfg.kind == "gpt3":
        qkv = {"wqkv": P(None, "fsdp", "tensor", None, None)}
    else:
        qkv = {name: P(None, "fsdp", "tensor", None) for name in ("wq", "wk", "wv")}
    layer = {
        "norm": P(None, "fsdp"),
        **qkv,
        "wo": P(None, "tensor", None, "fsdp"),
        "wi": P(None, "fsdp", "tensor"),
        "wo_mlp": P(None, "tensor", "fsdp"),
    }
    top = {"embedding": P("tensor", "fsdp"), "final_norm": P("fsdp")}
    if cfg.kind == "maxtext":
        layer.update(q_norm=P(None, None), k_norm=P(None, None), v_norm=P(None, None))
    elif cfg.kind == "maxtext_v4":
        layer.update(q_norm=P(None, None), k_norm=P(None, None), rel_embedding=P(None, "tensor", None))
    else:
        layer.update(
            norm_bias=P(None, "fsdp"),
            mlp_norm=P(None, "fsdp"),
            mlp_norm_bias=P(None, "fsdp"),
            bqkv=P(None, "tensor", None, None),
            bo=P(None, "fsdp"),
            bi=P(None, "tensor"),
            bo_mlp=P(None, "fsdp"),
        )
        top.update(final_norm_bias=P("fsdp"), position=P(None, "fsdp"))
    return {"layers": layer, **top}


# ---------------------------------------------------------------- layers

ACT = jnp.bfloat16


def rms_norm(x, scale, eps=1e-6):
    xf = x.astype(jnp.float32)
    y = xf * jax.lax.rsqrt(jnp.mean(xf * xf, axis=-1, keepdims=True) + eps)
    return (y * scale).astype(ACT)


def layer_norm(x, scale, bias, eps=1e-6):
    xf = x.astype(jnp.float32)
    mean = jnp.mean(xf, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(xf - mean), axis=-1, keepdims=True)
    y = (xf - mean) * jax.lax.rsqrt(var + eps)
    return (y * scale + bias).astype(ACT)


def rotary(x, positions, max_timescale=10_000.0):
    """LLaMA-style rotary embedding on the last axis of x: [B, S, H, D], rotating interleaved
    (even, odd) pairs, computed in f32 and returned in bf16."""
    d = x.shape[-1]
    fraction = 2.0 * jnp.arange(d // 2, dtype=jnp.float32) / d
    inv_freq = max_timescale**-fraction
    angle = positions[:, :, None, None].astype(jnp.float32) * inv_freq
    sin, cos = jnp.sin(angle), jnp.cos(angle)
    pairs = x.astype(jnp.float32).reshape(*x.shape[:-1], d // 2, 2)
    even, odd = pairs[..., 0], pairs[..., 1]
    rotated = jnp.stack([(even * cos - odd * sin).astype(ACT), (odd * cos + even * sin).astype(ACT)], axis=-1)
    return rotated.reshape(x.shape)


def dot_attention(q, k, v, sm_scale: float = 1.0):
    """Causal attention, [B, S, H, D] in and out, softmax in f32."""
    logits = jnp.einsum("bqhd,bkhd->bhqk", q, k, preferred_element_type=jnp.float32)
    if sm_scale != 1.0:
        logits = logits * sm_scale
    s = q.shape[1]
    mask = jnp.tril(jnp.ones((s, s), dtype=bool))
    logits = jnp.where(mask, logits, jnp.finfo(jnp.float32).min)
    probs = jax.nn.softmax(logits, axis=-1).astype(ACT)
    return jnp.einsum("bhqk,bkhd->bqhd", probs, v)


T5_BUCKETS, T5_MAX_DISTANCE = 32, 128


def t5_relative_buckets(seq: int) -> np.ndarray:
    """Causal (unidirectional) T5 relative-position bucket of every (query, key) pair: exact
    buckets for distances below half the buckets, logarithmic ones up to the max distance."""
    distance = np.maximum(np.arange(seq)[:, None] - np.arange(seq)[None, :], 0)
    exact = T5_BUCKETS // 2
    with np.errstate(divide="ignore"):
        log_ratio = np.log(np.maximum(distance, 1) / exact) / np.log(T5_MAX_DISTANCE / exact)
    large = np.minimum(exact + (log_ratio * (T5_BUCKETS - exact)).astype(np.int32), T5_BUCKETS - 1)
    return np.where(distance < exact, distance, large).astype(np.int32)


def t5_bias_attention(q, k, v, rel_embedding, q_norm, k_norm):
    """The v4 runs' attention: q/k RMSNorm, bf16 scores plus a per-head relative position bias
    (gathered through a one-hot contraction, as MaxText did) and the causal mask, bf16 softmax."""
    q, k = rms_norm(q, q_norm), rms_norm(k, k_norm)
    s = q.shape[1]
    scores = jnp.einsum("bqhd,bkhd->bhqk", q, k)
    buckets = jnp.asarray(t5_relative_buckets(s))
    one_hot = (buckets[None] == jnp.arange(T5_BUCKETS, dtype=jnp.int32)[:, None, None]).astype(ACT)
    bias = jnp.einsum("hn,nqk->hqk", rel_embedding.astype(ACT), one_hot)
    mask = jnp.where(jnp.tril(jnp.ones((s, s), dtype=bool)), 0.0, -1e10).astype(ACT)
    probs = jax.nn.softmax(scores + bias[None] + mask[None, None], axis=-1)
    return jnp.einsum("bhqk,bkhd->bqhd", probs, v)


def flash_attention_sharded(q, k, v, mesh, sm_scale: float = 1.0):
    """The Pallas TPU flash attention kernel, run per shard (batch over data/fsdp, heads over tensor)
    inside shard_map, as MaxText wraps it."""
    from jax.experimental.pallas.ops.tpu import flash_attention as fa

    spec = P(BATCH_AXES, "tensor", None, None)

    def kernel(q, k, v):
        b, _, s, _ = q.shape  # per-shard [B, H, S, D]
        blocks = fa.BlockSizes(  # the block sizes MaxText passed at that commit
            block_q=min(512, s),
            block_k_major=min(512, s),
            block_k=min(512, s),
            block_b=min(2, b),
            block_q_major_dkv=min(512, s),
            block_k_major_dkv=min(512, s),
            block_q_dkv=min(512, s),
            block_k_dkv=min(512, s),
            block_q_dq=min(1024, s),
            block_k_dq=min(256, s),
            block_k_major_dq=min(512, s),
        )
        return fa.flash_attention(q, k, v, causal=True, sm_scale=sm_scale, block_sizes=blocks)

    f = jax.shard_map(kernel, mesh=mesh, in_specs=(spec, spec, spec), out_specs=spec, check_vma=False)
    # The kernel takes [B, H, S, D].
    qt, kt, vt = (t.transpose(0, 2, 1, 3) for t in (q, k, v))
    return f(qt, kt, vt).transpose(0, 2, 1, 3)


def _quantized_dot(a, b):
    """a [M, K] @ b [K, N] as an int8 x int8 -> int32 dot, each operand scaled per row/column of
    its non-contracting dimension (symmetric, max-abs), rescaled in f32."""
    sa = jnp.max(jnp.abs(a.astype(jnp.float32)), axis=1, keepdims=True) / 127.0 + 1e-12
    sb = jnp.max(jnp.abs(b.astype(jnp.float32)), axis=0, keepdims=True) / 127.0 + 1e-12
    aq = jnp.round(a / sa).astype(jnp.int8)
    bq = jnp.round(b / sb).astype(jnp.int8)
    acc = jax.lax.dot(aq, bq, preferred_element_type=jnp.int32)
    return acc.astype(jnp.float32) * sa * sb


@jax.custom_vjp
def int8_matmul(x, w):
    """[T, K] x [K, N] -> [T, N] in bf16 with int8 dots forward and backward (AQT int8 training)."""
    return _quantized_dot(x, w).astype(ACT)


def _int8_fwd(x, w):
    return int8_matmul(x, w), (x, w)


def _int8_bwd(res, g):
    x, w = res
    dx = _quantized_dot(g, w.T).astype(x.dtype)
    dw = _quantized_dot(x.T, g).astype(w.dtype)
    return dx, dw


int8_matmul.defvjp(_int8_fwd, _int8_bwd)


def dense(x, w, contract: int, cfg: ModelConfig):
    """Contract the last `contract` axes of x with the first `contract` axes of w (bf16 or int8)."""
    if not cfg.int8_matmuls:
        lhs = "abcdefg"[: x.ndim]
        rhs = lhs[x.ndim - contract :] + "uvwxyz"[: w.ndim - contract]
        out = lhs[: x.ndim - contract] + rhs[contract:]
        return jnp.einsum(f"{lhs},{rhs}->{out}", x, w)
    batch, k_shape = x.shape[: x.ndim - contract], x.shape[x.ndim - contract :]
    n_shape = w.shape[contract:]
    k, n = math.prod(k_shape), math.prod(n_shape)
    y = int8_matmul(x.reshape(-1, k), w.reshape(k, n))
    return y.reshape(*batch, *n_shape)


def constrain(x, *spec):
    return jax.lax.with_sharding_constraint(x, P(*spec))


def attention_block(p, x, positions, cfg: ModelConfig, attend):
    w = lambda name: p[name].astype(ACT)  # noqa: E731
    if cfg.kind == "gpt3":
        # MaxText's fused projection (one matmul, one dX reduction in the backward pass).
        qkv = checkpoint_name(dense(x, w("wqkv"), 1, cfg), "qkv_proj") + w("bqkv")
        q, k, v = qkv[:, :, :, 0], qkv[:, :, :, 1], qkv[:, :, :, 2]
    else:
        q, k, v = (
            checkpoint_name(dense(x, w(name), 1, cfg), saved)
            for name, saved in (("wq", "query_proj"), ("wk", "key_proj"), ("wv", "value_proj"))
        )
    if cfg.kind == "maxtext":
        q, k = rotary(q, positions), rotary(k, positions)
        q, k, v = rms_norm(q, p["q_norm"]), rms_norm(k, p["k_norm"]), rms_norm(v, p["v_norm"])
    q, k, v = (constrain(t, BATCH_AXES, None, "tensor", None) for t in (q, k, v))
    if cfg.kind == "maxtext_v4":
        o = t5_bias_attention(q, k, v, p["rel_embedding"], p["q_norm"], p["k_norm"])
    else:
        o = attend(q, k, v)
    o = constrain(o, BATCH_AXES, None, "tensor", None)
    # Constrained like the layer's residual (MaxText's activation_embed) before it is saved.
    out = checkpoint_name(constrain(dense(o, w("wo"), 2, cfg), *RESIDUAL), "out_proj")
    if cfg.kind == "gpt3":
        out = out + w("bo")
    return out


def mlp_block(p, x, cfg: ModelConfig):
    h = checkpoint_name(dense(x, p["wi"].astype(ACT), 1, cfg), "mlpwi")
    if cfg.kind != "gpt3":
        h = jax.nn.relu(h)
    else:
        h = jax.nn.gelu(h + p["bi"].astype(ACT))
    h = constrain(h, BATCH_AXES, None, "tensor")
    out = checkpoint_name(constrain(dense(h, p["wo_mlp"].astype(ACT), 1, cfg), *RESIDUAL), "mlpwo")
    if cfg.kind == "gpt3":
        out = out + p["bo_mlp"].astype(ACT)
    return out


def decoder_layer(x, p, positions, cfg: ModelConfig, attend):
    x = constrain(x, *RESIDUAL)
    if cfg.kind != "gpt3":
        h = rms_norm(x, p["norm"])
        x = x + attention_block(p, h, positions, cfg, attend) + mlp_block(p, h, cfg)
    else:
        h = layer_norm(x, p["norm"], p["norm_bias"])
        x = x + attention_block(p, h, positions, cfg, attend)
        h = layer_norm(x, p["mlp_norm"], p["mlp_norm_bias"])
        x = x + mlp_block(p, h, cfg)
    return constrain(x, *RESIDUAL)


def embed(params, tokens, iota_embed: bool):
    emb = params["embedding"].astype(ACT)
    if iota_embed:
        one_hot = (tokens[..., None] == jnp.arange(emb.shape[0], dtype=tokens.dtype)).astype(ACT)
        return jnp.einsum("bsv,ve->bse", one_hot, emb)
    return jnp.take(emb, tokens, axis=0)


# MaxText's remat policies: the named layer outputs kept for the backward pass (all else is
# recomputed); "full" keeps nothing but the scan carry.
REMAT_SAVED = {
    "full": (),
    "save_dot_except_logits_ffn1": ("query_proj", "key_proj", "value_proj", "qkv_proj", "out_proj", "mlpwo"),
    "save_dot_except_logits": (
        "query_proj", "key_proj", "value_proj", "qkv_proj", "out_proj", "mlpwi", "mlpwo",
    ),
}


def forward_loss(params, tokens, cfg: ModelConfig, attend, remat: str, iota_embed: bool = False):
    """Mean next-token cross entropy of a [B, S] batch (targets are the inputs shifted)."""
    b, s = tokens.shape
    positions = jnp.broadcast_to(jnp.arange(s, dtype=jnp.int32), (b, s))
    x = constrain(embed(params, tokens, iota_embed), *RESIDUAL)
    if cfg.kind == "gpt3":
        x = x + params["position"][:s].astype(ACT)[None]

    def body(carry, layer_params):
        return decoder_layer(carry, layer_params, positions, cfg, attend), None

    if remat != "none":
        policy = jax.checkpoint_policies.save_only_these_names(*REMAT_SAVED[remat])
        body = jax.checkpoint(body, policy=policy, prevent_cse=False)
    x, _ = jax.lax.scan(body, x, params["layers"])

    if cfg.kind != "gpt3":
        x = rms_norm(x, params["final_norm"])
    else:
        x = layer_norm(x, params["final_norm"], params["final_norm_bias"])
    # Logits through the shared embedding, in f32, scaled by 1/sqrt(emb) as MaxText does.
    logits = jnp.einsum("bse,ve->bsv", x.astype(jnp.float32), params["embedding"]) / math.sqrt(cfg.emb)
    logits = constrain(logits, BATCH_AXES, None, "tensor")
    targets = jax.nn.one_hot(jnp.roll(tokens, -1, axis=1), cfg.vocab, dtype=jnp.float32)
    nll = -jnp.sum(targets * jax.nn.log_softmax(logits, axis=-1), axis=-1)
    return jnp.mean(nll)


# ---------------------------------------------------------------- optimizer

ADAM_B1, ADAM_B2, ADAM_EPS, WEIGHT_DECAY, LR, CLIP = 0.9, 0.95, 1e-8, 0.1, 1e-4, 1.0


def adamw_clipped(params, grads, mu, nu, step):
    """AdamW (decoupled weight decay) after clipping the gradients to a global norm of CLIP."""
    sq = sum(jnp.sum(jnp.square(g)) for g in jax.tree.leaves(grads))
    gnorm = jnp.sqrt(sq)
    factor = jnp.minimum(1.0, CLIP / (gnorm + 1e-6))
    grads = jax.tree.map(lambda g: g * factor, grads)
    t = (step + 1).astype(jnp.float32)
    mu = jax.tree.map(lambda m, g: ADAM_B1 * m + (1 - ADAM_B1) * g, mu, grads)
    nu = jax.tree.map(lambda n, g: ADAM_B2 * n + (1 - ADAM_B2) * g * g, nu, grads)
    c1, c2 = 1 - ADAM_B1**t, 1 - ADAM_B2**t

    def update(p, m, n):
        return p - LR * ((m / c1) / (jnp.sqrt(n / c2) + ADAM_EPS) + WEIGHT_DECAY * p)

    return jax.tree.map(update, params, mu, nu), mu, nu, gnorm


def make_train_step(cfg: ModelConfig, attend, remat: str, iota_embed: bool = False):
    def train_step(params, mu, nu, step, tokens):
        loss, grads = jax.value_and_grad(forward_loss)(params, tokens, cfg, attend, remat, iota_embed)
        params, mu, nu, gnorm = adamw_clipped(params, grads, mu, nu, step)
        return params, mu, nu, step + 1, loss, gnorm

    return train_step


def step_args(run: RunConfig, mesh):
    """Abstract arguments of the train step with their shardings on `mesh`."""
    from jax.sharding import NamedSharding

    shapes, specs = param_shapes(run.model), param_specs(run.model)

    def sharded(shape, spec):
        return jax.ShapeDtypeStruct(shape.shape, shape.dtype, sharding=NamedSharding(mesh, spec))

    params = jax.tree.map(sharded, shapes, specs)
    step = jax.ShapeDtypeStruct((), jnp.int32, sharding=NamedSharding(mesh, P()))
    tokens = jax.ShapeDtypeStruct(
        (run.global_batch, run.seq), jnp.int32, sharding=NamedSharding(mesh, P(BATCH_AXES, None))
    )
    return params, params, params, step, tokens


def attention_fn(cfg: ModelConfig, flash: bool, mesh=None):
    """MaxText's block folds 1/sqrt(head_dim) into the query initializer (and normalizes q/k);
    GPT-3 scales the scores."""
    sm_scale = 1.0 / math.sqrt(cfg.head_dim) if cfg.kind == "gpt3" else 1.0
    if flash:
        return functools.partial(flash_attention_sharded, mesh=mesh, sm_scale=sm_scale)
    return functools.partial(dot_attention, sm_scale=sm_scale)


# ---------------------------------------------------------------- FLOPs (MaxText's formula)


def maxtext_flops_per_device(run: RunConfig, causal_attention: bool) -> float:
    """Model FLOPs of one train step per device: 6 x params x tokens, plus the attention
    score/value matmuls (x3 for forward+backward), halved when causal, as the published MFU
    figures count them (v4's table counted 6 x params x tokens only: causal_attention=None)."""
    cfg = run.model
    tokens = run.per_device_batch * run.seq
    flops = 6.0 * cfg.param_count() * tokens
    if causal_attention:
        attn = 4.0 * run.per_device_batch * run.seq**2 * cfg.heads * cfg.head_dim * cfg.layers * 3
        flops += attn / 2
    return flops
