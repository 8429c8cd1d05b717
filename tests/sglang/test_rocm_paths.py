"""SGLang 0.5.23's ROCm (``is_hip()``) paths, driven on CPU in fresh processes (``rocm_probe.py``:
HIP, the GPU's properties and the GPU-only packages faked; everything else SGLang's own).

On a stand-in MI300X (gfx942) and MI355X (gfx950) SGLang resolves ``RocmSRTPlatform``, and:

* server arguments: ``--attention-backend rocm_dflash`` is an unknown choice until SGLang's plugin
  loader ran, then puts prefill, decode and the DFLASH draft on it, also with
  ``SGLANG_USE_AITER=1``; ``--attention-backend aiter --speculative-draft-attention-backend
  rocm_dflash`` moves only the draft; with no flag, SGLang's own ROCm defaults stand (``aiter``,
  the DFLASH draft falling back to ``triton``): the plugin changes no default here;
* the backend factory: target and draft runners of the supported geometries build it over SGLang's
  ROCm KV pools; MLA and a quantized KV cache stop start-up with the reason ``ops.supports`` gives;
  with ``SGLANG_USE_AITER=1`` and the AITER 5-D KV layout, start-up stops naming the layout;
* on 0.5.23 every host fix is "not needed" but the gpt-oss/Gemma-4 backend-list one, applied (the
  older releases' ROCm draft default is covered by tests/host_fixes/test_sglang_releases.py).
"""

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch

from dflash_rocm_plugin import ops
from dflash_rocm_plugin.sglang.fixes import model_backends

HERE = Path(__file__).parent
REPO_ROOT = HERE.parents[1]
RUNS = {"gfx942": ["--arch", "gfx942"], "gfx950": ["--arch", "gfx950"],
        "gfx950_aiter_5d": ["--arch", "gfx950", "--aiter-5d"]}
SUPPORTED = ["qwen3_target_d128_gqa4", "qwen3_draft_d128", "d64_target", "d256_draft", "sliding_window_target",
             "page16_target"]


def _configs(root: Path) -> Path:
    common = {"model_type": "qwen3", "hidden_size": 1024, "intermediate_size": 2048, "num_attention_heads": 8,
              "num_key_value_heads": 2, "head_dim": 128, "vocab_size": 256, "max_position_embeddings": 4096,
              "rms_norm_eps": 1e-6, "rope_theta": 10000, "torch_dtype": "bfloat16"}
    for name, extra in (("target", {"architectures": ["Qwen3ForCausalLM"], "num_hidden_layers": 4}),
                        ("draft", {"architectures": ["DFlashDraftModel"], "num_hidden_layers": 1, "block_size": 16,
                                   "dflash_config": {"target_layer_ids": [1], "mask_token_id": 255,
                                                     "block_size": 16}})):
        (root / name).mkdir(parents=True)
        (root / name / "config.json").write_text(json.dumps({**common, **extra}))
    return root


def _probe(models: Path, args: list[str]) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SGLANG_")}
    env.update(PYTHONWARNINGS="ignore", TRITON_INTERPRET="1",
               PYTHONPATH=os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])))
    proc = subprocess.run([sys.executable, str(HERE / "rocm_probe.py"), "--models", str(models), *args],
                          cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("PROBE ")]
    assert lines, proc.stdout[-2000:] + proc.stderr[-4000:]
    return json.loads(lines[-1][len("PROBE "):])


@pytest.fixture(scope="module")
def probes(tmp_path_factory):
    models = _configs(tmp_path_factory.mktemp("rocm_models"))
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {name: pool.submit(_probe, models, args) for name, args in RUNS.items()}
        yield {name: f.result() for name, f in futures.items()}


@pytest.mark.parametrize("run, gfx95", [("gfx942", False), ("gfx950", True), ("gfx950_aiter_5d", True)])
def test_sglang_takes_its_rocm_paths(probes, run, gfx95):
    rec = probes[run]
    assert rec["platform"] == "RocmSRTPlatform" and rec["is_hip"] is True and rec["gfx95"] is gfx95
    assert rec["before_plugins"] == {"error": "SystemExit: 2"}  # argparse: invalid choice
    # Only the gpt-oss/Gemma-4 backend lists, which no release opens to plugins, need the patch.
    assert {fix: status for fix, status in rec["fixes"].items() if status != "not needed"} == {
        model_backends.FIX_ID: "applied"}, rec["fixes"]


@pytest.mark.parametrize("run", list(RUNS))
def test_server_args_on_rocm(probes, run):
    args = probes[run]["args"]
    both = {"attention": ["rocm_dflash", "rocm_dflash"], "draft": "rocm_dflash"}
    assert args["rocm_dflash_with_dflash"] == both
    assert args["rocm_dflash_with_dflash_use_aiter"] == both
    assert args["rocm_dflash_plain"] == {"attention": ["rocm_dflash", "rocm_dflash"], "draft": None}
    assert args["aiter_target_rocm_dflash_draft"] == {"attention": ["aiter", "aiter"], "draft": "rocm_dflash"}
    assert args["host_default_with_dflash"] == {"attention": ["aiter", "aiter"], "draft": "triton"}


def _reason(name: str) -> str | None:
    """What ``ops.supports`` says about the probe's refused geometries."""
    spec = {"mla": ops.AttentionSpec(head_dim=128, dtype=torch.bfloat16, kv_cache_dtype=torch.bfloat16,
                                     features=frozenset({"mla"})),
            "fp8_kv_pool": ops.AttentionSpec(head_dim=128, dtype=torch.bfloat16,
                                             kv_cache_dtype=torch.float8_e4m3fn)}[name]
    return ops.supports(spec)


@pytest.mark.parametrize("run", ["gfx942", "gfx950"])
def test_backend_builds_on_rocm_pools_and_refuses_with_the_ops_reason(probes, run):
    built = probes[run]["backends"]
    for name in SUPPORTED:
        assert built[name] == {"backend": "RocmDflashAttnBackend", "kv_layout": "nhd"}, (name, built[name])
    for name in ("mla", "fp8_kv_pool"):
        reason = _reason(name)
        if reason is None:  # served by a later ops release
            assert built[name]["backend"] == "RocmDflashAttnBackend"
            continue
        assert built[name]["error"].startswith("UnsupportedConfig: --attention-backend rocm_dflash: "), built[name]
        assert reason in built[name]["error"]
    assert "multi-head latent attention (MLA) is not supported" in built["mla"]["error"]


def test_aiter_5d_kv_layout_is_refused_at_start_up(probes):
    built = probes["gfx950_aiter_5d"]["backends"]
    assert built["page16_target"]["kv_layout"] == "vectorized_5d"
    assert built["page16_target"]["error"].startswith(
        "UnsupportedConfig: --attention-backend rocm_dflash: KV cache layout (")
    assert "the AITER 5-D layout" in built["page16_target"]["error"]
    # SGLang's own pool refuses page size 1 under this layout before the backend is asked
    assert built["qwen3_target_d128_gqa4"]["pool_error"].startswith("AssertionError: page_size=1")
