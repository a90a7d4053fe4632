"""Analysis time against module size: `tpusim analyze`, `trace` and `profile`
on generated modules that grow along one axis each, doubling the size, with
the time ratio per doubling (about 2 when linear, 4 when quadratic).

Axes (each a shape of input that was once quadratic or worse):
- `chain`: a chain of N element-wise ops (instructions);
- `tuple`: a tuple parameter of N elements (one buffer each);
- `name`: one op whose name is N characters long (text tables);
- `calls`: N calls of N computations, one after another (call graph size;
  its depth is bounded at 256 levels with an error);
- `conv`: a 1-D convolution over N elements (closed-form window counts).

Run: cargo build --release && python3 bench/analysis_scaling.py [--tpusim PATH]
     [--runs 3] [--scale 1.0] [--only chain,tuple]
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def chain(n):
    body = ["  p0 = f32[8,128] parameter(0)"]
    body += [f"  e{i} = f32[8,128] negate({'p0' if i == 0 else f'e{i - 1}'})" for i in range(n)]
    body[-1] = body[-1].replace(f"  e{n - 1} =", f"  ROOT e{n - 1} =")
    return "HloModule chain\nENTRY e {\n" + "\n".join(body) + "\n}\n"


def tuple_param(n):
    elems = ",".join(["f32[2]"] * n)
    return (
        "HloModule tuple\nENTRY e {\n"
        f"  p = ({elems}) parameter(0)\n"
        "  ROOT g = f32[2] get-tuple-element(p), index=0\n}\n"
    )


def long_name(n):
    name = "x" * n
    return (
        "HloModule name\nENTRY e {\n  p = f32[4] parameter(0)\n"
        f"  ROOT {name} = f32[4] negate(p)\n}}\n"
    )


def calls(n):
    comps = [
        f"c{i} {{\n  a = f32[4] parameter(0)\n  ROOT n = f32[4] negate(a)\n}}" for i in range(n)
    ]
    body = ["  v0 = f32[4] parameter(0)"]
    body += [f"  v{i + 1} = f32[4] call(v{i}), to_apply=c{i}" for i in range(n)]
    body[-1] = body[-1].replace(f"  v{n} =", f"  ROOT v{n} =")
    return "HloModule calls\n" + "\n".join(comps) + "\nENTRY e {\n" + "\n".join(body) + "\n}\n"


def conv(n):
    return (
        "HloModule conv\nENTRY e {\n"
        f"  x = f32[1,{n},1] parameter(0)\n"
        "  w = f32[3,1,1] parameter(1)\n"
        f"  ROOT c = f32[1,{n},1] convolution(x, w), window={{size=3 pad=1_1}}, "
        "dim_labels=b0f_0io->b0f\n}\n"
    )


AXES = {
    "chain": (chain, 2_000),
    "tuple": (tuple_param, 2_500),
    "name": (long_name, 1_250_000),
    "calls": (calls, 1_000),
    "conv": (conv, 125_000_000),
}


def timed(cmd, runs):
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        times.append(time.perf_counter() - t0)
        if r.returncode != 0:
            sys.exit(f"{' '.join(cmd)} failed: {r.stderr.decode()[:500]}")
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tpusim", default=os.path.join(ROOT, "target", "release", "tpusim"))
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--scale", type=float, default=1.0, help="multiplies every base size")
    ap.add_argument("--only", default=",".join(AXES))
    a = ap.parse_args()
    print("| axis | size | analyze | trace | profile | analyze ratio per doubling |")
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for axis in a.only.split(","):
            make, base = AXES[axis]
            prev = None
            for k in range(4):
                n = int(base * a.scale) << k
                path = os.path.join(tmp, f"{axis}_{n}.hlo")
                with open(path, "w") as f:
                    f.write(make(n))
                out = os.path.join(tmp, f"trace_{axis}_{n}")
                an = timed([a.tpusim, "analyze", path, "--chip", "v5e"], a.runs)
                tr = timed([a.tpusim, "trace", path, "--chip", "v5e", "-o", out, "--force"], a.runs)
                pr = timed([a.tpusim, "profile", out], a.runs)
                ratio = "" if prev is None else f"{an / prev:.2f}"
                prev = an
                print(f"| {axis} | {n:,} | {an:.3f} s | {tr:.3f} s | {pr:.3f} s | {ratio} |")
                sys.stdout.flush()


if __name__ == "__main__":
    main()
