#!/usr/bin/env python3
"""Times XLA's in-process HLO parse against the whole `tpusim check` process.

XLA side (in this Python process, after one warm-up run):
  * parse:        jaxlib._hlo.hlo_module_from_text(text)
  * parse + cost  (with --cost): the parse above followed by
                  jaxlib._jax.hlo_module_cost_analysis(client, module),
                  client = jax.devices("cpu")[0].client.
The file is read once up front; reading it is not timed.

tpusim side (with --tpusim PATH; one warm-up run, then N runs):
  * `PATH check FILE`                    wall clock of the whole subprocess
  * `PATH analyze FILE --chip v5e --json` (with --cost)
If a tpusim command fails, its column shows the failure and the ratio is
left blank.

Every figure is the median of --runs runs (default 5).  ratio = xla / tpusim,
i.e. how many times faster the tpusim process is than XLA's in-process call.
Note that this favours XLA: tpusim's time includes process start-up and
reading the file, XLA's does not.

Examples:
  bench/xla_parse_time.py
  bench/xla_parse_time.py --cost --tpusim target/release/tpusim
  bench/xla_parse_time.py --runs 9 some/file.hlo other/file.hlo
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

DEFAULT_FILES = (
    "testdata/corpus/xla/zml__xla__xla__tools__benchmarks__hlo__hlo_mixtral_8x7b_bf16_1x8.hlo",
    "testdata/corpus/xla/zml__xla__xla__tools__benchmarks__hlo__hlo_llama31_8b_bf16_1x8.hlo",
)


def median_time(fn, runs: int) -> float:
    """Median wall-clock seconds of ``fn()`` over ``runs`` runs, after one warm-up.

    The result of ``fn()`` is freed outside the timed region, so destroying
    a parsed module is not counted.
    """
    fn()
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
        del result
    return statistics.median(times)


def time_process(cmd: list[str], runs: int, cwd: str, timeout: float) -> tuple[float | None, str | None]:
    """(median seconds, None) for a command that succeeds, else (None, why)."""
    def once():
        proc = subprocess.run(cmd, cwd=cwd, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, timeout=timeout)
        if proc.returncode != 0:
            err = proc.stderr.decode("utf-8", "replace").strip().splitlines()
            raise RuntimeError(f"exit {proc.returncode}" + (f": {err[0]}" if err else ""))
    try:
        return median_time(once, runs), None
    except FileNotFoundError:
        return None, f"{cmd[0]} not found"
    except subprocess.TimeoutExpired:
        return None, f"timed out after {timeout:g}s"
    except RuntimeError as e:
        return None, str(e)


def fmt_s(x: float | None) -> str:
    return "-" if x is None else f"{x:.4f}"


def fmt_ratio(a: float | None, b: float | None) -> str:
    return "-" if a is None or b is None or b == 0 else f"{a / b:.1f}x"


def print_table(header: list[str], rows: list[list[str]]) -> None:
    widths = [max(len(r[i]) for r in [header] + rows) for i in range(len(header))]
    for r in [header] + rows:
        print("  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                        for i, (c, w) in enumerate(zip(r, widths))).rstrip())


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("files", nargs="*", default=list(DEFAULT_FILES),
                    help="HLO text files, relative to --root (default: the Mixtral and "
                         "Llama 3.1 8B benchmark modules)")
    ap.add_argument("--runs", type=int, default=5, help="timed runs per figure (default: 5)")
    ap.add_argument("--cost", action="store_true",
                    help="also time parse + hlo_module_cost_analysis (and, with --tpusim, "
                         "`analyze FILE --chip v5e --json`)")
    ap.add_argument("--tpusim", help="tpusim binary; adds the tpusim columns")
    ap.add_argument("--root", default=REPO_ROOT, help="repo root (default: %(default)s)")
    ap.add_argument("--timeout", type=float, default=600.0,
                    help="seconds allowed per tpusim run (default: %(default)s)")
    args = ap.parse_args()
    root = os.path.abspath(args.root)
    tpusim = args.tpusim
    if tpusim and os.sep in tpusim and not os.path.isabs(tpusim):
        tpusim = os.path.abspath(tpusim)

    import jaxlib
    from jaxlib import _hlo, _jax
    client = None
    if args.cost:
        import jax
        client = jax.devices("cpu")[0].client

    parse_rows, cost_rows = [], []
    failures = []
    for path in args.files:
        with open(os.path.join(root, path), encoding="utf-8") as f:
            text = f.read()
        name = os.path.basename(path)
        size_mb = f"{len(text.encode()) / 1e6:.2f}"

        xla_parse = median_time(lambda: _hlo.hlo_module_from_text(text), args.runs)
        row = [name, size_mb, fmt_s(xla_parse)]
        if tpusim:
            t, err = time_process([tpusim, "check", path], args.runs, root, args.timeout)
            if err:
                failures.append(f"{name}: `tpusim check` failed: {err}")
            row += [fmt_s(t) if not err else "failed", fmt_ratio(xla_parse, t)]
        parse_rows.append(row)

        if args.cost:
            xla_cost = median_time(
                lambda: _jax.hlo_module_cost_analysis(client, _hlo.hlo_module_from_text(text)),
                args.runs)
            row = [name, size_mb, fmt_s(xla_cost)]
            if tpusim:
                t, err = time_process([tpusim, "analyze", path, "--chip", "v5e", "--json"],
                                      args.runs, root, args.timeout)
                if err:
                    failures.append(f"{name}: `tpusim analyze` failed: {err}")
                row += [fmt_s(t) if not err else "failed", fmt_ratio(xla_cost, t)]
            cost_rows.append(row)

    print(f"jaxlib {jaxlib.__version__}; median of {args.runs} runs after 1 warm-up; seconds")
    print()
    header = ["file", "MB", "xla_parse_s"]
    if tpusim:
        header += ["tpusim_check_s", "ratio"]
    print_table(header, parse_rows)
    if args.cost:
        print()
        header = ["file", "MB", "xla_parse_cost_s"]
        if tpusim:
            header += ["tpusim_analyze_s", "ratio"]
        print_table(header, cost_rows)
    if failures:
        print()
        for line in failures:
            print(f"note: {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
