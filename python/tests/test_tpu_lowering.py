"""Programs lowered for a TPU mesh on this CPU-only machine (an AbstractMesh, no fake
devices): what tpusim.analyze reads from such a Lowered object and from a function
it lowers itself. These check the lowering and the plumbing, not the partitioner."""

from __future__ import annotations

import re
from typing import Any, Tuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import tpusim
from jax.sharding import AbstractMesh, Mesh, NamedSharding
from jax.sharding import PartitionSpec
from tpusim._source import hlo_text, is_function, lower_for_tpu


def P(*axes: Any) -> Any:
    """A typed PartitionSpec (jax's constructor is untyped for mypy --strict)."""
    return PartitionSpec(*axes)  # type: ignore[no-untyped-call]


def sds(shape: Tuple[int, ...], dtype: Any, sharding: Any) -> Any:
    """A typed jax.ShapeDtypeStruct (untyped for mypy --strict)."""
    return jax.ShapeDtypeStruct(shape, dtype, sharding=sharding)  # type: ignore[no-untyped-call]


def pod_mesh() -> Any:
    return AbstractMesh((16, 16), ("data", "model"))


def mlp(x: Any, w1: Any, w2: Any) -> Any:
    return jax.nn.gelu(x @ w1) @ w2


def mlp_args(mesh: Any) -> Tuple[Any, Any, Any]:
    def arg(shape: Tuple[int, int], spec: Any) -> Any:
        return sds(shape, jnp.bfloat16, NamedSharding(mesh, spec))

    return (
        arg((512, 1024), P("data", None)),
        arg((1024, 2048), P(None, "model")),
        arg((2048, 1024), P("model", None)),
    )


def manual_text(f: Any, args: Tuple[Any, ...]) -> str:
    text: str = jax.jit(f).trace(*args).lower(lowering_platforms=("tpu",)).as_text(dialect="hlo")
    return text


def test_tpu_lowered_object_gives_its_pre_partition_hlo() -> None:
    lowered = jax.jit(mlp).trace(*mlp_args(pod_mesh())).lower(lowering_platforms=("tpu",))
    text, name = hlo_text(lowered)
    assert text == lowered.as_text(dialect="hlo")
    assert name == "<Lowered>"
    # Global shapes, the mesh in Shardy's attribute, no device count in the header.
    assert "bf16[512,1024]" in text and "num_partitions" not in text.split("\n", 1)[0]
    assert '#sdy.mesh<["data"=16, "model"=16]>' in text
    assert "sharding={devices=[16,1,16]<=[256] last_tile_dim_replicate}" in text


def test_analyze_lowers_a_function_exactly_as_jax_does() -> None:
    args = mlp_args(pod_mesh())
    assert hlo_text(lower_for_tpu(mlp, args))[0] == manual_text(mlp, args)
    # A jax.jit wrapper is traced as it is, not wrapped again.
    jitted = jax.jit(mlp)
    assert hlo_text(lower_for_tpu(jitted, args))[0] == manual_text(mlp, args)


def test_mesh_resolves_bare_partition_specs() -> None:
    def f(x: Any) -> Any:
        return jax.lax.with_sharding_constraint(jnp.sin(x), P(None, "model"))  # type: ignore[no-untyped-call]

    x = sds((256, 512), jnp.float32, NamedSharding(pod_mesh(), P("data")))
    with pytest.raises(Exception):
        lower_for_tpu(f, (x,))  # a bare PartitionSpec means nothing without a mesh
    text = hlo_text(lower_for_tpu(f, (x,), mesh=pod_mesh()))[0]
    assert "sharding={devices=[1,16,16]<=[16,16]T(1,0) last_tile_dim_replicate}" in text


def test_concrete_mesh_lowers_through_its_abstract_mesh() -> None:
    devices = np.array(jax.devices()[:8]).reshape(2, 4)
    concrete = Mesh(devices, ("data", "model"))
    abstract = AbstractMesh((2, 4), ("data", "model"))
    by_concrete = hlo_text(lower_for_tpu(mlp, mlp_args(concrete), mesh=concrete))[0]
    by_abstract = hlo_text(lower_for_tpu(mlp, mlp_args(abstract), mesh=abstract))[0]
    assert by_concrete == by_abstract
    assert '#sdy.mesh<["data"=2, "model"=4]>' in by_abstract


def test_pallas_tpu_kernel_lowers_to_tpu_custom_call() -> None:
    from jax.experimental.pallas.ops.tpu import flash_attention as fa

    mesh = AbstractMesh((2, 4), ("data", "model"))
    spec = P("data", "model", None, None)

    def attention(q: Any, k: Any, v: Any) -> Any:
        kernel = jax.shard_map(
            lambda a, b, c: fa.flash_attention(a, b, c, causal=True),
            mesh=mesh,
            in_specs=(spec, spec, spec),
            out_specs=spec,
            check_vma=False,
        )
        return kernel(q, k, v)  # type: ignore[no-untyped-call]

    qkv = tuple(sds((4, 8, 512, 128), jnp.bfloat16, NamedSharding(mesh, spec)) for _ in range(3))
    text = hlo_text(lower_for_tpu(attention, qkv))[0]
    assert 'custom_call_target="tpu_custom_call"' in text
    # The kernel sits in the shard_map's manual region, on per-device shapes.
    assert re.search(r"bf16\[2,2,512,128\]\S* custom-call\(", text)


def test_analyze_of_a_function_equals_analyze_of_its_lowering() -> None:
    mesh = AbstractMesh((2, 4), ("data", "model"))
    args = mlp_args(mesh)
    lowered = jax.jit(mlp).trace(*args).lower(lowering_platforms=("tpu",))
    by_lowered = tpusim.analyze(lowered, chip="v5e", topology="2x4").to_json()
    by_function = tpusim.analyze(mlp, *args, mesh=mesh, chip="v5e", topology="2x4").to_json()
    assert by_function == by_lowered


def test_only_functions_take_arguments_and_a_given_mesh_must_fit() -> None:
    text = "HloModule m\nENTRY e { ROOT c = f32[] constant(1) }\n"
    assert is_function(mlp) and is_function(jax.jit(mlp))
    assert not is_function(text) and not is_function(lower_for_tpu(mlp, mlp_args(pod_mesh())))
    with pytest.raises(tpusim.ArgumentError, match="chip= and topology= by keyword"):
        tpusim.analyze(text, "v5e")
    # A mesh given with a program places its devices: it must have as many.
    with pytest.raises(tpusim.ArgumentError, match="has 256 devices, the module runs on 1"):
        tpusim.analyze(text, mesh=pod_mesh())
