"""Every way vLLM takes a backend name selects rocm_dflash, for the target AND the DFlash draft,
in any letter case; an explicit draft backend in the speculative config still wins."""

import json

import pytest

from tests.vllm.conftest import dflash_spec, engine_args


def _is_plugin(member) -> bool:
    from dflash_rocm_plugin.vllm.backend import RocmDFlashBackend
    return member is not None and member.get_class() is RocmDFlashBackend


def _cli_config(model_dirs, *flags):
    from vllm.engine.arg_utils import AsyncEngineArgs, EngineArgs
    from vllm.utils.argparse_utils import FlexibleArgumentParser
    parser = AsyncEngineArgs.add_cli_args(FlexibleArgumentParser())
    args = parser.parse_args([
        "--model", model_dirs[0], "--skip-tokenizer-init", "--dtype", "float32",
        "--max-model-len", "256", "--max-num-seqs", "8", "--max-num-batched-tokens", "256",
        "--enforce-eager", "--speculative-config", json.dumps(dflash_spec(model_dirs)), *flags])
    return EngineArgs.from_cli_args(args).create_engine_config()


@pytest.mark.parametrize("flags", [
    ["--attention-backend", "rocm_dflash"],
    ["--attention-backend", "ROCM_DFLASH"],
    ["-ac", '{"backend": "Rocm_DFlash"}'],
    ["--attention-config.backend", "rocm_dflash"],
], ids=["flag", "upper", "ac-json", "dotted"])
def test_cli_spellings_put_target_and_draft_on_plugin(model_dirs, flags):
    config = _cli_config(model_dirs, *flags)
    assert _is_plugin(config.attention_config.backend)
    assert config.speculative_config.method == "dflash"
    assert _is_plugin(config.speculative_config.attention_backend)


def test_llm_kwarg_spelling(engine_config):
    # The session fixture is EngineArgs(attention_backend="rocm_dflash"), as LLM(...) builds it.
    assert _is_plugin(engine_config.attention_config.backend)
    assert _is_plugin(engine_config.speculative_config.attention_backend)


def test_draft_backend_only_via_speculative_config(model_dirs):
    config = engine_args(model_dirs, speculative_config=dflash_spec(
        model_dirs, attention_backend="rocm_DFLASH")).create_engine_config()
    assert config.attention_config.backend is None  # the target still auto-selects
    assert _is_plugin(config.speculative_config.attention_backend)


def test_explicit_draft_backend_wins(model_dirs):
    from vllm.v1.attention.backends.registry import AttentionBackendEnum
    config = engine_args(model_dirs, attention_backend="rocm_dflash", speculative_config=dflash_spec(
        model_dirs, attention_backend="TRITON_ATTN")).create_engine_config()
    assert _is_plugin(config.attention_config.backend)
    assert config.speculative_config.attention_backend is AttentionBackendEnum.TRITON_ATTN


def test_other_target_backend_is_not_inherited(model_dirs):
    config = engine_args(model_dirs, attention_backend="TRITON_ATTN",
                         speculative_config=dflash_spec(model_dirs)).create_engine_config()
    assert config.speculative_config.attention_backend is None  # vLLM's own rule untouched


def test_draft_vllm_config_selects_plugin(engine_config):
    """The config the draft model is built under (vLLM's own override step) names the plugin."""
    from dataclasses import replace

    from vllm.model_executor.models.qwen3_dflash import dflash_has_any_non_causal

    spec = engine_config.speculative_config
    non_causal = dflash_has_any_non_causal(spec.draft_model_config.hf_config)
    assert non_causal
    # As model runner V2's load_dflash_model builds the draft's attention config.
    draft_attention = replace(engine_config.attention_config, backend=spec.attention_backend,
                              use_non_causal=non_causal)
    assert _is_plugin(draft_attention.backend)
    assert _is_plugin(spec.apply_draft_overrides(engine_config).attention_config.backend)
    draft_backend = draft_attention.backend
    reasons = draft_backend.get_class().validate_configuration(
        head_size=32, dtype=engine_config.model_config.dtype, kv_cache_dtype="auto", block_size=16,
        use_mla=False, has_sink=False, use_sparse=False, use_mm_prefix=False,
        use_per_head_quant_scales=False, device_capability=None, attn_type="decoder",
        use_non_causal=True)
    assert reasons == []
