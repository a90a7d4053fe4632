"""Fidelity benchmark: tpusim's predictions against published TPU training runs.

For every row of measured_dev.json whose program exists under bench/fidelity/hlo/ (see
generate.py), runs `tpusim analyze FILE --chip C --topology T --slices S --json` and prints predicted
vs measured MFU and step time, the error, and peak memory against the chip's HBM.

  python3 bench/fidelity/run.py                          # release binary, program kind picked automatically
  python3 bench/fidelity/run.py --program xla --markdown # force XLA's partitioned programs, markdown table

Program kinds: `pre` is the pre-partition program (needs `tpusim partition`, detected via
`tpusim partition --help`); `xla` is XLA's partitioned per-device program compiled on fake CPU devices.

MFU uses the FLOP formula of the published figures, computed here from the configuration (not from
tpusim's FLOP count): 6 x params x tokens + causal attention for v5e/v5p, 6 x params x tokens for v4.
Measured step time = those FLOPs / (measured MFU x the chip's peak bf16 FLOP/s); for MLPerf it is
per-device tokens / measured tokens/s/chip. Error = predicted / measured MFU - 1
(= measured / predicted step time - 1).
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))

import configs  # noqa: E402
from generate import XLA_STANDIN  # noqa: E402
from model import maxtext_flops_per_device  # noqa: E402


def bf16_peaks(tpusim: str) -> dict[str, float]:
    """Each chip's bf16 matmul peak from tpusim's own database: the MFU denominator of the published
    figures (not the dtype tpusim picks for its own MFU, which is int8 for an int8-heavy program)."""
    p = subprocess.run([tpusim, "chips", "--json"], capture_output=True, text=True, check=True)
    return {c["id"]: c["matmul"]["bf16_flops_per_s"] for c in json.loads(p.stdout)}


def supports_partition(tpusim: str) -> bool:
    p = subprocess.run([tpusim, "partition", "--help"], capture_output=True, text=True)
    return p.returncode == 0


def priced_placement(row: configs.Row, program: str) -> tuple[str, int]:
    """Topology and slices the program is priced on: a stand-in for XLA programs of runs too large
    for fake CPU devices (same per-device shapes; see generate.XLA_STANDIN)."""
    if program == "xla" and row.id in XLA_STANDIN:
        s = XLA_STANDIN[row.id]
        return s.topology, s.slices
    return row.topology, row.slices


def mesh_flags(row: configs.Row, program: str) -> list[str]:
    """XLA's programs number their devices by the mesh generate.py reshaped jax.devices() to:
    `--mesh` places them as JAX lays that mesh on a TPU slice (tpusim reads the mesh of a
    pre-partition program from its shardings)."""
    if program != "xla":
        return []
    data = XLA_STANDIN[row.id].data if row.id in XLA_STANDIN else row.run.data
    return ["--mesh", f"{data}x{row.run.ici_fsdp}x{row.run.ici_tensor}"]


def priced_chips(row: configs.Row, program: str) -> int:
    topology, slices = priced_placement(row, program)
    return math.prod(int(d) for d in topology.split("x")) * slices


def analyze(tpusim: str, row: configs.Row, program: str, hlo_gz: pathlib.Path, tmp: pathlib.Path,
            extra: list[str], chip_file: pathlib.Path | None = None) -> dict:
    plain = tmp / hlo_gz.name.removesuffix(".gz")
    plain.write_bytes(gzip.decompress(hlo_gz.read_bytes()))
    topology, slices = priced_placement(row, program)
    chip = ["--chip-file", str(chip_file)] if chip_file else ["--chip", row.chip]
    cmd = [tpusim, "analyze", str(plain), *chip, "--topology", topology,
           "--slices", str(slices), "--json", *mesh_flags(row, program), *row.compiler_flags,
           *extra]
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.time() - t0
    plain.unlink()
    if p.returncode != 0:
        reason = (p.stderr.strip().splitlines() or [f"exit {p.returncode}"])[-1]
        return {"error": reason, "tpusim_s": wall}
    out = json.loads(p.stdout)
    out = out[0] if isinstance(out, list) else out
    out["tpusim_s"] = wall
    return out


def xla_cpu_bytes(row_id: str, program: str) -> int | None:
    """XLA:CPU's own buffer assignment for the fake-device program (arguments + temporaries +
    outputs not aliased to arguments), recorded by generate.py: a reference, not a TPU figure."""
    times = HERE / "hlo" / "generation_times.json"
    if program != "xla" or not times.exists():
        return None
    m = json.loads(times.read_text()).get(f"{row_id}.xla", {}).get("xla_cpu_analysis")
    if not m:
        return None
    return (m["argument_size_in_bytes"] + m["temp_size_in_bytes"] + m["output_size_in_bytes"]
            - m["alias_size_in_bytes"])


def evaluate(row: configs.Row, res: dict, program: str, peak: float) -> dict:
    run = row.run
    flops = maxtext_flops_per_device(run, row.causal_attention_flops)
    tokens = run.per_device_batch * run.seq
    if row.measured_mfu is not None:
        meas_step = flops / (row.measured_mfu * peak)
    else:
        meas_step = tokens / row.measured_tokens_per_s_per_chip
    pred_step = res["step_time_s"]
    mem = res.get("memory", {})
    hbm = mem.get("capacity_bytes")
    peak_mem = res.get("peak_memory_bytes")
    return {
        "id": row.id,
        "chip": row.chip,
        "chips": row.chips,
        "model_flops_per_device": flops,
        "pred_step_s": pred_step,
        "meas_step_s": meas_step,
        "pred_mfu": flops / (pred_step * peak),
        "meas_mfu": flops / (meas_step * peak),
        "pred_tokens_per_s_per_chip": tokens / pred_step,
        "meas_tokens_per_s_per_chip": tokens / meas_step,
        "error": meas_step / pred_step - 1.0,
        "peak_memory_bytes": peak_mem,
        "hbm_bytes": hbm,
        "xla_cpu_memory_bytes": xla_cpu_bytes(row.id, program),
        "fits": None if peak_mem is None or hbm is None else peak_mem <= hbm,
        "exposed_communication_s": res.get("exposed_communication_s"),
        "devices_in_program": res.get("devices"),
        "tpusim_s": res["tpusim_s"],
        "priced_on": "{} x {} slice(s)".format(*priced_placement(row, program)),
        "runs_on": f"{row.topology} x {row.slices} slice(s)",
        "priced_chips": priced_chips(row, program),
    }


def fmt_table(results: list[dict], failures: list[tuple[str, str]], program: str, markdown: bool) -> str:
    head = ["id", "chip", "chips", "pred step s", "meas step s", "pred MFU", "meas MFU", "error",
            "peak mem GiB", "XLA:CPU GiB", "HBM GiB", "fits"]
    rows = []
    for r in results:
        gib = lambda b: "-" if b is None else f"{b / 2**30:.1f}"  # noqa: E731
        rows.append([r["id"], r["chip"], str(r["chips"]), f"{r['pred_step_s']:.3g}", f"{r['meas_step_s']:.3g}",
                     f"{r['pred_mfu']:.1%}", f"{r['meas_mfu']:.1%}", f"{r['error']:+.1%}",
                     gib(r["peak_memory_bytes"]), gib(r["xla_cpu_memory_bytes"]), gib(r["hbm_bytes"]),
                     {True: "yes", False: "NO", None: "?"}[r["fits"]]])
    lines = []
    if markdown:
        lines.append("| " + " | ".join(head) + " |")
        lines.append("|" + "---|" * len(head))
        lines += ["| " + " | ".join(r) + " |" for r in rows]
    else:
        widths = [max(len(x) for x in col) for col in zip(head, *rows)]
        for r in [head, *rows]:
            lines.append("  ".join(x.ljust(w) for x, w in zip(r, widths)))
    lines.append("")
    mlperf = [r for r in results if r["id"].startswith("gpt3")]
    for r in mlperf:
        lines.append(f"MLPerf {r['id']}: predicted {r['pred_tokens_per_s_per_chip']:.1f} tokens/s/chip, "
                     f"measured {r['meas_tokens_per_s_per_chip']:.1f} ({r['error']:+.1%})")
    if results:
        errs = [abs(r["error"]) for r in results]
        worst = max(results, key=lambda r: abs(r["error"]))
        fits = sum(1 for r in results if r["fits"])
        lines.append(f"program kind: {program}; rows priced: {len(results)}")
        lines.append(f"median |error|: {statistics.median(errs):.1%}")
        lines.append(f"worst |error|: {abs(worst['error']):.1%} ({worst['id']})")
        lines.append(f"fit in HBM: {fits} of {len(results)}")
    for r in results:
        devices = r["devices_in_program"]
        if devices is not None and devices < r["priced_chips"]:
            lines.append(f"warning: {r['id']}: tpusim priced a program of {devices} device(s) for {r['priced_chips']} "
                         f"chips (a pre-partition program priced without partitioning?)")
        if r["priced_on"] != r["runs_on"]:
            lines.append(f"assumption: {r['id']} priced on {r['priced_chips']} chips ({r['priced_on']}, not "
                         f"{r['runs_on']}): XLA's program compiled at a smaller data-parallel degree, "
                         f"same per-device shapes")
    for row_id, why in failures:
        lines.append(f"not priced: {row_id}: {why}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tpusim", default=str(ROOT / "target" / "release" / "tpusim"))
    ap.add_argument("--program", choices=["auto", "pre", "xla"], default="auto",
                    help="auto: pre when `tpusim partition` exists, else xla")
    ap.add_argument("--only", nargs="*", help="row ids (default: all)")
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--json", metavar="FILE", help="also write every row's figures to FILE")
    ap.add_argument("tpusim_args", nargs=argparse.REMAINDER, help="after --: extra `tpusim analyze` flags")
    a = ap.parse_args()
    extra = [x for x in a.tpusim_args if x != "--"]

    program = a.program
    if program == "auto":
        program = "pre" if supports_partition(a.tpusim) else "xla"
    results, failures = [], []
    peaks = bf16_peaks(a.tpusim)
    with tempfile.TemporaryDirectory(prefix="tpusim-fidelity-") as tmp:
        for row in configs.rows():
            if a.only and row.id not in a.only:
                continue
            hlo = HERE / "hlo" / f"{row.id}.{program}.hlo.gz"
            if not hlo.exists():
                failures.append((row.id, f"no program {hlo.name} (see generate.py / README)"))
                continue
            res = analyze(a.tpusim, row, program, hlo, pathlib.Path(tmp), extra)
            if "error" in res:
                failures.append((row.id, f"tpusim failed: {res['error']}"))
                continue
            results.append(evaluate(row, res, program, peaks[row.chip]))
    print(fmt_table(results, failures, program, a.markdown))
    if a.json:
        pathlib.Path(a.json).write_text(json.dumps({"program": program, "rows": results,
                                                     "not_priced": dict(failures)}, indent=1) + "\n")


if __name__ == "__main__":
    main()
