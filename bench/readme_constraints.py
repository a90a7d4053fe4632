"""The README's Llama train step with and without its activation constraints, partitioned by XLA.

The README's first Python example constrains the activations to keep the batch on "data"
(`batch_sharded`). Without those constraints the embedding table's "data" tiling (its embed dim)
and the tokens' (their batch dim) claim the same mesh axis at the lookup; XLA's propagation
(Shardy) drops both claims, and the weights' tiling spreads into the activations. tpusim keeps the
batch tiling there and reports the conflict in its assumptions. This script shows what that costs
on XLA's side: it runs the step through XLA's own SPMD partitioner on 256 fake CPU devices (a
16x16 mesh, as the README's AbstractMesh), with and without the constraints, and prices six
programs with `tpusim analyze --chip v5e --topology 16x16`:

  xla, constrained      XLA's partitioned program of the README's step
  xla, unconstrained    the same with `batch_sharded` the identity
  tpusim, constrained   tpusim's partition of the pre-partition program
  tpusim, unconstrained (the same program as above: tpusim's propagation keeps the batch)
  tpusim/xla, both      tpusim's partition of XLA's own propagation (the `shardy-xla` dump:
                        every op annotated), which separates propagation from partitioning

Usage: cargo build --release && python3 bench/readme_constraints.py [--layers 32]
The README block is read from README.md (everything before `report = tpusim.analyze`), with its
AbstractMesh replaced by a concrete mesh of the fake devices; the tpusim package is not needed.
Work files go to target/bench_readme/.
"""
import argparse
import glob
import json
import os
import re
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, ".."))
TPUSIM = os.path.join(REPO, "target", "release", "tpusim")
WORK = os.path.join(REPO, "target", "bench_readme")

LOWER = r'''
import glob, os, shutil, sys
dump, out, constrained, layers, src = sys.argv[1], sys.argv[2], sys.argv[3] == "1", int(sys.argv[4]), sys.argv[5]
os.environ["XLA_FLAGS"] = (f"--xla_force_host_platform_device_count=256 --xla_dump_to={dump} "
                           "--xla_dump_hlo_pass_re=spmd-partitioning|shardy-xla")
import jax
code = open(src).read().replace("import jax, jax.numpy as jnp, tpusim", "import jax, jax.numpy as jnp")
code = code.replace('mesh = AbstractMesh((16, 16), ("data", "model"))',
                    'mesh = jax.make_mesh((16, 16), ("data", "model"), '
                    'axis_types=(jax.sharding.AxisType.Auto,) * 2)')
ns = {}
exec(compile(code, "README.md", "exec"), ns)
if not constrained:
    ns["batch_sharded"] = lambda x: x
layer_params = jax.tree.map(lambda a: jax.ShapeDtypeStruct((layers,) + a.shape[1:], a.dtype, sharding=a.sharding),
                            ns["params"]["layers"])
params = dict(ns["params"], layers=layer_params)
lowered = ns["jax"].jit(ns["train_step"]).lower(params, ns["tokens"])
open(os.path.join(out, "pre.hlo"), "w").write(lowered.as_text(dialect="hlo"))
shutil.rmtree(dump, ignore_errors=True)
lowered.compile()
hits = sorted(glob.glob(os.path.join(dump, "*after_spmd-partitioning*.txt")))
shutil.copy(hits[-1], os.path.join(out, "xla_partitioned.hlo"))
hits = sorted(glob.glob(os.path.join(dump, "*after_shardy-xla.before_spmd-partitioning*.txt")))
shutil.copy(hits[-1], os.path.join(out, "xla_propagated.hlo"))
'''


def readme_block() -> str:
    text = open(os.path.join(REPO, "README.md")).read()
    block = re.findall(r"```python\n(.*?)```", text, re.S)[0]
    return block.split("report = tpusim.analyze")[0]


def lower(constrained: bool, layers: int) -> str:
    out = os.path.join(WORK, "constrained" if constrained else "unconstrained")
    os.makedirs(out, exist_ok=True)
    src = os.path.join(WORK, "readme_block.py")
    with open(src, "w") as f:
        f.write("import re\n" + readme_block())
    script = os.path.join(WORK, "lower.py")
    with open(script, "w") as f:
        f.write("import re\n" + LOWER)
    subprocess.run([sys.executable, script, os.path.join(WORK, "dump"), out, "1" if constrained else "0",
                    str(layers), src], check=True)
    return out


def price(path: str, extra: tuple = ()) -> dict:
    cmd = [TPUSIM, "analyze", path, "--chip", "v5e", "--topology", "16x16", "--json", *extra]
    if "xla_p" in path:
        cmd += ["--mesh", "16x16"]
    p = subprocess.run(cmd, capture_output=True, text=True, check=True)
    j = json.loads(p.stdout)
    return j[0] if isinstance(j, list) else j


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=32)
    args = ap.parse_args()
    if not os.path.exists(TPUSIM):
        sys.exit("build tpusim first: cargo build --release")
    rows = []
    for constrained in (True, False):
        d = lower(constrained, args.layers)
        for who, f, extra in (("xla", "xla_partitioned.hlo", ()), ("tpusim", "pre.hlo", ()),
                              ("tpusim/fwd", "pre.hlo", ("--propagation", "forward")),
                              ("tpusim/xla", "xla_propagated.hlo", ())):
            a = price(os.path.join(d, f), extra)
            notes = [x for x in a.get("assumptions", []) if "gathered operand" in x]
            rows.append((who, "constrained" if constrained else "unconstrained", a, bool(notes)))
    print(f"README Llama step, {args.layers} layers, v5e 16x16 (256 chips):")
    print("tpusim: tpusim's propagation and partition of the lowered program (the default)")
    print("tpusim/fwd: the same with --propagation forward (tpusim's earlier propagation)")
    print("tpusim/xla: tpusim's partition of XLA's own propagation (the shardy-xla dump)")
    print(f"{'partitioner':12} {'activations':14} {'step s':>8} {'MFU':>6} {'comm s':>8} {'peak GiB':>9}  conflict noted")
    for who, kind, a, noted in rows:
        print(f"{who:12} {kind:14} {a['step_time_s']:8.3f} {100 * a['mfu']:5.1f}% "
              f"{a['communication_s']:8.3f} {a['peak_memory_bytes'] / 2**30:9.1f}  "
              f"{'yes' if noted else 'no'}")


if __name__ == "__main__":
    main()
