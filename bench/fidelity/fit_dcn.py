"""Derive the chip files' `dcn_efficiency` from the published multi-slice runs.

Each multi-slice row (`<model>_x<N>`, N slices over DCN) has a single-slice twin (`<model>_x1`)
with the same per-chip batch and sharding inside the slice, so the step grows from x1 to xN only
by what crossing DCN costs. This script prices every xN program at a grid of DCN efficiencies
(a copy of the chip file with `dcn_efficiency` replaced, passed as `--chip-file`), compares the
predicted slowdown step(xN)/step(x1) with the measured one, and reports:

- the efficiency that minimises the mean |error| of the slowdown ratio over all pairs;
- leave-one-out: for each pair, the efficiency fitted on the other pairs and the held-out error.

Fitting the ratio, not the rows' own errors, keeps the single-slice error out of the DCN constant.

Usage: python3 bench/fidelity/fit_dcn.py [--tpusim PATH] [--program pre|xla]
"""
from __future__ import annotations

import argparse
import pathlib
import re
import statistics
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))

import configs  # noqa: E402
import run  # noqa: E402

GRID = [round(0.04 + 0.01 * i, 2) for i in range(27)] + [0.4, 0.6, 0.8, 1.0]


def chip_file(chip: str, efficiency: float, tmp: pathlib.Path) -> pathlib.Path:
    text = (ROOT / "crates" / "arch" / "chips" / f"{chip}.toml").read_text()
    text, n = re.subn(r"(?m)^dcn_efficiency = .*$", f"dcn_efficiency = {efficiency}", text)
    if n != 1:
        sys.exit(f"{chip}.toml: expected one dcn_efficiency line, found {n}")
    path = tmp / f"{chip}-dcn-{efficiency}.toml"
    path.write_text(text)
    return path


def pairs() -> list[tuple[configs.Row, configs.Row]]:
    rows = configs.by_id()
    out = []
    for r in rows.values():
        twin = re.sub(r"_x\d+$", "_x1", r.id)
        if r.slices > 1 and twin in rows:
            out.append((rows[twin], r))
    return out


def step(tpusim: str, row: configs.Row, program: str, tmp: pathlib.Path,
         chip: pathlib.Path | None = None) -> float:
    hlo = HERE / "hlo" / f"{row.id}.{program}.hlo.gz"
    res = run.analyze(tpusim, row, program, hlo, tmp, [], chip)
    if "error" in res:
        sys.exit(f"{row.id}: tpusim failed: {res['error']}")
    return res["step_time_s"]


def measured_step(row: configs.Row, peaks: dict[str, float]) -> float:
    return run.evaluate(row, {"step_time_s": 1.0, "tpusim_s": 0.0}, "pre", peaks[row.chip])["meas_step_s"]


def best(errors: dict[float, list[float]], keep: list[int]) -> float:
    return min(GRID, key=lambda f: statistics.mean(abs(errors[f][i]) for i in keep))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tpusim", default=str(ROOT / "target" / "release" / "tpusim"))
    ap.add_argument("--program", choices=["pre", "xla"], default="pre")
    a = ap.parse_args()
    peaks = run.bf16_peaks(a.tpusim)
    ps = pairs()
    with tempfile.TemporaryDirectory(prefix="tpusim-dcn-") as d:
        tmp = pathlib.Path(d)
        meas = [measured_step(n, peaks) / measured_step(one, peaks) for one, n in ps]
        base = [step(a.tpusim, one, a.program, tmp) for one, _ in ps]
        errors: dict[float, list[float]] = {}
        slow: dict[float, list[float]] = {}
        for f in GRID:
            s = [step(a.tpusim, n, a.program, tmp, chip_file(n.chip, f, tmp)) / b
                 for (_, n), b in zip(ps, base)]
            slow[f] = s
            errors[f] = [p / m - 1.0 for p, m in zip(s, meas)]
    everyone = list(range(len(ps)))
    fit = best(errors, everyone)
    print(f"program: {a.program}; slowdown = step(xN) / step(x1); error = predicted / measured slowdown - 1")
    print(f"{'pair':28s} {'measured':>9s} {'line rate':>10s} {'fit ' + str(fit):>10s} {'LOO eff':>8s} {'held-out':>9s}")
    held = []
    for i, ((one, n), m) in enumerate(zip(ps, meas)):
        loo = best(errors, [j for j in everyone if j != i])
        held.append(errors[loo][i])
        print(f"{one.id + ' -> ' + n.id:28s} {m:9.3f} {slow[1.0][i]:10.3f} {slow[fit][i]:10.3f} "
              f"{loo:8.2f} {100 * errors[loo][i]:+8.1f}%")
    mean = lambda xs: 100 * statistics.mean(abs(x) for x in xs)  # noqa: E731
    print(f"mean |error|: line rate {mean(errors[1.0]):.1f}%, fitted {fit} {mean(errors[fit]):.1f}% "
          f"(in-sample), leave-one-out {mean(held):.1f}%")


if __name__ == "__main__":
    main()
