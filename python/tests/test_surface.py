"""A user's first hour: the inputs tpusim takes (gzip, pytrees), what it refuses
(StableHLO text, with the fix), and the notebook surface of a Report."""

from __future__ import annotations

import gzip
import pathlib
import sys
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import tpusim

from programs import PROGRAMS, lowered, normal


def test_gzip_files_read_like_plain_text(tmp_path: pathlib.Path) -> None:
    text = lowered("mlp_f32").as_text(dialect="hlo")
    path = tmp_path / "mlp.hlo.gz"
    path.write_bytes(gzip.compress(text.encode()))
    assert tpusim.analyze(path).to_json() == tpusim.analyze(text).to_json()
    args = PROGRAMS["mlp_f32"][1]
    (got,) = tpusim.run(str(path), *args)
    np.testing.assert_allclose(got, jax.jit(PROGRAMS["mlp_f32"][0])(*args), rtol=1e-5, atol=1e-5)


def test_stablehlo_text_is_refused_with_the_fix(tmp_path: pathlib.Path) -> None:
    mlir = lowered("mlp_f32").as_text()  # StableHLO: JAX's default dialect
    assert mlir.lstrip().startswith("module @")
    path = tmp_path / "f.mlir"
    path.write_text(mlir)
    for given in (mlir, path, mlir.encode()):
        with pytest.raises(tpusim.ParseError) as e:
            tpusim.analyze(given)
        assert "StableHLO" in str(e.value)
        assert 'as_text(dialect="hlo")' in str(e.value)


def params_step(params: Any, batch: Any) -> Any:
    x, (scale,) = batch
    h = jnp.tanh(x @ params["w1"] + params["b"])
    return {"out": h @ params["w2"] * scale, "aux": (h.sum(), x.mean())}


def test_run_takes_pytrees_and_returns_the_program_structure() -> None:
    params = {"w2": normal(8, 3), "w1": normal(4, 8), "b": normal(8)}
    batch = (normal(2, 4), [np.float32(0.5)])
    want = jax.jit(params_step)(params, batch)
    got = tpusim.run(jax.jit(params_step).lower(params, batch), params, batch)
    assert str(jax.tree_util.tree_structure(got)) == str(jax.tree_util.tree_structure(want))
    for g, w in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
        np.testing.assert_allclose(g, np.asarray(w), rtol=1e-5, atol=1e-5)


def test_plain_flatten_without_jax_follows_jax_order() -> None:
    from tpusim import _arrays

    tree = {"b": [1, (2, 3)], "a": {"y": 4, "x": 5}, "c": None}
    assert _arrays._plain_leaves(tree) == jax.tree_util.tree_leaves(tree) == [5, 4, 1, 2, 3]


def test_str_is_a_multiline_summary() -> None:
    report = tpusim.analyze(lowered("train_step"), chip="v5e")
    text = str(report)
    assert text.count("\n") >= 5
    assert "step time" in text and "peak memory" in text and "GiB" in text
    # What the peak is made of, every kind of buffer live at it.
    made_of = next(line for line in text.splitlines() if "made of" in line)
    kinds = report.to_dict()["memory"]["peak_by_kind"]
    assert sum(k["bytes"] for k in kinds) == report.peak_memory_bytes
    assert all(f"{k['kind']} buffer" in made_of for k in kinds)
    assert report.op_list[0]["name"] in text


def test_repr_html_has_summary_roofline_top_ops_and_memory() -> None:
    page = tpusim.analyze(lowered("train_step"), chip="v5e")._repr_html_()
    for section in ("step time", "tpusim-roofline", "<th>op</th>", "Memory at the peak", "GiB"):
        assert section in page, section


def test_ops_is_a_dataframe_with_pandas_and_a_list_without(monkeypatch: pytest.MonkeyPatch) -> None:
    pandas = pytest.importorskip("pandas")
    report = tpusim.analyze(lowered("train_step"), chip="v5e")
    frame = report.ops
    assert isinstance(frame, pandas.DataFrame)
    assert list(frame["name"]) == [o["name"] for o in report.op_list]
    monkeypatch.setitem(sys.modules, "pandas", None)
    assert report.ops == report.op_list


def test_compare_two_chips_side_by_side() -> None:
    a = tpusim.analyze(lowered("train_step"), chip="v5e")
    b = tpusim.analyze(lowered("train_step"), chip="v5p")
    c = a.compare(b)
    text = str(c)
    assert "v5e" in text and "v5p" in text and "step time" in text
    step = next(r for r in c.rows if r[0] == "step time")
    assert step[3] == f"{b.step_time_s / a.step_time_s:.3g}x"
    assert "<table class='tpusim-compare'>" in c._repr_html_()
