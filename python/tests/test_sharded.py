"""Sharded JAX programs: tpusim.run on global arrays matches JAX on 8 host devices,
and tpusim.analyze prices them on a pod exactly as `tpusim analyze --json` does."""

from __future__ import annotations

import pathlib
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import tpusim
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec

from conftest import run_cli
from programs import normal


def P(*axes: Any) -> Any:
    """A typed PartitionSpec (jax's constructor is untyped for mypy --strict)."""
    return PartitionSpec(*axes)  # type: ignore[no-untyped-call]


def mesh() -> Mesh:
    devices = jax.devices()
    assert len(devices) == 8, "conftest asks XLA for 8 host devices"
    return Mesh(np.array(devices).reshape(2, 4), ("x", "y"))


def sharded_mlp(x: Any, w: Any) -> Any:
    return jnp.tanh(x @ w).sum(axis=1)


def compiled_mlp() -> Any:
    m = mesh()
    x, w = normal(16, 32), normal(32, 64)
    f = jax.jit(
        sharded_mlp,
        in_shardings=(NamedSharding(m, P("x", None)), NamedSharding(m, P(None, "y"))),
        out_shardings=NamedSharding(m, P("x")),
    )
    return f, f.lower(x, w).compile(), (x, w)


def psum_program() -> Any:
    m = mesh()

    def per_shard(a: Any) -> Any:
        return jax.lax.psum(a * 2.0, "y") + 1.0  # type: ignore[no-untyped-call]

    f = jax.jit(
        jax.shard_map(per_shard, mesh=m, in_specs=P("x", "y"), out_specs=P("x", None))
    )
    x = normal(4, 16)
    return f, x


def test_jit_with_shardings_runs_on_global_arrays() -> None:
    f, compiled, args = compiled_mlp()
    assert "devices=" in (compiled.as_text() or ""), "the compiled module is partitioned"
    (got,) = tpusim.run(compiled, *args)
    want = np.asarray(f(*args))
    assert got.shape == want.shape == (16,)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_shard_map_psum_matches_jax() -> None:
    f, x = psum_program()
    want = np.asarray(f(x))
    (got,) = tpusim.run(f.lower(x).compile(), x)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    # The lowered (unpartitioned, manual-region) program runs the same way.
    (lowered_got,) = tpusim.run(f.lower(x), x)
    np.testing.assert_allclose(lowered_got, want, rtol=1e-5, atol=1e-5)


def test_wrong_global_shape_is_an_argument_error() -> None:
    _, compiled, (x, w) = compiled_mlp()
    with pytest.raises(tpusim.ArgumentError):
        tpusim.run(compiled, x[:3], w)


def test_max_memory_refuses_a_program_that_needs_more() -> None:
    _, compiled, args = compiled_mlp()
    with pytest.raises(tpusim.TpusimError, match="memory"):
        tpusim.run(compiled, *args, max_memory=100)
    with pytest.raises(tpusim.TpusimError, match="memory"):
        tpusim.run(compiled, *args, max_memory="1K")
    assert len(tpusim.run(compiled, *args, max_memory="1G")) == 1
    with pytest.raises(tpusim.ArgumentError, match="not a size"):
        tpusim.run(compiled, *args, max_memory="lots")


def test_output_sharding_is_needed_when_the_root_has_none() -> None:
    f, compiled, args = compiled_mlp()
    want = np.asarray(f(*args))
    text = compiled.as_text()
    # As plain text the partitioned module does not say how its outputs are laid out...
    with pytest.raises(tpusim.ArgumentError, match="no sharding"):
        tpusim.run(text, *args)
    # ...so it is given as HLO sharding text, or as the unpartitioned program.
    for given in ("{devices=[2,4]<=[8] last_tile_dim_replicate}", f.lower(*args)):
        (got,) = tpusim.run(text, *args, output_sharding=given)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    # A wrong one is taken at its word: all of device 0's partial rows, not JAX's result.
    (wrong,) = tpusim.run(text, *args, output_sharding="{replicated}")
    assert wrong.shape == (8,)
    with pytest.raises(tpusim.ArgumentError, match="not an HLO sharding"):
        tpusim.run(compiled, *args, output_sharding="{devices=[")


def write(tmp_path: pathlib.Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


POD_CASES = [
    ({}, []),
    ({"topology": "2x4"}, ["--topology", "2x4"]),
    ({"topology": "4x4", "network": "sim"}, ["--topology", "4x4", "--network", "sim"]),
    ({"topology": "2x2", "slices": 2}, ["--topology", "2x2", "--slices", "2"]),
]


@pytest.mark.parametrize("options,flags", POD_CASES)
def test_sharded_analysis_agrees_with_cli(
    cli: str, tmp_path: pathlib.Path, options: dict[str, Any], flags: list[str]
) -> None:
    _, compiled, _ = compiled_mlp()
    hlo = write(tmp_path, "sharded.hlo", compiled.as_text())
    expected = run_cli(cli, "analyze", hlo, "--chip", "v5e", "--json", *flags)
    report = tpusim.analyze(compiled, chip="v5e", **options)
    assert report.to_json() + "\n" == expected
    d = report.to_dict()
    # A sharded module gets a pod even without a topology, as in the CLI.
    assert report.network is not None and report.network == d["network"]
    assert report.collectives == d["collectives"] and report.collectives
    assert report.communication_s == d["communication_s"] > 0
    assert report.compute_s == d["compute_s"] > 0
    assert report.exposed_communication_s == d["exposed_communication_s"]
    assert report.peak_memory_bytes == d["peak_memory_bytes"] > 0
    assert "network" in report._repr_html_()


def test_device_order_file_agrees_with_cli(cli: str, tmp_path: pathlib.Path) -> None:
    _, compiled, _ = compiled_mlp()
    hlo = write(tmp_path, "sharded.hlo", compiled.as_text())
    # Device ids laid column-major on a 2x4 torus instead of row-major.
    order = write(tmp_path, "order.txt", "".join(f"{d % 2} {d // 2}\n" for d in range(8)))
    flags = ["--topology", "2x4", "--device-order", order]
    expected = run_cli(cli, "analyze", hlo, "--chip", "v5e", "--json", *flags)
    report = tpusim.analyze(compiled, chip="v5e", topology="2x4", device_order=order)
    assert report.to_json() + "\n" == expected


def test_mesh_places_a_compiled_program_as_the_cli_does(cli: str, tmp_path: pathlib.Path) -> None:
    _, compiled, _ = compiled_mlp()
    hlo = write(tmp_path, "sharded.hlo", compiled.as_text())
    flags = ["--topology", "2x4", "--mesh", "2x4"]
    expected = run_cli(cli, "analyze", hlo, "--chip", "v5e", "--json", *flags)
    report = tpusim.analyze(compiled, chip="v5e", topology="2x4", mesh=mesh())
    assert report.to_json() + "\n" == expected
    assert any("lays mesh 2x4" in a for a in report.assumptions), report.assumptions
    with pytest.raises(tpusim.ArgumentError, match="has 4 devices, the module runs on 8"):
        tpusim.analyze(compiled, chip="v5e", mesh=jax.sharding.AbstractMesh((2, 2), ("a", "b")))
    with pytest.raises(tpusim.ArgumentError, match="Mesh or AbstractMesh"):
        tpusim.analyze(compiled, chip="v5e", mesh=(2, 4))


def test_single_device_program_on_a_topology_gets_a_pod(cli: str, tmp_path: pathlib.Path) -> None:
    f, args = jax.jit(lambda a: a * 2), (normal(8),)
    lowered = f.lower(*args)
    hlo = write(tmp_path, "one.hlo", lowered.as_text(dialect="hlo"))
    expected = run_cli(cli, "analyze", hlo, "--chip", "v4", "--json", "--topology", "2x2x2")
    report = tpusim.analyze(lowered, chip="v4", topology="2x2x2")
    assert report.to_json() + "\n" == expected
    assert report.network is not None
    # Without one it stays a single chip: nothing to price.
    alone = tpusim.analyze(lowered, chip="v4")
    assert alone.network is None and alone.collectives == [] and alone.communication_s == 0


@pytest.mark.parametrize(
    "options,message",
    [
        ({"topology": "4x4x4"}, "2-axis torus"),
        ({"topology": "banana"}, "bad topology"),
        ({"topology": "64x64"}, "larger than"),
        ({"topology": "2x2"}, "needs 8 devices"),
        # Refused before any pod is built (it once asked for 2 TB and killed Python).
        ({"slices": 4294967295, "network": "sim"}, "at most 262144"),
        # Past the native 32-bit count: the same refusal, not an OverflowError.
        ({"slices": 2**40}, "at most 262144"),
    ],
)
def test_pods_that_cannot_be_built_are_topology_errors(options: dict[str, Any], message: str) -> None:
    _, compiled, _ = compiled_mlp()
    with pytest.raises(tpusim.TopologyError, match=message):
        tpusim.analyze(compiled, chip="v5e", **options)


def test_bad_pod_options_are_argument_errors(tmp_path: pathlib.Path) -> None:
    _, compiled, _ = compiled_mlp()
    with pytest.raises(tpusim.ArgumentError, match="analytic"):
        tpusim.analyze(compiled, chip="v5e", network="fast")
    with pytest.raises(tpusim.ArgumentError, match="slices"):
        tpusim.analyze(compiled, chip="v5e", slices=0)
    with pytest.raises(tpusim.ArgumentError, match="cannot read"):
        tpusim.analyze(compiled, chip="v5e", device_order=tmp_path / "missing.txt")
    bad = write(tmp_path, "bad.txt", "0 0\nx y\n")
    with pytest.raises(tpusim.TopologyError, match=f"{bad}: device order line 2"):
        tpusim.analyze(compiled, chip="v5e", topology="2x4", device_order=bad)
    assert issubclass(tpusim.TopologyError, tpusim.TpusimError)
