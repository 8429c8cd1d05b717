"""Where the hostfix environment keeps older host releases, and how to run code inside one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
HOSTS = Path(sys.prefix) / "hosts"
WHEELS = Path(os.environ.get("DFLASH_WHEEL_CACHE", Path.home() / ".cache/dflash-rocm-plugin/wheels"))


def release_dir(host: str, version: str) -> Path:
    return HOSTS / f"{host}-{version}"


def release_env(host: str, version: str, **extra) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(release_dir(host, version)), str(REPO)])
    env.setdefault("TRITON_INTERPRET", "1")
    env.update(extra)
    return env


def start(host: str, version: str, argv: list[str], **extra) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, *argv], cwd=str(REPO), env=release_env(host, version, **extra),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(proc: subprocess.Popen, timeout: float = 600) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err


def result_line(out: str, err: str, marker: str = "RESULT ") -> dict:
    for line in reversed(out.splitlines()):
        if line.startswith(marker):
            return json.loads(line[len(marker):])
    raise AssertionError(f"no {marker!r} line; stdout tail:\n{out[-3000:]}\nstderr tail:\n{err[-5000:]}")


def wheel_member(host: str, version: str, member: str) -> str | None:
    """A file from a release's wheel (downloaded once into the shared cache); None if unreachable."""
    import zipfile

    found = sorted(WHEELS.glob(f"{host}-{version}-*.whl"))
    if not found:
        WHEELS.mkdir(parents=True, exist_ok=True)
        rc = subprocess.call([sys.executable, "-m", "pip", "download", "-q", "--no-deps",
                              f"{host}=={version}", "-d", str(WHEELS)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        found = sorted(WHEELS.glob(f"{host}-{version}-*.whl"))
        if rc != 0 or not found:
            return None
    with zipfile.ZipFile(found[0]) as z:
        return z.read(member).decode()


def run_script_per_release(host: str, versions, script: str) -> dict:
    """Run ``python <script> <version>`` once per unpacked release, two at a time (two cores,
    and each old-release import takes most of a minute); each script's RESULT line, by version.
    Skips the calling test when a release is not unpacked."""
    import pytest
    missing = [v for v in versions if not release_dir(host, v).is_dir()]
    if missing:
        pytest.skip(f"{host} releases {missing} are not unpacked under {HOSTS} "
                    "(built by ci/envs/hostfix.post.sh)")
    procs, results, pending = {}, {}, list(versions)
    while pending or procs:
        while pending and len(procs) < 2:
            v = pending.pop(0)
            procs[v] = start(host, v, [script, v])
        v = next(iter(procs))
        results[v] = finish(procs.pop(v))
    return {v: result_line(out, err) for v, (rc, out, err) in results.items()}
