"""tpusim's partitioning next to XLA's on the fidelity programs: what each device sends.

For every row with both programs under bench/fidelity/hlo/, prices the pre-partition program
(partitioned by tpusim) and XLA's own partitioned program (compiled on fake CPU devices), each
through tpusim's TPU compiler on the row's slice exactly as run.py does, and prints per collective
kind the bytes one device moves in one step (bytes x occurrences, loops unrolled by their trip
counts) and the time the pod model gives them. Equal bytes mean tpusim's partitioner chose XLA's
strategies for the collectives that matter at scale; the structural test
(crates/spmd/tests/structural.rs) compares small programs instruction by instruction.

  python3 bench/fidelity/collectives.py [--only ids] [--tpusim PATH] [--markdown]

Rows whose XLA program is a stand-in compiled at a smaller data-parallel degree (generate.XLA_STANDIN)
have smaller data-parallel groups in XLA's program; they are marked.
"""

from __future__ import annotations

import argparse
import collections
import pathlib
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))

import configs  # noqa: E402
from generate import XLA_STANDIN  # noqa: E402
from run import analyze  # noqa: E402

KINDS = ["all-gather", "reduce-scatter", "all-reduce", "all-to-all", "collective-permute"]


def per_kind(res: dict) -> dict[str, float]:
    """Bytes one device moves per step, by collective kind."""
    out: dict[str, float] = collections.defaultdict(float)
    for c in res.get("collectives", []):
        kind = c["kind"].removesuffix("-start")
        out[kind] += c["bytes"] * c["occurrences"]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tpusim", default=str(ROOT / "target" / "release" / "tpusim"))
    ap.add_argument("--only", nargs="*", help="row ids (default: all)")
    ap.add_argument("--markdown", action="store_true")
    a = ap.parse_args()

    head = ["id", *(f"{k} GB (tpusim / XLA)" for k in KINDS), "total ratio", "comm s (tpusim / XLA)"]
    rows, notes, ratios = [], [], []
    with tempfile.TemporaryDirectory(prefix="tpusim-collectives-") as tmp:
        for row in configs.rows():
            if a.only and row.id not in a.only:
                continue
            priced = {}
            for program in ("pre", "xla"):
                hlo = HERE / "hlo" / f"{row.id}.{program}.hlo.gz"
                if not hlo.exists():
                    break
                res = analyze(a.tpusim, row, program, hlo, pathlib.Path(tmp), [])
                if "error" in res:
                    notes.append(f"{row.id} ({program}): tpusim failed: {res['error']}")
                    break
                priced[program] = res
            if len(priced) != 2:
                continue
            pre, xla = per_kind(priced["pre"]), per_kind(priced["xla"])
            total_pre, total_xla = sum(pre.values()), sum(xla.values())
            ratio = total_pre / total_xla if total_xla else float("nan")
            standin = row.id in XLA_STANDIN
            if not standin:
                ratios.append(ratio)
            rows.append([row.id + (" *" if standin else ""),
                         *(f"{pre.get(k, 0) / 1e9:.1f} / {xla.get(k, 0) / 1e9:.1f}" for k in KINDS),
                         f"{ratio:.3f}",
                         f"{priced['pre']['communication_s']:.3g} / {priced['xla']['communication_s']:.3g}"])
    lines = []
    if a.markdown:
        lines.append("| " + " | ".join(head) + " |")
        lines.append("|" + "---|" * len(head))
        lines += ["| " + " | ".join(r) + " |" for r in rows]
    else:
        widths = [max(len(x) for x in col) for col in zip(head, *rows)]
        lines += ["  ".join(x.ljust(w) for x, w in zip(r, widths)) for r in [head, *rows]]
    lines.append("")
    if ratios:
        lines.append(f"total bytes tpusim / XLA over {len(ratios)} rows (stand-ins excluded): "
                     f"min {min(ratios):.3f}, max {max(ratios):.3f}")
    if any(r[0].endswith("*") for r in rows):
        lines.append("* XLA's program is a stand-in at a smaller data-parallel degree (generate.XLA_STANDIN)")
    lines += notes
    print("\n".join(lines))


if __name__ == "__main__":
    main()
