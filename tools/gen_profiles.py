"""Real JAX profiles for `tpusim profile` tests, with the expected per-op
summary taken from JAX's own Chrome trace of the same capture.

Usage: python3 tools/gen_profiles.py [SHARED_JAX_CPU_DIR]
Writes, under testdata/profiles/:
  jax_mlp/plugins/profile/<run>/<host>.xplane.pb  a jax.profiler.trace log dir
                                                  (a jitted MLP step with named
                                                  scopes and a fori_loop, 3 steps)
  jax_mlp/step.hlo                                the step's post-optimization HLO
  jax_mlp/step.pre.hlo                            the same step before XLA's optimizations
  jax_mlp/expected.json                           ops/steps from <host>.trace.json.gz
  jax_cpu/vm.xplane.pb, jax_cpu/expected.json     the shared sample, if its dir is given
The trace.json.gz files are read for the expectations and not kept (size).
Needs jax (CPU is fine).
"""
import collections
import glob
import gzip
import json
import os
import shutil
import sys
import tempfile

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "testdata", "profiles")


def expected_from_chrome(trace_gz):
    """Per (module, op): occurrences and total µs; steps with step_num."""
    d = json.load(gzip.open(trace_gz))
    ops = collections.defaultdict(lambda: {"occurrences": 0, "total_us": 0.0})
    steps = []
    for e in d["traceEvents"]:
        a = e.get("args", {})
        if e.get("ph") != "X":
            continue
        if "hlo_op" in a:
            k = f"{a.get('hlo_module', '')}/{a['hlo_op']}"
            ops[k]["occurrences"] += 1
            ops[k]["total_us"] += e["dur"]
        if "step_num" in a:
            steps.append({"name": e["name"], "step_num": int(a["step_num"]), "duration_us": e["dur"]})
    steps.sort(key=lambda s: s["step_num"])
    return {"ops": dict(sorted(ops.items())), "steps": steps}


def gen_mlp():
    import jax
    import jax.numpy as jnp

    def step(w1, w2, x):
        with jax.named_scope("layer1"):
            h = jnp.tanh(x @ w1)
        with jax.named_scope("layer2"):
            y = h @ w2

        def body(i, acc):
            return acc * 0.5 + jnp.sin(acc)

        with jax.named_scope("refine"):
            y = jax.lax.fori_loop(0, 4, body, y)
        return (y * y).mean()

    grad = jax.jit(jax.value_and_grad(step, argnums=(0, 1)))
    k = jax.random.PRNGKey(0)
    w1 = jax.random.normal(k, (256, 512), jnp.float32) * 0.05
    w2 = jax.random.normal(k, (512, 128), jnp.float32) * 0.05
    x = jax.random.normal(k, (64, 256), jnp.float32)
    hlo = grad.lower(w1, w2, x).compile().as_text()
    pre = grad.lower(w1, w2, x).as_text(dialect="hlo")
    loss, (g1, g2) = grad(w1, w2, x)
    jax.block_until_ready(g1)

    out = os.path.join(ROOT, "jax_mlp")
    shutil.rmtree(out, ignore_errors=True)
    logdir = tempfile.mkdtemp()
    opts = jax.profiler.ProfileOptions()
    opts.python_tracer_level = 0
    with jax.profiler.trace(logdir, profiler_options=opts):
        for i in range(3):
            with jax.profiler.StepTraceAnnotation("train", step_num=i):
                loss, (g1, g2) = grad(w1, w2, x)
                w1 = w1 - 0.01 * g1
                w2 = w2 - 0.01 * g2
                jax.block_until_ready(w2)
    (run,) = glob.glob(os.path.join(logdir, "plugins", "profile", "*"))
    (xplane,) = glob.glob(os.path.join(run, "*.xplane.pb"))
    (chrome,) = glob.glob(os.path.join(run, "*.trace.json.gz"))
    dest = os.path.join(out, "plugins", "profile", os.path.basename(run))
    os.makedirs(dest)
    shutil.copy(xplane, dest)
    open(os.path.join(out, "step.hlo"), "w").write(hlo)
    open(os.path.join(out, "step.pre.hlo"), "w").write(pre)
    json.dump(expected_from_chrome(chrome), open(os.path.join(out, "expected.json"), "w"), indent=1)
    print("wrote", dest, os.path.getsize(xplane), "bytes")


def copy_shared(src):
    out = os.path.join(ROOT, "jax_cpu")
    os.makedirs(out, exist_ok=True)
    shutil.copy(os.path.join(src, "vm.xplane.pb"), out)
    exp = expected_from_chrome(os.path.join(src, "vm.trace.json.gz"))
    json.dump(exp, open(os.path.join(out, "expected.json"), "w"), indent=1)
    print("wrote", out)


if __name__ == "__main__":
    if len(sys.argv) > 1:
        copy_shared(sys.argv[1])
    gen_mlp()
