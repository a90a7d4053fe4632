"""Provision the external tools that tests need, on first use, into a project-local cache.

Usage:
  python3 tools/provision.py [--tools-dir DIR] venv NAME REQUIREMENT...
      A virtualenv DIR/NAME with exactly these pip requirements; prints its python.
  python3 tools/provision.py [--tools-dir DIR] chromium
      A headless-capable Chromium on PATH, installed with apt-get when it is
      allowed (root, or passwordless sudo); prints its path.

The tool cache is $TPUSIM_TOOLS_DIR, else --tools-dir, else $CARGO_TARGET_DIR/tools,
else target/tools of this repository. A tool is installed once and reused
afterwards; a venv whose requirements changed is rebuilt. Progress and what was
installed (with the time it took) go to stderr, the result path to stdout.

Concurrent callers (several test binaries, or threads of one) do not race: each
tool is provisioned under an exclusive file lock (DIR/.NAME.lock), and a venv is
built in a temporary directory that is renamed into place only when complete, so
an interrupted install leaves nothing half-made behind. Because the venv is moved
after creation, run its tools as `DIR/NAME/bin/python -m TOOL` (the console
scripts in bin/ keep the temporary path in their shebang).

Used by crates/testtools (the Rust tests) and tools/python_tests.py.
"""
import argparse
import contextlib
import fcntl
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parent.parent
SPEC_FILE = "tpusim-requirements.txt"
BROWSERS = ["chromium", "chromium-browser", "google-chrome", "google-chrome-stable"]


class ProvisionError(Exception):
    pass


def log(msg):
    print(f"[provision] {msg}", file=sys.stderr, flush=True)


def tools_dir(arg):
    if os.environ.get("TPUSIM_TOOLS_DIR"):
        return pathlib.Path(os.environ["TPUSIM_TOOLS_DIR"])
    if arg:
        return pathlib.Path(arg)
    if os.environ.get("CARGO_TARGET_DIR"):
        return pathlib.Path(os.environ["CARGO_TARGET_DIR"]) / "tools"
    return REPO / "target" / "tools"


@contextlib.contextmanager
def locked(tools, name):
    """Holds DIR/.NAME.lock exclusively; the kernel releases it if we die."""
    tools.mkdir(parents=True, exist_ok=True)
    with open(tools / f".{name}.lock", "w") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log(f"waiting for another process provisioning {name}")
            fcntl.flock(f, fcntl.LOCK_EX)
        yield


def run(cmd, what):
    """Runs cmd quietly; on failure raises with its output."""
    done = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True)
    if done.returncode != 0:
        raise ProvisionError(f"{what} failed ({' '.join(map(str, cmd))}):\n{done.stdout}{done.stderr}")


# --- apt (system packages) ---------------------------------------------------


def apt_prefix():
    """How we may run apt-get: directly as root, through passwordless sudo, or not at all."""
    if not shutil.which("apt-get"):
        return None
    if os.geteuid() == 0:
        return []
    if shutil.which("sudo") and subprocess.run(
        ["sudo", "-n", "true"], stdin=subprocess.DEVNULL, capture_output=True
    ).returncode == 0:
        return ["sudo", "-n"]
    return None


def apt_install(packages, why):
    """Installs Debian packages, or raises with the one command the user must run."""
    command = f"sudo apt-get install -y {' '.join(packages)}"
    prefix = apt_prefix()
    if prefix is None:
        raise ProvisionError(
            f"{why} needs {' '.join(packages)}, and apt-get is not allowed here (not root, no passwordless sudo). Run:\n  {command}"
        )
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    # Another apt on the machine (another checkout's tests) holds dpkg's lock: wait for it.
    wait = ["-o", "DPkg::Lock::Timeout=600"]
    started = time.monotonic()
    log(f"installing {' '.join(packages)} with apt-get, for {why} ...")
    for cmd, what in [
        ([*prefix, "apt-get", *wait, "update", "-qq"], "apt-get update"),
        ([*prefix, "apt-get", *wait, "install", "-y", "-qq", *packages], "apt-get install"),
    ]:
        done = subprocess.run(cmd, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True)
        if done.returncode != 0:
            raise ProvisionError(
                f"{what} failed:\n{done.stdout}{done.stderr}\nInstall it by hand with:\n  {command}"
            )
    log(f"installed {' '.join(packages)} (system packages) in {time.monotonic() - started:.1f} s")


# --- Python virtualenvs --------------------------------------------------------


def ensure_venv_module():
    """Debian's python3 lacks ensurepip (so `python3 -m venv`) until python3-venv is installed."""
    probe = [sys.executable, "-c", "import ensurepip, venv"]
    if subprocess.run(probe, capture_output=True).returncode == 0:
        return
    apt_install(["python3-venv"], "python3 -m venv")


def venv(tools, name, requirements):
    """The python of venv DIR/NAME holding exactly `requirements`, built on first use."""
    final = tools / name
    python = final / "bin" / "python"
    spec = "".join(f"{r}\n" for r in requirements)
    with locked(tools, name):
        stamp = final / SPEC_FILE
        if python.exists() and stamp.exists() and stamp.read_text() == spec:
            return python
        started = time.monotonic()
        reason = "first use" if not final.exists() else "requirements changed"
        log(f"creating venv {final} with {' '.join(requirements)} ({reason}) ...")
        ensure_venv_module()
        for stale in tools.glob(f".{name}.*"):  # left by an install that was killed
            if stale.is_dir():
                shutil.rmtree(stale, ignore_errors=True)
        tmp = pathlib.Path(tempfile.mkdtemp(prefix=f".{name}.", dir=tools))
        try:
            run([sys.executable, "-m", "venv", tmp], "python3 -m venv")
            pip = [tmp / "bin" / "python", "-m", "pip", "--disable-pip-version-check"]
            run([*pip, "install", "--quiet", *requirements], f"pip install {' '.join(requirements)}")
            (tmp / SPEC_FILE).write_text(spec)
            if final.exists():
                shutil.rmtree(final)
            os.rename(tmp, final)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        log(f"installed {' '.join(requirements)} into {final} in {time.monotonic() - started:.1f} s")
        return python


# --- Chromium ------------------------------------------------------------------


def find_browser():
    for b in BROWSERS:
        path = shutil.which(b)
        if path:
            return pathlib.Path(path)
    return None


def chromium(tools):
    found = find_browser()
    if found:
        return found
    with locked(tools, "chromium"):
        found = find_browser()  # another process may have installed it while we waited
        if found:
            return found
        apt_install(["chromium"], "crates/report/tests/browser.rs")
        found = find_browser()
        if not found:
            raise ProvisionError(f"chromium installed but none of {BROWSERS} is on PATH")
        return found


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tools-dir")
    sub = ap.add_subparsers(dest="tool", required=True)
    v = sub.add_parser("venv")
    v.add_argument("name")
    v.add_argument("requirements", nargs="+")
    sub.add_parser("chromium")
    args = ap.parse_args()
    tools = tools_dir(args.tools_dir)
    try:
        path = venv(tools, args.name, args.requirements) if args.tool == "venv" else chromium(tools)
    except ProvisionError as e:
        print(f"[provision] error: {e}", file=sys.stderr)
        sys.exit(1)
    print(path)


if __name__ == "__main__":
    main()
