"""The Python package's tests, in one command (no set-up before it):

  python3 tools/python_tests.py [PYTEST_ARGS...]

1. builds the release CLI (`cargo build --release --bin tpusim`) that the tests
   compare the package against;
2. provisions the virtualenv <target>/tools/python-tests (see tools/provision.py)
   with the package's dependencies and its `test` extra from python/pyproject.toml,
   reused while that list is unchanged;
3. builds the package from ./python and installs it into that venv, on every run
   (it is the code under test);
4. runs `pytest python/tests` and `mypy.stubtest tpusim` with the venv's python.

Both run from the repository root, so `import tpusim` is the installed package,
not the python/tpusim sources. Exits non-zero on the first failing step.
"""
import ast
import json
import os
import pathlib
import re
import subprocess
import sys
import time

import provision

REPO = provision.REPO


def step(title, cmd, env=None):
    print(f"== {title}", flush=True)
    started = time.monotonic()
    done = subprocess.run(cmd, cwd=REPO, env=env)
    if done.returncode != 0:
        print(f"python tests: `{title}` failed (exit {done.returncode})", file=sys.stderr)
        sys.exit(done.returncode)
    print(f"   ({time.monotonic() - started:.1f} s)", flush=True)


def toml_list(text, key):
    """A one-level string list `key = [...]` from pyproject.toml (no tomllib before 3.11)."""
    m = re.search(rf"^{key}\s*=\s*(\[[^\]]*\])", text, re.M)
    if not m:
        sys.exit(f"python/pyproject.toml has no `{key} = [...]`")
    return ast.literal_eval(m.group(1))


def requirements():
    """The package's own dependencies, then its `test` extra."""
    text = (REPO / "python" / "pyproject.toml").read_text()
    return toml_list(text, "dependencies") + toml_list(text, "test")


def target_dir():
    meta = subprocess.run(
        ["cargo", "metadata", "--format-version", "1", "--no-deps"],
        cwd=REPO, check=True, capture_output=True, text=True,
    )
    return pathlib.Path(json.loads(meta.stdout)["target_directory"])


def main():
    target = target_dir()
    tools = provision.tools_dir(str(target / "tools"))
    # `--bin`, not `-p tpusim-cli`: features are then unified over the whole
    # workspace exactly as for `cargo run --release -- demo`, so after the demo
    # this is a no-op (with `-p` every dependency built again: 3.5 min in CI).
    step("build the CLI the tests compare against", ["cargo", "build", "-q", "--release", "--bin", "tpusim"])
    try:
        python = str(provision.venv(tools, "python-tests", requirements()))
    except provision.ProvisionError as e:
        sys.exit(f"[provision] error: {e}")
    env = dict(os.environ, TPUSIM_CLI=str(target / "release" / "tpusim"))
    # One run at a time reinstalls into (and tests from) the shared venv.
    with provision.locked(tools, "python-tests.run"):
        step(
            "build and install ./python into the venv",
            [python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
             "--no-deps", "--force-reinstall", "./python"],
        )
        step("pytest python/tests", [python, "-m", "pytest", "-q", "python/tests", *sys.argv[1:]], env)
        step("mypy.stubtest tpusim", [python, "-m", "mypy.stubtest", "tpusim"], env)


if __name__ == "__main__":
    main()
