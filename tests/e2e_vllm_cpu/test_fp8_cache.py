"""DFlash on the plugin with an fp8 target KV cache in vLLM's real engine on CPU.

``--kv-cache-dtype fp8`` (e4m3fn on the CPU platform, scale 1.0: an unquantized checkpoint) on the
target; the draft keeps the model dtype (``speculative_config.kv_cache_dtype = auto``) or shares the
target's fp8.  Lossless: the speculative output equals the same engine's plain output on the same
fp8 cache; the draft, run over a model-dtype (fp32 here) cache, proposes what vLLM's own CPU_ATTN
proposes over the same fp8 target cache, row for row.
"""


def test_fp8_target_cache_is_really_fp8(engine_runs):
    for name in ("plugin_fp8_plain", "plugin_fp8_dflash", "plugin_fp8_dflash_fp8_draft"):
        assert engine_runs.get(name)["cache_dtype"] == "fp8"


def test_speculative_output_equals_plain_output_on_the_fp8_cache(engine_runs):
    plain = engine_runs.get("plugin_fp8_plain")["outputs"]
    assert all(len(o) > 0 for o in plain)
    assert engine_runs.get("plugin_fp8_dflash")["outputs"] == plain
    assert engine_runs.get("plugin_fp8_dflash_fp8_draft")["outputs"] == plain


def test_drafts_with_a_model_dtype_draft_cache_equal_cpu_attn(engine_runs):
    ours, theirs = engine_runs.get("plugin_fp8_dflash"), engine_runs.get("cpu_attn_fp8_dflash")
    assert ours["metrics"]["vllm:spec_decode_num_drafts"] > 0
    assert ours["drafts"] == theirs["drafts"]
    assert ours["outputs"] == theirs["outputs"]
