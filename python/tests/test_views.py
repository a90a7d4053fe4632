"""tpusim.trace writes the profiler views `tpusim trace` writes; tpusim.profile
returns what `tpusim profile --json` prints."""

from __future__ import annotations

import gzip
import json
import pathlib

import pytest
import tpusim

from conftest import run_cli
from programs import lowered
from test_sharded import compiled_mlp


def test_trace_writes_the_three_views(tmp_path: pathlib.Path) -> None:
    lo = lowered("train_step")
    logdir = tmp_path / "views"
    paths = tpusim.trace(lo, chip="v5e", logdir=logdir)
    assert set(paths) == {"trace", "report", "xplane"}
    trace, report, xplane = (pathlib.Path(paths[k]) for k in ("trace", "report", "xplane"))
    assert trace == logdir / "trace.json.gz" and report == logdir / "report.html"
    # The XSpace sits where xprof looks for it: LOGDIR/plugins/profile/<run>/<host>.xplane.pb.
    assert xplane.parent.parent == logdir / "plugins" / "profile"
    assert xplane.name.endswith(".xplane.pb") and xplane.stat().st_size > 0
    events = json.loads(gzip.decompress(trace.read_bytes()))["traceEvents"]
    assert any(e.get("ph") == "X" for e in events)
    page = report.read_text()
    module = tpusim.analyze(lo, chip="v5e").module
    assert module in page and "v5e" in page
    assert "Network:" not in page


def test_trace_of_a_sharded_module_on_a_topology_shows_the_network(tmp_path: pathlib.Path) -> None:
    _, compiled, _ = compiled_mlp()
    paths = tpusim.trace(compiled, chip="v5e", logdir=str(tmp_path), topology="2x4", network="sim")
    page = pathlib.Path(paths["report"]).read_text()
    assert "Network:" in page
    network = tpusim.analyze(compiled, topology="2x4", network="sim").network
    assert network is not None and network in page


def test_trace_agrees_with_the_cli_report(cli: str, tmp_path: pathlib.Path) -> None:
    _, compiled, _ = compiled_mlp()
    hlo = tmp_path / "sharded.hlo"
    hlo.write_text(compiled.as_text())
    run_cli(cli, "trace", str(hlo), "--chip", "v5e", "--topology", "2x4", "--out", str(tmp_path / "cli"))
    ours = tpusim.trace(hlo, chip="v5e", logdir=tmp_path / "py", topology="2x4")
    theirs = json.loads(gzip.decompress((tmp_path / "cli" / "trace.json.gz").read_bytes()))
    mine = json.loads(gzip.decompress(pathlib.Path(ours["trace"]).read_bytes()))
    assert mine["traceEvents"] == theirs["traceEvents"]


def test_trace_errors_are_tpusim_errors(tmp_path: pathlib.Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(tpusim.TpusimError, match="cannot create"):
        tpusim.trace(lowered("loop"), logdir=blocker / "sub")
    with pytest.raises(tpusim.TopologyError):
        tpusim.trace(lowered("loop"), chip="v5e", logdir=tmp_path, topology="2x2x2")
    with pytest.raises(TypeError, match="colour"):
        tpusim.trace(lowered("loop"), logdir=tmp_path, colour="red")


@pytest.mark.parametrize("capture", ["jax_mlp", "jax_cpu/vm.xplane.pb"])
def test_profile_is_the_cli_json(cli: str, repo: pathlib.Path, capture: str) -> None:
    path = repo / "testdata/profiles" / capture
    expected = json.loads(run_cli(cli, "profile", str(path), "--json"))
    got = tpusim.profile(path)
    assert got == expected
    assert got["ops"] and not any("predicted_avg_s" in o for o in got["ops"])


def test_profile_with_predictions_is_the_cli_json(cli: str, repo: pathlib.Path) -> None:
    path = repo / "testdata/profiles/jax_mlp"
    hlo = path / "step.hlo"
    flags = ["--json", "--hlo", str(hlo), "--chip", "v5e"]
    expected = json.loads(run_cli(cli, "profile", str(path), *flags))
    got = tpusim.profile(str(path), hlo=hlo, chip="v5e")
    assert got == expected
    predicted = [o for o in got["ops"] if "predicted_avg_s" in o]
    assert predicted and all(o["predicted_avg_s"] > 0 for o in predicted)
    # The module may be given as text too.
    assert tpusim.profile(path, hlo=hlo.read_text(), chip="v5e") == expected


def test_profile_errors(tmp_path: pathlib.Path, repo: pathlib.Path) -> None:
    with pytest.raises(tpusim.TpusimError, match="no .xplane.pb"):
        tpusim.profile(tmp_path)
    with pytest.raises(tpusim.ArgumentError, match="both"):
        tpusim.profile(repo / "testdata/profiles/jax_mlp", chip="v5e")
    with pytest.raises(tpusim.ChipError):
        tpusim.profile(repo / "testdata/profiles/jax_mlp", hlo=lowered("loop"), chip="v9z")


def test_trace_never_overwrites_unless_forced_and_writes_the_same_bytes(tmp_path: pathlib.Path) -> None:
    lo = lowered("loop")
    first = tpusim.trace(lo, chip="v5e", logdir=tmp_path)
    before = {k: pathlib.Path(p).read_bytes() for k, p in first.items()}
    with pytest.raises(tpusim.TpusimError, match="already exists"):
        tpusim.trace(lo, chip="v5e", logdir=tmp_path)
    again = tpusim.trace(lo, chip="v5e", logdir=tmp_path, force=True)
    assert again == first
    assert {k: pathlib.Path(p).read_bytes() for k, p in again.items()} == before
    stamped = tpusim.trace(lo, chip="v5e", logdir=tmp_path / "stamped", timestamp=True)
    assert pathlib.Path(stamped["xplane"]).parent.name != "tpusim"
