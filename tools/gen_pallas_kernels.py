"""Lower JAX's Pallas TPU kernels that carry no cost_estimate, for tpusim's recognizer tests.

Writes testdata/pallas/<name>.hlo (pre-partition HLO lowered for the TPU on a CPU-only machine)
and testdata/pallas/meta.json: each program's kernel parameters and, from JAX's own mask
objects, the number of (query block, key block) pairs a splash kernel computes, so the tests
check tpusim's reading of the block mask against an independent count.

Kernels: splash attention (forward, and its dq and dkv backward kernels) with a causal mask,
paged attention (decode) and ragged paged attention. Megablox gmm ships a cost_estimate and is
lowered too, as the control.

Usage: python3 tools/gen_pallas_kernels.py  (jax 0.10.2, CPU only)
"""
from __future__ import annotations

import json
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
from jax._src.pallas.mosaic import tpu_info
from jax.experimental.pallas.ops.tpu.megablox import ops as megablox
from jax.experimental.pallas.ops.tpu.paged_attention import paged_attention
from jax.experimental.pallas.ops.tpu.ragged_paged_attention import kernel as rpa
from jax.experimental.pallas.ops.tpu.ragged_paged_attention import tuned_block_sizes
from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_kernel as splash
from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_mask as masks

OUT = pathlib.Path(__file__).resolve().parents[1] / "testdata" / "pallas"
S = jax.ShapeDtypeStruct
BF16 = jnp.bfloat16

# The ragged kernel asks the device for its TPU generation while lowering; on a CPU-only
# machine, answer as a v5e would (only block-size tables and lowering rules read it).
tpu_info.registry["cpu"] = lambda: tpu_info._get_tpu_info_impl(tpu_info.ChipVersion.TPU_V5E, 1)
rpa.get_tpu_version = lambda: 5
tuned_block_sizes.get_tpu_version = lambda: 5


def lower(name: str, f, *args) -> None:
    text = jax.jit(f).trace(*args).lower(lowering_platforms=("tpu",)).as_text(dialect="hlo")
    (OUT / f"{name}.hlo").write_text(text)


def active_blocks(mask: masks.Mask, bq: int, bkv: int) -> int:
    dense = np.asarray(mask[:, :])
    q, k = dense.shape
    blocks = dense.reshape(q // bq, bq, k // bkv, bkv).any(axis=(1, 3))
    return int(blocks.sum())


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    meta: dict[str, dict] = {}

    heads, seq, dim, block = 8, 2048, 128, 128
    causal = masks.CausalMask((seq, seq))
    kernel = splash.make_splash_mha(masks.MultiHeadMask([causal] * heads), head_shards=1,
                                    q_seq_shards=1)
    qkv = [S((heads, seq, dim), BF16)] * 3
    lower("splash_fwd", lambda q, k, v: kernel(q, k, v), *qkv)
    lower("splash_bwd", jax.grad(lambda q, k, v: kernel(q, k, v).astype(jnp.float32).sum(),
                                 argnums=(0, 1, 2)), *qkv)
    splash_meta = {"heads": heads, "seq": seq, "head_dim": dim, "block_q": block, "block_kv": block,
                   "active_blocks_per_head": active_blocks(causal, block, block),
                   "blocks_per_head": (seq // block) ** 2}
    meta["splash_fwd"] = splash_meta
    meta["splash_bwd"] = splash_meta

    batch, q_heads, kv_heads, pages, page, per_seq = 8, 32, 8, 512, 16, 64
    lower("paged_attention",
          lambda q, k, v, lens, idx: paged_attention(q, k, v, lens, idx, pages_per_compute_block=8),
          S((batch, q_heads, dim), BF16), S((kv_heads, pages, page, dim), BF16),
          S((kv_heads, pages, page, dim), BF16), S((batch,), jnp.int32),
          S((batch, per_seq), jnp.int32))
    meta["paged_attention"] = {"batch": batch, "q_heads": q_heads, "kv_heads": kv_heads,
                               "head_dim": dim, "page_size": page, "pages_per_seq": per_seq,
                               "pool_pages": pages}

    tokens, seqs, pool = 256, 16, 1024
    lower("ragged_paged_attention",
          lambda q, kv, lens, idx, cu, n: rpa.ragged_paged_attention(
              q, kv, lens, idx, cu, n, num_kv_pages_per_block=8, num_queries_per_block=32,
              vmem_limit_bytes=32 * 1024 * 1024),
          S((tokens, q_heads, dim), BF16), S((pool, page, 2 * kv_heads, dim), BF16),
          S((seqs,), jnp.int32), S((seqs, per_seq), jnp.int32), S((seqs + 1,), jnp.int32),
          S((1,), jnp.int32))
    meta["ragged_paged_attention"] = {"tokens": tokens, "seqs": seqs, "q_heads": q_heads,
                                      "kv_heads": kv_heads, "head_dim": dim, "page_size": page,
                                      "pages_per_seq": per_seq, "pool_pages": pool}

    m, k, n, groups = 1024, 512, 256, 4
    lower("megablox_gmm", lambda lhs, rhs, sizes: megablox.gmm(lhs, rhs, sizes, BF16),
          S((m, k), BF16), S((groups, k, n), BF16), S((groups,), jnp.int32))
    meta["megablox_gmm"] = {"m": m, "k": k, "n": n, "groups": groups}

    (OUT / "meta.json").write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
