"""vLLM's ROCm code paths, driven on CPU (``rocm_platform_probe.py``: ``amdsmi`` and ``torch.version.hip``
faked, everything else vLLM's own), and a platform plugin that overrides backend selection.

On a stand-in MI300X (gfx942) and MI355X (gfx950), ``--attention-backend rocm_dflash`` with a DFlash
draft builds its engine config under ``RocmPlatform`` with the draft inheriting the backend, and
``RocmPlatform.get_attn_backend_cls`` returns the plugin for every supported layer geometry -- the
target's (causal) and the draft's (non-causal, the config ``DFlashProposer`` derives) -- while a layer
the backend does not serve gets ``RocmPlatform``'s own refusal carrying the plugin's reason (the one
``ops.supports`` gives, through the backend's validation).

A stand-in for AMD's ATOM (``standin_platform.py``, found through its ``vllm.platform_plugins`` entry
point): when it takes over selection, one warning names it, its distribution and what to do, and
vLLM runs its backend; switched off (``ATOM_DISABLE_VLLM_PLUGIN=1``) or left out of ``VLLM_PLUGINS``,
``RocmPlatform`` selects the plugin again; when it defers to ``RocmPlatform``, the plugin is selected
under it and nothing is said.
"""

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch

from tests.vllm import standin_platform, tiny_models
from tests.vllm.rocm_platform_probe import LAYERS

REPO_ROOT = Path(__file__).resolve().parents[2]
PLUGIN = "dflash_rocm_plugin.vllm.backend.RocmDFlashBackend"
SERVED = ["qwen3_dense_d128", "d64", "qwen3_5_full_attention_d256", "sliding_window_d128", "sliding_window_d256",
          "fp16_d128", "gqa8_one_kv_head_per_rank_d128", "gemma4_global_d512"]
REFUSED = ["mla", "head_520"]  # refused whatever else the backend learns to serve

RUNS = {  # name -> (arch, stand-in platform plugin on the path?, extra environment)
    "gfx942": ("gfx942", False, {}),
    "gfx950": ("gfx950", False, {}),
    "standin_takes_over": ("gfx942", True, {}),
    "standin_switched_off": ("gfx942", True, {"ATOM_DISABLE_VLLM_PLUGIN": "1"}),
    "standin_not_in_vllm_plugins": ("gfx942", True, {"VLLM_PLUGINS": "rocm_dflash"}),
    "standin_defers": ("gfx950", True, {"STANDIN_PLATFORM_DEFERS": "1"}),
}


def _probe(workdir: Path, models: Path, standin: Path, name: str) -> dict:
    arch, with_standin, extra = RUNS[name]
    env = {k: v for k, v in os.environ.items() if k not in ("VLLM_TARGET_DEVICE", "VLLM_PLUGINS")}
    env.update(extra)
    path = [str(REPO_ROOT)] + ([str(standin)] if with_standin else []) + [os.environ.get("PYTHONPATH", "")]
    env["PYTHONPATH"] = os.pathsep.join(filter(None, path))
    out = workdir / f"{name}.json"
    proc = subprocess.run([sys.executable, "-m", "tests.vllm.rocm_platform_probe", "--arch", arch,
                           "--models", str(models), "--out", str(out)],
                          cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0 and out.exists(), proc.stdout[-2000:] + proc.stderr[-4000:]
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def probes(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("rocm_probes")
    models = workdir / "models"
    tiny_models.write(models)
    standin = Path(standin_platform.write(workdir / "standin"))
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {name: pool.submit(_probe, workdir, models, standin, name) for name in RUNS}
        yield {name: f.result() for name, f in futures.items()}


def _plugin_reason(layer: dict) -> str | None:
    """The refusal reason the plugin gives for ``layer`` (its vLLM translation of ``ops.supports``)."""
    from dflash_rocm_plugin.vllm import support
    features = ["mla"] if layer.get("use_mla") else []
    return support.reason(head_size=layer["head_size"], dtype=getattr(torch, layer.get("dtype", "bfloat16")),
                          kv_cache_dtype=layer.get("kv_cache_dtype", "auto"), features=features)


@pytest.mark.parametrize("run, capability", [("gfx942", [9, 4]), ("gfx950", [9, 5])])
def test_rocm_platform_selects_the_plugin_for_target_and_draft(probes, run, capability):
    rec = probes[run]
    assert rec["platform"] == "vllm.platforms.rocm.RocmPlatform" and rec["is_rocm"]
    assert rec["capability"] == capability
    assert rec["target_backend"] == rec["draft_backend"] == PLUGIN
    assert rec["draft_use_non_causal"] is True
    for kind in ("target", "draft"):
        for name in SERVED:
            assert rec[kind][name] == {"backend": PLUGIN}, (kind, name, rec[kind][name])
    assert rec["plugin_log"] == []


@pytest.mark.parametrize("run", ["gfx942", "gfx950"])
def test_unsupported_layers_get_rocm_platforms_refusal_with_the_plugins_reason(probes, run):
    rec = probes[run]
    refused = 0
    for kind in ("target", "draft"):
        for name, layer in LAYERS.items():
            reason = _plugin_reason(layer)
            got = rec[kind][name]
            if reason is None:
                assert got == {"backend": PLUGIN}, (kind, name, got)
                continue
            refused += 1
            assert "error" in got, (kind, name, got)
            assert got["error"].startswith("ValueError: Selected backend AttentionBackendEnum.CUSTOM is not valid "
                                           "for this configuration. Reason: ")
            assert reason in got["error"], (reason, got["error"])
    assert all(_plugin_reason(LAYERS[n]) for n in REFUSED) and refused >= 2 * len(REFUSED)
    assert "rocm_dflash: head_dim 520 is not supported" in rec["target"]["head_520"]["error"]
    assert "multi-head latent attention (MLA) is not supported" in rec["draft"]["mla"]["error"]


def test_a_platform_plugin_that_takes_over_is_named_once_with_what_to_do(probes):
    rec = probes["standin_takes_over"]
    assert rec["platform"] == standin_platform.PLATFORM
    assert rec["target_backend"] == rec["draft_backend"] == PLUGIN  # what the user asked for...
    for kind in ("target", "draft"):
        for name in SERVED:  # ...and what the platform gave instead
            assert rec[kind][name] == {"backend": standin_platform.ITS_BACKEND}
    assert rec["plugin_log"] == [
        "dflash_rocm_plugin: --attention-backend rocm_dflash was selected, but the platform "
        "atom.platform.StandInPlatform from the vllm.platform_plugins entry 'atom' of the distribution "
        "'atom-standin' took over backend selection and chose "
        "vllm.v1.attention.backends.triton_attn.TritonAttentionBackend for a layer, so rocm_dflash does NOT run. "
        "To use rocm_dflash, turn that platform plugin off (ATOM_DISABLE_VLLM_PLUGIN=1 or leave 'atom' out of "
        "VLLM_PLUGINS, e.g. VLLM_PLUGINS=rocm_dflash); to keep it, drop --attention-backend rocm_dflash"]


@pytest.mark.parametrize("run", ["standin_switched_off", "standin_not_in_vllm_plugins"])
def test_the_advice_works(probes, run):
    rec = probes[run]
    assert rec["platform"] == "vllm.platforms.rocm.RocmPlatform"
    for kind in ("target", "draft"):
        for name in SERVED:
            assert rec[kind][name] == {"backend": PLUGIN}
    assert rec["plugin_log"] == []


def test_a_platform_plugin_that_defers_still_selects_the_plugin(probes):
    rec = probes["standin_defers"]
    assert rec["platform"] == standin_platform.PLATFORM and rec["capability"] == [9, 5]
    for kind in ("target", "draft"):
        for name in SERVED:
            assert rec[kind][name] == {"backend": PLUGIN}
        assert "rocm_dflash: head_dim 520" in rec[kind]["head_520"]["error"]
    assert rec["plugin_log"] == []
