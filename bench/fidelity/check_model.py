"""Smoke check of model.py on CPU at a tiny size: the train step runs, the loss is near ln(vocab) at
init and falls over a few steps, and int8 matmuls track the bf16 model's loss and gradients.

  python3 bench/fidelity/check_model.py
"""

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np

from model import MESH_AXES, ModelConfig, RunConfig, dot_attention, forward_loss, make_train_step, param_shapes


def init(cfg, key):
    leaves, tree = jax.tree.flatten(param_shapes(cfg))
    keys = jax.random.split(key, len(leaves))
    out = []
    for k, s in zip(keys, leaves):
        fan_in = s.shape[-2] if len(s.shape) >= 3 else s.shape[-1]
        scale = 1.0 if len(s.shape) <= 2 and s.shape[0] != cfg.vocab else 1.0 / math.sqrt(fan_in)
        is_norm = len(s.shape) <= 2 and s.shape[0] != cfg.vocab and s.shape[0] != 2048
        out.append(jnp.ones(s.shape, s.dtype) if is_norm else scale * jax.random.normal(k, s.shape, s.dtype))
    return jax.tree.unflatten(tree, out)


def main():
    for kind in ("maxtext", "gpt3"):
        cfg = ModelConfig(kind=kind, emb=64, heads=4, head_dim=16, mlp=128, layers=2, vocab=256)
        mesh = jax.sharding.Mesh(np.array(jax.devices()[:1]).reshape(1, 1, 1), MESH_AXES)
        params = init(cfg, jax.random.key(0))
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
        # Quantization noise dominates gradients that are ~0 in exact arithmetic (a key bias does not
        # change softmax), so compare the whole gradient's direction, not each leaf.
        print(f"{kind}: loss {losses[0]:.3f} -> {losses[-1]:.3f}; int8 loss {float(l8):.3f} vs {float(loss0):.3f}, "
              f"int8/bf16 gradient cosine {cos:.3f}")
        assert abs(float(l8) - float(loss0)) < 0.05 and cos > 0.95


if __name__ == "__main__":
    main()
