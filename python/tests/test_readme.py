"""The README's Python examples, run as written, and the figures its prose states about them.

Each ```python block of README.md runs in one namespace, in order (the second block uses the
first block's imports, as a reader's notebook would); only the arrays the prose leaves to the
reader (`x`, `w` of the 2x4-mesh example) are defined here. The sentence after the Llama example
states the step time, MFU, peak memory and what the hints name: those are checked against the
report the example built, so the README cannot drift from what tpusim prints.
"""

from __future__ import annotations

import os
import pathlib
import re
from typing import Any, Dict, List

import numpy as np
import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]


def python_blocks() -> List[str]:
    text = (REPO / "README.md").read_text()
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


def prose_after_first_block() -> str:
    text = (REPO / "README.md").read_text()
    after = text.split("```python\n", 1)[1].split("```", 1)[1]
    return after.split("```", 1)[0]


@pytest.fixture(scope="module")
def readme_namespace(tmp_path_factory: pytest.TempPathFactory) -> Dict[str, Any]:
    blocks = python_blocks()
    assert len(blocks) == 2, "the README's Python examples changed: update this test"
    ns: Dict[str, Any] = {"__name__": "readme"}
    cwd = os.getcwd()
    os.chdir(tmp_path_factory.mktemp("readme"))
    try:
        exec(compile(blocks[0], "README.md (Llama example)", "exec"), ns)
        ns["llama_report"], ns["llama_mesh"] = ns["report"], ns["mesh"]
        ns["x"] = np.arange(8 * 16, dtype=np.float32).reshape(8, 16) / 100
        ns["w"] = np.arange(16 * 4, dtype=np.float32).reshape(16, 4) / 50
        exec(compile(blocks[1], "README.md (2x4 mesh example)", "exec"), ns)
        ns["views_dir"] = pathlib.Path("views").resolve()
    finally:
        os.chdir(cwd)
    return ns


def test_the_llama_example_predicts_what_the_readme_says(readme_namespace: Dict[str, Any]) -> None:
    report = readme_namespace["llama_report"]
    prose = " ".join(prose_after_first_block().split())
    m = re.search(r"about ([\d.]+) s and (\d+)% MFU in ([\d.]+) GiB of the ([\d.]+) GiB HBM", prose)
    assert m, prose
    step_s, mfu_pct, peak_gib, hbm_gib = (float(g) for g in m.groups())
    # The prose rounds: 2.7 s is 2.65-2.75 s, 25% is 24.5-25.5%.
    assert abs(report.step_time_s - step_s) <= 0.05, report.step_time_s
    assert abs(100 * report.mfu - mfu_pct) <= 0.5, report.mfu
    assert abs(report.peak_memory_bytes / 2**30 - peak_gib) <= 0.05, report.peak_memory_bytes
    capacity = report.to_dict()["memory"]["capacity_bytes"]
    assert abs(capacity / 2**30 - hbm_gib) <= 0.05
    # "its hints name what costs most: the tensor-parallel all-reduces ... and HBM-bound
    # element-wise kernels"
    assert "tensor-parallel all-reduces" in prose and "HBM-bound" in prose
    hints = report.hints
    assert any("all-reduces over torus axes" in h and "tensor parallelism" in h for h in hints), hints
    assert any("HBM-bound" in h for h in hints), hints


def test_the_llama_example_renders_and_compares(readme_namespace: Dict[str, Any]) -> None:
    report = readme_namespace["llama_report"]
    text = str(report)
    assert "step time" in text and "made of" in text
    assert "tpusim-roofline" in report._repr_html_()
    assert len(report.op_list) > 0
    other = readme_namespace["tpusim"].analyze(
        readme_namespace["train_step"],
        readme_namespace["params"],
        readme_namespace["tokens"],
        mesh=readme_namespace["llama_mesh"],
        chip="v6e",
        topology="16x16",
    )
    comparison = str(report.compare(other))
    assert "v5e" in comparison and "v6e" in comparison


def test_the_mesh_example_runs_analyzes_and_writes_views(readme_namespace: Dict[str, Any]) -> None:
    ns = readme_namespace
    kinds = [c["kind"] for c in ns["report"].collectives]
    assert kinds == ["all-reduce"], kinds  # "one all-reduce", as the README's comment says
    assert ns["report"].network is not None
    expected = np.asarray(ns["step"](ns["x"], ns["w"]))
    np.testing.assert_allclose(ns["y"], expected, rtol=1e-6)
    views = ns["views_dir"]
    assert (views / "report.html").exists() and (views / "trace.json.gz").exists()
    assert list(views.glob("plugins/profile/*/*.xplane.pb"))
