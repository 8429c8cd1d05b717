"""The test switch really puts the plugin under vLLM's real CPU engine, for both attention kinds.

With ``DFLASH_ROCM_TEST_CPU_ENGINE=1`` the plugin, loaded through its ``vllm.general_plugins``
entry point, owns the CPU_ATTN slot: every attention forward of the tiny Qwen3 target (causal,
layers 0-3) and of the DFlash draft (non-causal, its one layer after the target's) runs in
``RocmDFlashImpl`` and reaches ``dflash_rocm_plugin.ops`` with the matching ``causal`` flag;
the KV writes (the target's, and the draft's projected context K/V) go through the plugin's
``do_kv_cache_update``; vLLM's own CPU attention impl is never called.  Without the switch
the same engine runs vLLM's CPU_ATTN and the plugin sees nothing (the negative control that
makes the positive counts meaningful).  The plugin's plain-decoding run uses a different
worker-wide KV-cache layout (BHLNC), reached through ``VLLM_KV_CACHE_LAYOUT``.
"""

import pytest

from tests.e2e_vllm_cpu.conftest import PLUGIN_PLAIN_LAYOUT
from tests.e2e_vllm_cpu.tiny_checkpoints import TARGET_LAYERS

PLUGIN_IMPL = "dflash_rocm_plugin.vllm.impl.RocmDFlashImpl"
PLUGIN_BACKEND = "dflash_rocm_plugin.vllm.backend.RocmDFlashBackend"
VLLM_CPU_IMPL = "vllm.v1.attention.backends.cpu_attn.CPUAttentionBackendImpl"
TARGET_LAYER_NAMES = [f"model.layers.{i}.self_attn.attn" for i in range(TARGET_LAYERS)]
DRAFT_LAYER_NAMES = [f"model.layers.{TARGET_LAYERS}.self_attn.attn"]  # the draft's layers follow the target's


def test_switch_puts_plugin_in_cpu_attn_slot(engine_runs):
    run = engine_runs.get("plugin_dflash")
    assert run["switch"] is True
    assert run["cpu_attn_slot"] == PLUGIN_BACKEND
    assert run["triton_interpret"] == "1"


def test_plugin_serves_causal_target_and_non_causal_draft(engine_runs):
    run = engine_runs.get("plugin_dflash")
    plugin = run["impl_calls"][PLUGIN_IMPL]
    assert plugin["layers"].get("causal") == TARGET_LAYER_NAMES
    assert plugin["layers"].get("non_causal") == DRAFT_LAYER_NAMES
    assert plugin["causal"] > 0 and plugin["non_causal"] > 0
    assert plugin["mixed"] == plugin["unknown"] == 0
    # one draft forward per proposal, one target forward per layer and engine step
    assert plugin["non_causal"] == len(run["drafts"])
    assert plugin["causal"] % TARGET_LAYERS == 0
    # and every forward's numerics went through the framework-free ops with that flag
    ops = run["ops_calls"]
    assert (ops["causal"], ops["non_causal"]) == (plugin["causal"], plugin["non_causal"])
    assert run["impl_calls"][VLLM_CPU_IMPL]["causal"] == run["impl_calls"][VLLM_CPU_IMPL]["non_causal"] == 0
    # The 70-token prompt's prefill read its keys from the step's own K/V (the dense kernel), once per
    # target layer, and the run stayed lossless (test_dflash_on_plugin.py).
    assert run["ops_dense"]["launches"] >= TARGET_LAYERS, run["ops_dense"]


def test_plugin_writes_target_and_draft_kv(engine_runs):
    run = engine_runs.get("plugin_dflash")
    per_layer = run["kv_updates"].get(PLUGIN_IMPL, {})
    assert sorted(per_layer) == sorted(TARGET_LAYER_NAMES + DRAFT_LAYER_NAMES)
    assert run["ops_calls"]["write_kv_cache"] == sum(per_layer.values())
    assert not run["kv_updates"].get(VLLM_CPU_IMPL)


def test_plugin_serves_plain_decoding_in_another_kv_layout(engine_runs):
    run = engine_runs.get("plugin_plain")
    assert run["kv_cache_layout"] == PLUGIN_PLAIN_LAYOUT
    assert engine_runs.get("plugin_dflash")["kv_cache_layout"] == "LBHNC"
    plugin = run["impl_calls"][PLUGIN_IMPL]
    assert plugin["layers"].get("causal") == TARGET_LAYER_NAMES
    assert plugin["non_causal"] == 0
    assert run["ops_calls"]["causal"] == plugin["causal"] > 0


@pytest.mark.parametrize("variant", ["cpu_attn_dflash", "cpu_attn_plain"])
def test_without_switch_vllm_cpu_attn_runs(engine_runs, variant):
    run = engine_runs.get(variant)
    assert run["switch"] is False
    assert run["cpu_attn_slot"] == "vllm.v1.attention.backends.cpu_attn.CPUAttentionBackend"
    assert PLUGIN_IMPL not in run["impl_calls"]
    assert run["ops_calls"] == {"causal": 0, "non_causal": 0, "write_kv_cache": 0}
    assert run["ops_dense"]["launches"] == 0
    assert run["impl_calls"][VLLM_CPU_IMPL]["causal"] > 0
