"""The type stubs match the installed package (mypy.stubtest) and type-check."""

from __future__ import annotations

import pathlib
import subprocess
import sys

# stubtest checks the package and every submodule (the native one included) against
# what they define at run time.
STUBBED = ["tpusim"]


def test_stubtest_passes() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "mypy.stubtest", *STUBBED],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_tests_type_check() -> None:
    here = pathlib.Path(__file__).parent
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", str(here)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_example_type_checks(tmp_path: pathlib.Path) -> None:
    example = tmp_path / "example.py"
    example.write_text(
        "import numpy as np\n"
        "import tpusim\n"
        "r: tpusim.Report = tpusim.analyze('HloModule m', chip='v5e')\n"
        "t: float = r.step_time_s\n"
        "m: int | None = r.peak_memory_bytes\n"
        "outs: list[np.ndarray] = tpusim.run('x', np.zeros(3))\n"
        "ids = [c['id'] for c in tpusim.chips()]\n"
        "pod: tpusim.Report = tpusim.analyze('x', topology='4x4', slices=2, network='sim')\n"
        "fn: tpusim.Report = tpusim.analyze(lambda x: x, 1.0, mesh=None, chip='v5e', topology='16x16')\n"
        "exposed: float = pod.exposed_communication_s\n"
        "views: dict[str, str] = tpusim.trace('x', chip='v4', logdir='out', topology='2x2x2')\n"
        "ops = tpusim.profile('capture', hlo='x', chip='v5e')['ops']\n"
        "outs2 = tpusim.run('x', np.zeros(3), max_memory='8G', output_sharding='{replicated}')\n"
        "bad: str = r.mfu\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", str(example)], capture_output=True, text=True
    )
    # Exactly the one deliberate mistake is found: the package's types are seen.
    assert "example.py:14: error: Incompatible types in assignment" in done.stdout, done.stdout
    assert "Found 1 error" in done.stdout, done.stdout
