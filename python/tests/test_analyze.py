"""tpusim.analyze agrees with `tpusim analyze --json` on the same HLO, for JAX objects."""

from __future__ import annotations

import json
import pathlib
import re

from typing import Any, Callable, Tuple

import jax
import ml_dtypes
import numpy as np
import pytest
import tpusim

from conftest import run_cli
from programs import PROGRAMS, lowered, normal

CHIPS = ["v5e", "v4", "h100"]


@pytest.mark.parametrize("chip", CHIPS)
@pytest.mark.parametrize("name", ["mlp_bf16", "attention", "loop", "train_step"])
def test_lowered_agrees_with_cli(cli: str, tmp_path: pathlib.Path, name: str, chip: str) -> None:
    lo = lowered(name)
    hlo = tmp_path / f"{name}.hlo"
    hlo.write_text(lo.as_text(dialect="hlo"))
    expected = run_cli(cli, "analyze", str(hlo), "--chip", chip, "--json")
    report = tpusim.analyze(lo, chip=chip)
    assert report.to_json() + "\n" == expected
    assert report.chip == chip


def test_compiled_agrees_with_cli(cli: str, tmp_path: pathlib.Path) -> None:
    f, args = PROGRAMS["train_step"]
    compiled = jax.jit(f).lower(*args).compile()
    hlo = tmp_path / "compiled.hlo"
    text = compiled.as_text()
    assert text is not None
    hlo.write_text(text)
    expected = run_cli(cli, "analyze", str(hlo), "--chip", "v5e", "--json")
    assert tpusim.analyze(compiled).to_json() + "\n" == expected


def _sized(name: str) -> Tuple[Callable[..., Any], Tuple[Any, ...]]:
    """PROGRAMS' function at shapes where the step is the program's work, not
    the fixed cost of its few kernels (in a 3-kernel program one kernel more
    or less, from fusing XLA:CPU's simplified graph, is a quarter of it)."""
    bf16 = ml_dtypes.bfloat16
    args = {
        "mlp_bf16": (normal(256, 512, dtype=bf16), normal(512, 1024, dtype=bf16), normal(1024, 256, dtype=bf16)),
        "attention": (normal(8, 256, 64), normal(8, 256, 64), normal(8, 256, 64)),
        "train_step": (normal(256, 128), normal(512, 256), normal(512, 128)),
    }[name]
    return PROGRAMS[name][0], args


@pytest.mark.parametrize("name", ["mlp_bf16", "attention", "train_step"])
def test_compiled_is_priced_like_the_program_it_came_from(name: str) -> None:
    # XLA:CPU's fusions, layout copies and float normalization (a bf16 dot
    # computed in f32, a ReLU on the widened value) are undone before tpusim
    # compiles for the TPU, and the report says so.
    f, args = _sized(name)
    lo = jax.jit(f).lower(*args)
    from_lowered = tpusim.analyze(lo, chip="v5e")
    from_compiled = tpusim.analyze(lo.compile(), chip="v5e")
    assert 0.9 < from_compiled.step_time_s / from_lowered.step_time_s < 1.1
    said = " ".join(from_compiled.assumptions)
    assert "compiled by another backend" in said and "unfused" in said, said


def test_chip_file_agrees_with_cli(cli: str, repo: pathlib.Path, tmp_path: pathlib.Path) -> None:
    toml = (repo / "crates/arch/chips/v5e.toml").read_text()
    # A faster-memory variant of v5e, as a user would describe an unreleased chip.
    toml = re.sub(r"(?m)^id = .*$", 'id = "v5e-fastmem"', toml)
    chip_file = tmp_path / "fast.toml"
    chip_file.write_text(toml)
    hlo = tmp_path / "p.hlo"
    hlo.write_text(lowered("mlp_bf16").as_text(dialect="hlo"))
    expected = run_cli(cli, "analyze", str(hlo), "--chip-file", str(chip_file), "--json")
    report = tpusim.analyze(lowered("mlp_bf16"), chip_file=chip_file)
    assert report.to_json() + "\n" == expected
    assert report.chip == "v5e-fastmem"


def test_text_path_and_pathlike_give_the_same_report(tmp_path: pathlib.Path) -> None:
    text = lowered("attention").as_text(dialect="hlo")
    path = tmp_path / "a.hlo"
    path.write_text(text)
    by_text = tpusim.analyze(text).to_json()
    assert tpusim.analyze(str(path)).to_json() == by_text
    assert tpusim.analyze(path).to_json() == by_text
    assert tpusim.analyze(text.encode()).to_json() == by_text


def test_report_properties_are_the_json_fields() -> None:
    report = tpusim.analyze(lowered("train_step"), chip="v5e")
    d = report.to_dict()
    assert d == json.loads(report.to_json())
    assert report.step_time_s == d["step_time_s"] > 0
    assert report.mfu == d["mfu"]
    assert report.flops == d["flops"] > 0
    assert report.op_list == d["ops"] and report.op_list
    assert {"name", "opcode", "time_s", "bound"} <= set(report.op_list[0])
    assert report.module == d["module"]
    assert report.peak_memory_bytes == d["peak_memory_bytes"] > 0
    # One chip: no network, nothing to communicate, all of the step is compute.
    assert report.collectives == d["collectives"] == []
    assert report.network is None and "network" not in d
    assert report.communication_s == report.exposed_communication_s == 0
    assert report.compute_s == d["compute_s"] > 0
    # Copies: editing them leaves the report as it was.
    report.to_dict()["step_time_s"] = -1.0
    report.op_list.clear()
    assert report.step_time_s == d["step_time_s"] and report.op_list


def test_html_shows_summary_and_roofline() -> None:
    report = tpusim.analyze(lowered("mlp_bf16"), chip="v5e")
    page = report._repr_html_()
    assert report.module in page
    assert "<table>" in page and "step time" in page
    assert page.count("<svg") == 1
    timed = [o for o in report.op_list if o["flops"] > 0 and o["bytes_accessed"] > 0 and o["time_s"] > 0]
    assert page.count("<circle") == len(timed) > 0
    assert "tpusim.Report" in repr(report)


def test_a_file_of_several_modules_is_refused() -> None:
    text = lowered("loop").as_text(dialect="hlo")
    with pytest.raises(tpusim.ArgumentError, match="holds 2 modules"):
        tpusim.analyze(text + "\n// -----\n" + text)


def test_invalid_chip_file_is_a_located_chip_error(tmp_path: pathlib.Path) -> None:
    chip_file = tmp_path / "broken.toml"
    chip_file.write_text('id = "x"\nclock_hz = \n')
    with pytest.raises(tpusim.ChipError, match=f"{chip_file}:2"):
        tpusim.analyze(lowered("loop"), chip_file=chip_file)


def test_unknown_chip_lists_the_valid_ones() -> None:
    with pytest.raises(tpusim.ChipError, match="unknown chip `v9z`.*v5e"):
        tpusim.analyze(lowered("loop"), chip="v9z")


def test_topology_prices_the_program_on_a_pod() -> None:
    report = tpusim.analyze(lowered("loop"), chip="v5e", topology="2x2")
    assert report.network is not None and "2x2" in report.network


def test_unknown_option_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="colour"):
        tpusim.analyze(lowered("loop"), colour="red")


def test_chips_is_the_cli_database(cli: str) -> None:
    chips = tpusim.chips()
    assert chips == json.loads(run_cli(cli, "chips", "--json"))
    assert {"v5e", "v4", "h100"} <= {c["id"] for c in chips}


GATHERED_DOT = """
HloModule gathered_dot, num_partitions=8

ENTRY main {
  x = bf16[4096,512] parameter(0)
  w = bf16[4096,4096] parameter(1)
  ag = bf16[4096,4096] all-gather(x), channel_id=1, replica_groups={{0,1,2,3,4,5,6,7}}, dimensions={1}, use_global_device_ids=true
  ROOT d = bf16[4096,4096] dot(ag, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
"""


def test_collective_matmul_hides_the_gather_behind_the_dot() -> None:
    plain = tpusim.analyze(GATHERED_DOT, chip="v5e", topology="2x4")
    decomposed = tpusim.analyze(GATHERED_DOT, chip="v5e", topology="2x4", collective_matmul=True)
    said = " ".join(decomposed.assumptions)
    assert "collective matmul" in said, said
    assert "collective matmul" not in " ".join(plain.assumptions)
    # The same bytes move, but only the first chunk's gather waits.
    assert decomposed.exposed_communication_s < 0.5 * plain.exposed_communication_s
    assert decomposed.step_time_s < plain.step_time_s


def test_propagation_chooses_how_a_sharded_program_is_partitioned(repo: pathlib.Path) -> None:
    # FSDP without activation constraints: the embedding table and the tokens
    # claim one mesh axis. The default resolves it as Shardy does; forward
    # propagation keeps the tokens' tiling and says where XLA would part.
    case = repo / "testdata" / "spmd_cases" / "tfm_sgd_fsdp8"
    pre = case / "pre.hlo"
    factors = " ".join(tpusim.analyze(pre, chip="v5e").assumptions)
    default = " ".join(tpusim.analyze(pre, chip="v5e", propagation="factors").assumptions)
    forward = " ".join(tpusim.analyze(pre, chip="v5e", propagation="forward").assumptions)
    assert factors == default
    assert "as Shardy does" in factors and "gathered operand" not in factors, factors
    assert "propagated forward" in forward and "gathered operand" in forward, forward
    # Either partition runs to JAX's outputs.
    inputs = np.load(case / "inputs.npz")
    expected = np.load(case / "outputs.npz")
    def numbered(files: Any) -> Any:
        return sorted(files, key=lambda k: int(re.sub(r"\D", "", k)))

    args = [inputs[k] for k in numbered(inputs.files)]
    for propagation in ("factors", "forward"):
        got = tpusim.run(pre.read_text(), *args, propagation=propagation)
        assert len(got) == len(expected.files)
        for k, g in zip(numbered(expected.files), got):
            np.testing.assert_allclose(np.asarray(g, dtype=np.float64), expected[k], rtol=1e-4, atol=1e-5)
    with pytest.raises(tpusim.ArgumentError, match="factors"):
        tpusim.analyze(pre, chip="v5e", propagation="shardy")
