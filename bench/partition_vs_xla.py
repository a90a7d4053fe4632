"""Partitioning a sharded train step: `tpusim partition` next to XLA's own compile on fake devices.

For each program (a MaxText-style decoder train step, FSDP x tensor, scan over layers, Adam; see
tools/gen_cases/tpu_lowerings.py) on a mesh of N devices this prints:
  xla      seconds for `jax.jit(step).lower(*args).compile()` with N fake CPU devices
           (XLA_FLAGS=--xla_force_host_platform_device_count=N, a fresh process per program; the
           lower and compile parts are given too). This is what users do today to get a partitioned
           program, and XLA's SPMD partitioner runs inside the compile.
  tpusim   seconds for the whole process `target/release/tpusim partition FILE` on the pre-partition
           HLO the same step lowers to for TPU with an AbstractMesh (median of --repeat runs).
  ratio    xla / tpusim.

Usage: cargo build --release && python3 bench/partition_vs_xla.py [--repeat 5] [--only NAME ...]
The 256-device program is testdata/spmd_bench/maxtext_256.pre.hlo; the smaller ones are lowered into
target/bench_partition/ first. Without a `partition` subcommand in target/release/tpusim the script
says so and prints XLA's times only.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, ".."))
TPUSIM = os.path.join(REPO, "target", "release", "tpusim")
WORK = os.path.join(REPO, "target", "bench_partition")
sys.path.insert(0, os.path.join(REPO, "tools", "gen_cases"))

# name -> (mesh shape, config name in tpu_lowerings, committed pre-partition file or None)
PROGRAMS = {
    "maxtext_256": ((16, 16), "MAXTEXT_256", os.path.join(REPO, "testdata", "spmd_bench", "maxtext_256.pre.hlo")),
    "maxtext_64": ((8, 8), "MAXTEXT_256", None),
    "maxtext_8": ((2, 4), "MAXTEXT_256", None),
    "llama_small_256": ((16, 16), "LLAMA_SMALL", None),
}


def child_xla(name):
    """Runs in a fresh process whose XLA_FLAGS give it the mesh's device count."""
    import jax
    import tpu_lowerings as tl
    shape, cfg, _ = PROGRAMS[name]
    # Auto axes, like the AbstractMesh the TPU lowering uses (make_mesh's default is Explicit).
    mesh = jax.make_mesh(shape, ("fsdp", "model"), axis_types=(jax.sharding.AxisType.Auto,) * len(shape))
    step, args = tl.llama_train_step(mesh, getattr(tl, cfg))
    t0 = time.perf_counter()
    lowered = jax.jit(step).lower(*args)
    t1 = time.perf_counter()
    lowered.compile()
    t2 = time.perf_counter()
    print(json.dumps({"lower_s": t1 - t0, "compile_s": t2 - t1, "total_s": t2 - t0}))


def child_lower(name, path):
    import jax
    import tpu_lowerings as tl
    shape, cfg, _ = PROGRAMS[name]
    mesh = jax.sharding.AbstractMesh(shape, ("fsdp", "model"))
    step, args = tl.llama_train_step(mesh, getattr(tl, cfg))
    with open(path, "w") as fh:
        fh.write(tl.lower_tpu(step, args))


def run_child(args, devices=None):
    env = dict(os.environ)
    if devices is not None:
        env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
    out = subprocess.run([sys.executable, os.path.abspath(__file__)] + args, env=env, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed:\n{out.stderr.strip()[-2000:]}")
    return out.stdout


def pre_file(name):
    committed = PROGRAMS[name][2]
    if committed is not None:
        return committed
    os.makedirs(WORK, exist_ok=True)
    path = os.path.join(WORK, f"{name}.pre.hlo")
    if not os.path.exists(path):
        run_child(["--child-lower", name, path])
    return path


def tpusim_has_partition():
    if not os.path.exists(TPUSIM):
        return False, f"{TPUSIM} is not built (cargo build --release)"
    help_text = subprocess.run([TPUSIM, "--help"], capture_output=True, text=True).stdout
    if not any(line.split()[:1] == ["partition"] for line in help_text.splitlines()):
        return False, f"{TPUSIM} has no `partition` subcommand yet"
    return True, ""


def time_tpusim(path, repeat):
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        r = subprocess.run([TPUSIM, "partition", path], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        times.append(time.perf_counter() - t0)
        if r.returncode != 0:
            raise RuntimeError(f"tpusim partition {path} failed: {r.stderr.strip()[:500]}")
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=5, help="tpusim runs per program (median reported)")
    ap.add_argument("--only", nargs="*", default=None, help="program names: " + ", ".join(PROGRAMS))
    ap.add_argument("--child-xla", help=argparse.SUPPRESS)
    ap.add_argument("--child-lower", nargs=2, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child_xla:
        return child_xla(a.child_xla)
    if a.child_lower:
        return child_lower(*a.child_lower)

    have_tpusim, why = tpusim_has_partition()
    if not have_tpusim:
        print(f"note: {why}; printing XLA's times only")
    print(f"{'program':<18}{'devices':>8}{'xla lower':>11}{'xla compile':>13}{'xla total':>11}"
          f"{'tpusim':>10}{'ratio':>9}")
    for name in a.only or PROGRAMS:
        shape = PROGRAMS[name][0]
        n = shape[0] * shape[1]
        path = pre_file(name)
        xla = json.loads(run_child(["--child-xla", name], devices=n).strip().splitlines()[-1])
        if have_tpusim:
            t = time_tpusim(path, a.repeat)
            tp, ratio = f"{t:10.4f}", f"{xla['total_s'] / t:8.0f}x"
        else:
            tp, ratio = f"{'-':>10}", f"{'-':>9}"
        print(f"{name:<18}{n:>8}{xla['lower_s']:>11.3f}{xla['compile_s']:>13.3f}{xla['total_s']:>11.3f}{tp}{ratio}",
              flush=True)


if __name__ == "__main__":
    main()
