"""Smoke check of model.py on CPU at a tiny size: the train step runs, the loss is near ln(vocab) at
init and falls over a few steps, every remat policy gives the same gradients, and int8 matmuls
track the bf16 model's loss and gradients.

  python3 bench/fidelity/check_model.py
"""

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np

from model import MESH_AXES, REMAT_SAVED, ModelConfig, attention_fn, forward_loss, make_train_step, param_shapes


FAN_IN_AXES = {"wq": 1, "wk": 1, "wv": 1, "wqkv": 1, "wo": 2, "wi": 1, "wo_mlp": 1}  # input axes after the layer axis


def init(cfg, key):
    """Norm scales 1, biases 0, embedding N(0, 1) (MaxText), positions N(0, 0.02), weights
    N(0, 1/fan_in)."""
    leaves = jax.tree_util.tree_leaves_with_path(param_shapes(cfg))
    keys = jax.random.split(key, len(leaves))
    out = []
    for k, (path, s) in zip(keys, leaves):
        name = path[-1].key
        if name == "rel_embedding":
            out.append(0.1 * jax.random.normal(k, s.shape, s.dtype))
        elif "norm" in name and "bias" not in name:
            out.append(jnp.ones(s.shape, s.dtype))
        elif "bias" in name or (name.startswith("b") and name in {"bqkv", "bo", "bi", "bo_mlp"}):
            out.append(jnp.zeros(s.shape, s.dtype))
        elif name == "embedding":
            out.append(jax.random.normal(k, s.shape, s.dtype))
        elif name == "position":
            out.append(0.02 * jax.random.normal(k, s.shape, s.dtype))
        else:
            fan_in = math.prod(s.shape[1 : 1 + FAN_IN_AXES[name]])
            out.append(jax.random.normal(k, s.shape, s.dtype) / math.sqrt(fan_in))
    return jax.tree.unflatten(jax.tree.structure(param_shapes(cfg)), out)


def main():
    for kind in ("maxtext", "maxtext_v4", "gpt3"):
        cfg = ModelConfig(kind=kind, emb=64, heads=4, head_dim=16, mlp=128, layers=2, vocab=256)
        mesh = jax.sharding.Mesh(np.array(jax.devices()[:1]).reshape(1, 1, 1), MESH_AXES)
        params = init(cfg, jax.random.key(0))
        dot_attention = attention_fn(cfg, flash=False)
        tokens = jax.random.randint(jax.random.key(1), (4, 32), 0, cfg.vocab)
        with jax.set_mesh(mesh):
            loss0 = forward_loss(params, tokens, cfg, dot_attention, "full")
            assert abs(float(loss0) - math.log(cfg.vocab)) < 2.0, float(loss0)
            step = jax.jit(make_train_step(cfg, dot_attention, "full"))
            zeros = jax.tree.map(jnp.zeros_like, params)
            p, mu, nu, s = params, zeros, zeros, jnp.int32(0)
            losses = []
            for _ in range(8):
                p, mu, nu, s, loss, gnorm = step(p, mu, nu, s, tokens)
                losses.append(float(loss))
            assert losses[-1] < losses[0], losses
            q = dataclasses.replace(cfg, int8_matmuls=True)
            g_bf16 = jax.grad(forward_loss)(params, tokens, cfg, dot_attention, "full")
            l8, g_int8 = jax.value_and_grad(forward_loss)(params, tokens, q, dot_attention, "full")
            flat = lambda g: jnp.concatenate([x.ravel() for x in jax.tree.leaves(g)])  # noqa: E731
            a, b = flat(g_bf16), flat(g_int8)
            cos = float(jnp.dot(a, b) / (jnp.linalg.norm(a) * jnp.linalg.norm(b)))
            # Every remat policy computes the same gradients (they only change what is recomputed).
            for policy in REMAT_SAVED:
                g = jax.grad(forward_loss)(params, tokens, cfg, dot_attention, policy)
                diff = float(jnp.max(jnp.abs(flat(g) - a)))
                assert diff <= 1e-3 * float(jnp.max(jnp.abs(a))), (policy, diff)
        # Quantization noise dominates gradients that are ~0 in exact arithmetic (a key bias does not
        # change softmax), so compare the whole gradient's direction, not each leaf.
        print(f"{kind}: loss {losses[0]:.3f} -> {losses[-1]:.3f}; int8 loss {float(l8):.3f} vs {float(loss0):.3f}, "
              f"int8/bf16 gradient cosine {cos:.3f}")
        assert abs(float(l8) - float(loss0)) < 0.05 and cos > 0.95


if __name__ == "__main__":
    main()
