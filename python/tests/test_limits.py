"""Run limits: max_steps= and timeout= stop a runaway program with LimitError
naming the loop; Ctrl-C (SIGINT) stops tpusim.run, tpusim.analyze and
tpusim.trace with KeyboardInterrupt."""

from __future__ import annotations

import os
import pathlib
import signal
import threading
import time
from typing import Callable

import numpy as np
import pytest
import tpusim


def limits_file(repo: pathlib.Path, name: str) -> pathlib.Path:
    return repo / "testdata" / "limits" / name


def latency_of_sigint(work: Callable[[], object]) -> float:
    """Runs ``work`` with a SIGINT sent to this process 0.3 s in; checks that
    it raises KeyboardInterrupt and returns how long after the signal."""
    sent: list[float] = []

    def interrupt() -> None:
        sent.append(time.perf_counter())
        os.kill(os.getpid(), signal.SIGINT)

    timer = threading.Timer(0.3, interrupt)
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            work()
        return time.perf_counter() - sent[0]
    finally:
        timer.cancel()


def test_limit_error_is_a_tpusim_error() -> None:
    assert issubclass(tpusim.LimitError, tpusim.TpusimError)
    assert "LimitError" in tpusim.__all__


def test_max_steps_stops_a_never_ending_loop_naming_it(repo: pathlib.Path) -> None:
    with pytest.raises(tpusim.LimitError) as info:
        tpusim.run(limits_file(repo, "never_ending_while.hlo"), max_steps=1000)
    assert str(info.value).startswith(
        "stopped after 1000 steps in while loop 'while.12' (computation 'main.1')"
    ), str(info.value)
    assert "max_steps=" in str(info.value)


def test_every_device_stops(repo: pathlib.Path) -> None:
    # Two partitions meeting at an all-reduce inside the loop: no hang.
    with pytest.raises(tpusim.LimitError, match="while loop 'while.20'"):
        tpusim.run(limits_file(repo, "never_ending_all_reduce.hlo"), max_steps=1000)


def test_timeout_stops_soon_after_the_deadline(repo: pathlib.Path) -> None:
    t0 = time.perf_counter()
    with pytest.raises(tpusim.LimitError, match=r"^timed out after 0\.2.* 'while\.12'"):
        tpusim.run(limits_file(repo, "never_ending_while.hlo"), timeout=0.2)
    took = time.perf_counter() - t0
    assert 0.2 <= took < 10, took


def test_limits_leave_a_finite_program_alone() -> None:
    text = "HloModule m\n\nENTRY e {\n  a = f32[] constant(2)\n  ROOT b = f32[] add(a, a)\n}\n"
    (out,) = tpusim.run(text, max_steps=1000, timeout=30)
    assert float(out) == 4.0
    with pytest.raises(tpusim.LimitError, match="stopped after 1 steps"):
        tpusim.run(text, max_steps=1)


@pytest.mark.parametrize("bad", [0, -1.0, float("nan"), float("inf")])
def test_a_bad_timeout_is_an_argument_error(bad: float) -> None:
    text = "HloModule m\n\nENTRY e {\n  ROOT a = f32[] constant(2)\n}\n"
    with pytest.raises(tpusim.ArgumentError, match="timeout"):
        tpusim.run(text, timeout=bad)


@pytest.mark.parametrize("name", ["never_ending_while.hlo", "never_ending_all_reduce.hlo"])
def test_ctrl_c_raises_keyboard_interrupt(repo: pathlib.Path, name: str) -> None:
    # The timeout only keeps a broken interrupt from hanging the test suite.
    latency = latency_of_sigint(lambda: tpusim.run(limits_file(repo, name), timeout=60))
    assert latency < 2.0, latency


def long_pod_collectives(n: int) -> str:
    """A chain of ``n`` all-reduces of 64 MiB over all 4096 devices of a v5p
    16x16x16 pod: with ``network="sim"`` each is a link-level simulation of
    millions of events (tens of seconds in all)."""
    lines = [
        "HloModule long_sim, num_partitions=4096",
        "",
        "sum {",
        "  a = f32[] parameter(0)",
        "  b = f32[] parameter(1)",
        "  ROOT s = f32[] add(a, b)",
        "}",
        "",
        "ENTRY e {",
        "  x0 = f32[16777216] parameter(0)",
    ]
    for k in range(1, n + 1):
        root = "ROOT " if k == n else ""
        lines.append(
            f"  {root}x{k} = f32[16777216] all-reduce(x{k - 1}), channel_id={k}, "
            "replica_groups=[1,4096]<=[4096], use_global_device_ids=true, to_apply=sum"
        )
    lines.append("}")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("call", ["analyze", "trace"])
def test_ctrl_c_stops_analyze_and_trace(call: str, tmp_path: pathlib.Path) -> None:
    text = long_pod_collectives(100)

    def call_it() -> None:
        if call == "analyze":
            tpusim.analyze(text, chip="v5p", topology="16x16x16", network="sim")
        else:
            tpusim.trace(text, chip="v5p", logdir=tmp_path, topology="16x16x16", network="sim")

    latency = latency_of_sigint(call_it)
    assert latency < 2.0, latency


def long_partitioning(n: int) -> str:
    """``n`` adds whose sharding alternates between rows and columns over 8
    devices (no ``num_partitions``: an unpartitioned program), so the
    partitioner reshards at each one: about 11 s for 40,000 here."""
    lines = [
        "HloModule reshards",
        "",
        "ENTRY e {",
        "  x0 = f32[64,64] parameter(0), sharding={devices=[8,1]<=[8]}",
    ]
    for k in range(1, n + 1):
        root = "ROOT " if k == n else ""
        tiles = "[1,8]" if k % 2 else "[8,1]"
        lines.append(
            f"  {root}x{k} = f32[64,64] add(x{k - 1}, x{k - 1}), "
            f"sharding={{devices={tiles}<=[8]}}"
        )
    lines.append("}")
    return "\n".join(lines) + "\n"


def test_ctrl_c_stops_run_while_it_partitions() -> None:
    # An unpartitioned sharded program is partitioned before it runs; the
    # interrupt reaches the partitioner, not only the interpreter after it.
    text = long_partitioning(40_000)
    x = np.ones((64, 64), np.float32)
    latency = latency_of_sigint(lambda: tpusim.run(text, x, timeout=60))
    assert latency < 2.0, latency
