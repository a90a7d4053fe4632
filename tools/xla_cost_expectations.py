#!/usr/bin/env python3
"""Records XLA's HloCostAnalysis totals for the HLO corpus.

For every corpus file that XLA's parser accepts and whose text contains no
``custom-call`` (XLA cannot cost those meaningfully), this parses the module
with ``jaxlib._hlo.hlo_module_from_text`` and runs

    jaxlib._jax.hlo_module_cost_analysis(client, module) -> dict

with the jax CPU client (``jax.devices("cpu")[0].client``).  That runs
XLA's HloCostAnalysis, with the CPU backend's shape-size function, over the
module exactly as parsed (no compiler passes).  It returns a flat dict of
module totals:

  "flops", "transcendentals", "bytes accessed", "optimal_seconds",
  "bytes accessed<k>{<shape index>}"  bytes read through operand k,
  "bytes accessedout{<shape index>}"  bytes written to outputs,
  "utilization<k>{}"                  per-operand utilization (one key per
                                      operand position seen; there can be
                                      hundreds of them; these are dropped here).

Output: testdata/xla_cost.json (sorted keys, indent 1), one entry per file:

  {path: {"flops": float, "transcendentals": float, "bytes_accessed": float,
          "xla": {<every key of the returned dict except "utilization*",
                  verbatim, with its value>}}}

Files where cost analysis raises are left out and listed on stdout.

Note: HloCostAnalysis counts a while body once (it ignores trip counts, even
a known_trip_count backend config), and a fusion as the sum of its fused
instructions' flops with bytes counted at the fusion boundary.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys

import jax
from jaxlib import _hlo, _jax

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CORPUS_GLOBS = (
    "testdata/corpus/xla/*.hlo",
    "testdata/corpus/jax_generated/*.hlo",
    "testdata/corpus/jax_cases/*/pre.hlo",
    "testdata/corpus/jax_cases/*/post.hlo",
)


def corpus_files(root: str) -> list[str]:
    """All corpus files, as sorted paths relative to ``root``."""
    files = set()
    for pattern in CORPUS_GLOBS:
        for path in glob.glob(os.path.join(root, pattern)):
            files.add(os.path.relpath(path, root))
    return sorted(files)


def cost_client():
    """The client hlo_module_cost_analysis needs (any jax Client works)."""
    return jax.devices("cpu")[0].client


def cost_of(client, text: str) -> dict:
    """XLA's cost-analysis dict for an HLO module given as text."""
    module = _hlo.hlo_module_from_text(text)
    return _jax.hlo_module_cost_analysis(client, module)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", default=REPO_ROOT, help="repo root (default: %(default)s)")
    ap.add_argument("--out", default="testdata/xla_cost.json",
                    help="output JSON, relative to --root (default: %(default)s)")
    ap.add_argument("files", nargs="*",
                    help="only these files (relative to --root); default: the whole corpus")
    args = ap.parse_args()
    root = os.path.abspath(args.root)

    client = cost_client()
    results: dict[str, dict] = {}
    skipped_custom_call, rejected, failed = [], [], []
    for path in args.files or corpus_files(root):
        with open(os.path.join(root, path), encoding="utf-8") as f:
            text = f.read()
        if "custom-call" in text:
            skipped_custom_call.append(path)
            continue
        try:
            module = _hlo.hlo_module_from_text(text)
        except Exception as e:
            rejected.append((path, str(e).splitlines()[0] if str(e) else type(e).__name__))
            continue
        try:
            cost = _jax.hlo_module_cost_analysis(client, module)
        except Exception as e:
            failed.append((path, str(e).splitlines()[0] if str(e) else type(e).__name__))
            continue
        finally:
            del module
        results[path] = {
            "flops": cost.get("flops", 0.0),
            "transcendentals": cost.get("transcendentals", 0.0),
            "bytes_accessed": cost.get("bytes accessed", 0.0),
            "xla": {k: v for k, v in cost.items() if not k.startswith("utilization")},
        }

    with open(os.path.join(root, args.out), "w", encoding="utf-8") as f:
        json.dump(results, f, sort_keys=True, indent=1)
        f.write("\n")

    print(f"jax {jax.__version__}: wrote {len(results)} entries to {args.out}")
    print(f"skipped (custom-call): {len(skipped_custom_call)}")
    print(f"skipped (XLA rejects): {len(rejected)}")
    for path, err in rejected:
        print(f"  {path}: {err}")
    print(f"cost analysis failed:  {len(failed)}")
    for path, err in failed:
        print(f"  {path}: {err}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
