"""Errors are tpusim exceptions carrying the CLI's diagnostic text; nothing panics."""

from __future__ import annotations

import pathlib
import threading
import time

import numpy as np
import pytest
import tpusim

from programs import lowered

BAD_OPCODE = """HloModule m

ENTRY e {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT x = f32[] ad(a, b)
}
"""

BAD_SHAPE = """HloModule m

ENTRY e {
  a = f32[2] parameter(0)
  ROOT x = f32[3] negate(a)
}
"""


def test_hierarchy() -> None:
    for cls in (
        tpusim.ParseError,
        tpusim.VerifyError,
        tpusim.ChipError,
        tpusim.ArgumentError,
        tpusim.UnsupportedError,
        tpusim.LimitError,
        tpusim.InternalError,
    ):
        assert issubclass(cls, tpusim.TpusimError)
    assert issubclass(tpusim.TpusimError, Exception)


def test_parse_error_points_at_the_source() -> None:
    with pytest.raises(tpusim.ParseError) as err:
        tpusim.analyze(BAD_OPCODE)
    text = str(err.value)
    assert "unknown opcode 'ad'" in text
    assert "<string>:6:" in text
    assert "did you mean 'add'?" in text
    assert "^^" in text


def test_parse_error_names_the_file(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "model.hlo"
    path.write_text(BAD_OPCODE)
    with pytest.raises(tpusim.ParseError, match=f"{path}:6:"):
        tpusim.run(path)


def test_verify_error_points_at_the_instruction() -> None:
    with pytest.raises(tpusim.VerifyError) as err:
        tpusim.analyze(BAD_SHAPE)
    assert "<string>:5:" in str(err.value) and "f32[3]" in str(err.value)


def nested_calls(calls: int) -> str:
    """A module whose entry reaches a `negate` through `calls` nested calls."""
    text = "HloModule deep\n\nc0 {\n  p = f32[4] parameter(0)\n  ROOT r = f32[4] negate(p)\n}\n"
    for i in range(1, calls):
        text += f"\nc{i} {{\n  p = f32[4] parameter(0)\n  ROOT r = f32[4] call(p), to_apply=c{i - 1}\n}}\n"
    return text + f"\nENTRY e {{\n  p = f32[4] parameter(0)\n  ROOT r = f32[4] call(p), to_apply=c{calls - 1}\n}}\n"


def test_a_deep_call_chain_is_a_verify_error_not_a_crash() -> None:
    # 8,000 nested calls once overflowed the native stack and killed Python (SIGSEGV).
    deep = nested_calls(8000)
    with pytest.raises(tpusim.VerifyError, match="nest 8000 calls deep"):
        tpusim.analyze(deep)
    with pytest.raises(tpusim.VerifyError, match="nest 8000 calls deep"):
        tpusim.run(deep, np.ones(4, np.float32))
    # The interpreter lives on, and a shallow chain still runs.
    x = np.arange(4, dtype=np.float32)
    (out,) = tpusim.run(nested_calls(10), x)
    np.testing.assert_array_equal(out, -x)


def test_invalid_utf8_is_a_parse_error(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "bin.hlo"
    path.write_bytes(b"HloModule m\n\xff\xfe")
    with pytest.raises(tpusim.ParseError, match="offset 12"):
        tpusim.analyze(path)


def test_missing_file_is_an_os_error(tmp_path: pathlib.Path) -> None:
    with pytest.raises(FileNotFoundError):
        tpusim.analyze(tmp_path / "nope.hlo")


def test_unusable_object_is_an_argument_error() -> None:
    with pytest.raises(tpusim.ArgumentError, match="cannot take HLO from a int"):
        tpusim.analyze(42)


def test_every_truncation_raises_a_tpusim_error_or_succeeds() -> None:
    # A panic would surface as pyo3's PanicException (a BaseException) and fail here.
    text = lowered("train_step").as_text(dialect="hlo")
    step = max(1, len(text) // 150)
    for cut in range(0, len(text), step):
        for call in (lambda t: tpusim.analyze(t), lambda t: tpusim.run(t)):
            try:
                call(text[:cut] + "\n")
            except tpusim.TpusimError:
                pass


def test_long_work_releases_the_gil(repo: pathlib.Path) -> None:
    # While another thread analyzes a large module, this thread keeps running Python.
    big = (repo / "testdata/corpus/xla/zml__xla__xla__tools__benchmarks__hlo__hlo_llama31_8b_bf16_1x8.hlo").read_text()
    started = threading.Event()
    done = []

    def work() -> None:
        started.set()
        t0 = time.perf_counter()
        tpusim.analyze(big)
        done.append(time.perf_counter() - t0)

    worker = threading.Thread(target=work)
    worker.start()
    started.wait()
    ticks = [time.perf_counter()]
    while worker.is_alive():
        ticks.append(time.perf_counter())
    worker.join()
    longest_pause = max(b - a for a, b in zip(ticks, ticks[1:]))
    assert done and done[0] > 0.05, "the module should take a while to analyze"
    assert longest_pause < 0.5 * done[0], (longest_pause, done[0])
