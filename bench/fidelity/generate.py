"""Write the programs tpusim prices for each benchmark row into bench/fidelity/hlo/ (gzipped).

Two programs per row:
  <id>.pre.hlo.gz  the pre-partition program lowered for a TPU mesh on CPU (AbstractMesh, sharded
                   abstract arguments, Pallas TPU flash attention where the run used it); the input
                   of tpusim's partitioner path.
  <id>.xla.hlo.gz  XLA's own partitioned per-device program, compiled on N fake CPU devices (plain
                   attention: CPU cannot compile Pallas TPU kernels); the fallback until tpusim
                   partitions by itself.

Each (row, kind) is built in a child process because the fake device count must be set before jax is
imported. Usage:
  python3 bench/fidelity/generate.py                  # every row, both kinds, skipping existing files
  python3 bench/fidelity/generate.py --only v4_22b_x1 --kind xla --force
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import json
import os
import pathlib
import subprocess
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
HLO_DIR = HERE / "hlo"
TIMES = HLO_DIR / "generation_times.json"

@dataclasses.dataclass(frozen=True)
class StandIn:
    """A smaller data-parallel degree (and the topology/slices it runs on) at which a row's
    XLA-partitioned program is compiled and priced instead: the per-device program has the same
    shapes; only the data-parallel all-reduce's group is smaller."""

    data: int
    topology: str
    slices: int


# jaxlib's CPU client refuses 4096 or more fake devices ("Multiprocess computations aren't
# implemented on the CPU backend"), so the two largest runs get stand-ins of 2048 and 1536 chips.
XLA_STANDIN: dict[str, StandIn] = {
    "v5e_128b_x32": StandIn(data=8, topology="16x16", slices=8),
    "gpt3_175b_v5p_6144": StandIn(data=4, topology="8x12x16", slices=1),
}


def hlo_path(row_id: str, kind: str) -> pathlib.Path:
    return HLO_DIR / f"{row_id}.{kind}.hlo.gz"


def write_gz(path: pathlib.Path, text: str) -> None:
    # mtime=0 and no file name in the header: identical text gives identical bytes.
    with open(path, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as gz:
        gz.write(text.encode())


def build_pre(row_id: str) -> str:
    import jax
    import configs
    from model import MESH_AXES, attention_fn, make_train_step, step_args

    # GSPMD-style shardings (`sharding={devices=...}`, shard_map as SPMDFullToShardShape with
    # manual sharding), the form XLA's SPMD partitioner and tpusim's read, not Shardy's dialect.
    jax.config.update("jax_use_shardy_partitioner", False)
    row = configs.by_id()[row_id]
    mesh = jax.sharding.AbstractMesh(row.run.mesh_shape, MESH_AXES)
    run = row.run
    step = make_train_step(run.model, attention_fn(run.model, run.flash, mesh), run.remat, run.iota_embed)
    args = step_args(run, mesh)
    with jax.sharding.use_abstract_mesh(mesh):
        lowered = jax.jit(step, donate_argnums=(0, 1, 2)).trace(*args).lower(lowering_platforms=("tpu",))
    return lowered.as_text(dialect="hlo")


def build_xla(row_id: str) -> tuple[str, dict]:
    import jax
    import numpy as np
    import configs
    from model import MESH_AXES, attention_fn, make_train_step, step_args

    row = configs.by_id()[row_id]
    run = row.run
    if row_id in XLA_STANDIN:
        run = dataclasses.replace(run, data=XLA_STANDIN[row_id].data)
    devices = np.array(jax.devices()[: run.chips]).reshape(run.mesh_shape)
    mesh = jax.sharding.Mesh(devices, MESH_AXES)
    step = make_train_step(run.model, attention_fn(run.model, flash=False), run.remat, run.iota_embed)
    args = step_args(run, mesh)
    with jax.set_mesh(mesh):
        lowered = jax.jit(step, donate_argnums=(0, 1, 2)).trace(*args).lower()
        compiled = lowered.compile()
    return compiled.as_text(), xla_oracle(compiled)


def xla_oracle(compiled) -> dict:
    """XLA:CPU's own figures for the per-device program (for comparing tpusim's memory and FLOPs)."""
    mem = compiled.memory_analysis()
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, list) else cost
    fields = ["argument_size_in_bytes", "output_size_in_bytes", "alias_size_in_bytes",
              "temp_size_in_bytes", "generated_code_size_in_bytes"]
    out = {f: getattr(mem, f, None) for f in fields}
    out["flops"] = cost.get("flops")
    out["bytes_accessed"] = cost.get("bytes accessed")
    return out


def child(row_id: str, kind: str) -> None:
    t0 = time.time()
    oracle = None
    if kind == "pre":
        text = build_pre(row_id)
    else:
        text, oracle = build_xla(row_id)
    write_gz(hlo_path(row_id, kind), text)
    print(json.dumps({"seconds": round(time.time() - t0, 1), "bytes": len(text), "xla": oracle}))


def fake_devices(row_id: str) -> int:
    sys.path.insert(0, str(HERE))
    import configs

    run = configs.by_id()[row_id].run
    data = XLA_STANDIN[row_id].data if row_id in XLA_STANDIN else run.data
    return data * run.ici_fsdp * run.ici_tensor


def spawn(row_id: str, kind: str, timeout: float) -> dict:
    env = dict(os.environ)
    n = fake_devices(row_id) if kind == "xla" else 1
    env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={n}"
    env["JAX_PLATFORMS"] = "cpu"
    cmd = [sys.executable, str(pathlib.Path(__file__).resolve()), "--child", row_id, "--kind", kind]
    t0 = time.time()
    try:
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, cwd=HERE)
    except subprocess.TimeoutExpired:
        return {"ok": False, "why": f"timed out after {timeout:.0f} s", "seconds": round(time.time() - t0, 1)}
    if p.returncode != 0:
        return {"ok": False, "why": p.stderr.strip().splitlines()[-1] if p.stderr.strip() else f"rc {p.returncode}",
                "seconds": round(time.time() - t0, 1)}
    info = json.loads(p.stdout.strip().splitlines()[-1])
    res = {"ok": True, "seconds": round(time.time() - t0, 1), "hlo_bytes": info["bytes"], "fake_devices": n}
    if info["xla"]:
        res["xla_cpu_analysis"] = info["xla"]
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", nargs="*", help="row ids (default: all)")
    ap.add_argument("--kind", choices=["pre", "xla", "both"], default="both")
    ap.add_argument("--force", action="store_true", help="rebuild files that exist")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds per program")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        sys.path.insert(0, str(HERE))
        child(a.child, a.kind)
        return

    sys.path.insert(0, str(HERE))
    import configs

    HLO_DIR.mkdir(exist_ok=True)
    times = json.loads(TIMES.read_text()) if TIMES.exists() else {}
    kinds = ["pre", "xla"] if a.kind == "both" else [a.kind]
    ids = a.only or [r.id for r in configs.rows()]
    for row_id in ids:
        for kind in kinds:
            if hlo_path(row_id, kind).exists() and not a.force:
                continue
            res = spawn(row_id, kind, a.timeout)
            times[f"{row_id}.{kind}"] = res
            TIMES.write_text(json.dumps(dict(sorted(times.items())), indent=1) + "\n")
            print(f"{row_id:22} {kind:4} {'ok' if res['ok'] else 'FAILED: ' + res['why']} ({res['seconds']} s)",
                  flush=True)


if __name__ == "__main__":
    main()
