"""DFlash on the plugin with an fp8 target KV cache in vLLM's real engine on CPU.

``--kv-cache-dtype fp8`` (e4m3fn on the CPU platform, scale 1.0: an unquantized checkpoint) on the
target; the draft keeps the model dtype (``speculative_config.kv_cache_dtype = auto``) or shares the
target's fp8.  Lossless: the speculative output equals the same engine's plain output on the same
fp8 cache, and speculation really ran over it; the 70-token prompt's prefill read its own rows, rounded
as the plugin's write stored them, on the dense kernel.  (vLLM's CPU_ATTN stores other fp8 bytes than the
plugin's round-to-nearest-even, saturating write, so its drafts are no row-for-row oracle here; the
plugin's bytes are checked against torch's conversion in tests/core and tests/vllm.)
"""

from tests.e2e_vllm_cpu.tiny_checkpoints import TARGET_LAYERS


def test_fp8_target_cache_is_really_fp8(engine_runs):
    for name in ("plugin_fp8_plain", "plugin_fp8_dflash", "plugin_fp8_dflash_fp8_draft"):
        assert engine_runs.get(name)["cache_dtype"] == "fp8"


def test_speculative_output_equals_plain_output_on_the_fp8_cache(engine_runs):
    plain = engine_runs.get("plugin_fp8_plain")["outputs"]
    assert all(len(o) > 0 for o in plain)
    assert engine_runs.get("plugin_fp8_dflash")["outputs"] == plain
    assert engine_runs.get("plugin_fp8_dflash_fp8_draft")["outputs"] == plain


def test_speculation_ran_over_the_fp8_cache(engine_runs):
    for name in ("plugin_fp8_dflash", "plugin_fp8_dflash_fp8_draft"):
        run = engine_runs.get(name)
        assert run["metrics"]["vllm:spec_decode_num_drafts"] > 0 and run["drafts"]
        assert run["ops_calls"]["non_causal"] > 0  # the draft block ran on the plugin


def test_whole_prompts_over_the_fp8_cache_ran_dense(engine_runs):
    # Once per target layer at least (the drafts' context blocks are not whole prompts).
    for name in ("plugin_fp8_plain", "plugin_fp8_dflash", "plugin_fp8_dflash_fp8_draft"):
        assert engine_runs.get(name)["ops_dense"]["launches"] >= TARGET_LAYERS, name
