"""fp8 KV caches and attention sinks through the vLLM adapter, on vLLM's own metadata, against
vLLM's TRITON_ATTN on the same bytes and the float64 reference of the dequantized values.

* ``--kv-cache-dtype fp8`` / ``fp8_e4m3`` store the platform's e4m3 format (e4m3fnuz where
  ``current_platform.fp8_dtype()`` says so, as on gfx942; e4m3fn elsewhere) in vLLM's uint8 cache,
  with the layer's ``_k_scale`` / ``_v_scale`` (per tensor, or per KV head); the plugin's write
  quantizes exactly as ``reference.write_kv_cache`` does.  TRITON_ATTN's own writer cannot run on
  a CPU, so it reads the bytes the reference wrote.
* The DFlash draft keeps a bf16/fp32 cache while the target's is fp8 (speculative_config
  kv_cache_dtype), both through the same backend.
* Sinks: the layer's per-head sink logits, in the model dtype, as vLLM hands them.
* The other quantized modes are refused at selection with a reason.
"""

import types

import pytest
import torch

from dflash_rocm_plugin import reference
from tests.vllm import kv_batches

HQ, HKV, D, BS = 4, 2, 32, 16
FORMATS = {"e4m3fn": torch.float8_e4m3fn, "e4m3fnuz": torch.float8_e4m3fnuz}


@pytest.fixture(autouse=True)
def no_cuda_capability_query(monkeypatch):
    # triton_reshape_and_cache_flash asks CUDA for the capability on non-ROCm platforms.
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a, **k: (9, 0))


@pytest.fixture
def platform_fp8(monkeypatch):
    """Pin ``current_platform.fp8_dtype()`` (CPU: e4m3fn; gfx942: e4m3fnuz)."""
    from vllm.platforms import current_platform

    def pin(fmt):
        monkeypatch.setattr(type(current_platform), "fp8_dtype", classmethod(lambda cls: fmt))
    return pin


def _pair(engine_config, kv_cache_dtype, *, sinks=None, sliding_window=None):
    from vllm.config import set_current_vllm_config
    from vllm.v1.attention.backends.registry import AttentionBackendEnum
    from vllm.v1.kv_cache_interface import FullAttentionSpec

    spec = FullAttentionSpec(block_size=BS, num_kv_heads=HKV, head_size=D, dtype=torch.float32,
                             sliding_window=sliding_window)
    pair = []
    with set_current_vllm_config(engine_config):
        for member in (AttentionBackendEnum["ROCM_DFLASH"], AttentionBackendEnum.TRITON_ATTN):
            cls = member.get_class()
            pair += [cls.get_builder_cls()(spec, ["layer.0"], engine_config, torch.device("cpu")),
                     cls.get_impl_cls()(HQ, D, D ** -0.5, HKV, None, sliding_window, kv_cache_dtype, sinks=sinks)]
    return pair


def _layer(k_scale, v_scale):
    return types.SimpleNamespace(_k_scale=k_scale, _v_scale=v_scale, _q_scale=torch.ones(()),
                                 _k_scale_float=float(k_scale.max()), _v_scale_float=float(v_scale.max()),
                                 _q_scale_float=1.0)


def _quantized_batch(batch, fmt):
    """The batch's random (already cached) K/V stored as ``fmt`` bytes in a uint8 cache."""
    batch.kv_cache = batch.kv_cache.to(fmt).view(torch.uint8)
    return batch


def _run(builder, impl, layer, batch, kv_cache, write):
    metadata = builder.build(0, batch.common_metadata())
    if write:
        impl.do_kv_cache_update(layer, batch.key, batch.value, kv_cache, batch.slot_mapping)
    out = torch.full_like(batch.query, float("nan"))
    impl.forward(layer, batch.query, batch.key, batch.value, kv_cache, metadata, out)
    return out


@pytest.mark.parametrize("fmt", sorted(FORMATS))
@pytest.mark.parametrize("name", ["fp8", "fp8_e4m3"])
@pytest.mark.parametrize("scales", ["tensor", "head"])
@pytest.mark.parametrize("causal,seq_lens,q_lens", [
    (False, [37, 16, 50], [16, 16, 16]), (True, [37, 16, 50], [16, 1, 7]),
    # Whole prompts read the step's own K/V, rounded as the write stored them (the dense kernel), beside a
    # decode and a chunk over a prefix (paged).
    (True, [70, 33, 90, 45], [70, 1, 50, 45])], ids=["draft", "verify", "prefill"])
def test_fp8_cache_matches_triton_attn_and_reference(engine_config, platform_fp8, fmt, name, scales, causal, seq_lens,
                                                     q_lens, monkeypatch):
    from vllm.v1.kv_cache_interface import KVCacheLayout
    from dflash_rocm_plugin.ops import extend_launch
    from dflash_rocm_plugin.ops.backends import triton_extend

    launched = []
    real = triton_extend.launch
    monkeypatch.setattr(triton_extend, "launch", lambda *a, **k: launched.append(a) or real(*a, **k))
    platform_fp8(FORMATS[fmt])
    ours_builder, ours, theirs_builder, theirs = _pair(engine_config, name)
    assert ours.fp8_dtype == FORMATS[fmt]
    k_scale = torch.tensor(0.02) if scales == "tensor" else torch.tensor([0.02, 0.035])
    v_scale = torch.tensor(0.05) if scales == "tensor" else torch.tensor([0.03, 0.05])
    layer = _layer(k_scale, v_scale)
    batch = _quantized_batch(kv_batches.build(seq_lens, q_lens, causal=causal, layout=KVCacheLayout.LBHNC,
                                              padding_rows=2, seed=3), FORMATS[fmt])
    # New K/V of roughly scale x fp8 range, some beyond it (saturated on write).
    batch.key, batch.value = batch.key * 4.0, batch.value * 10.0
    plugin_cache = batch.kv_cache.clone()
    out = _run(ours_builder, ours, layer, batch, plugin_cache, write=True)
    dense_from = extend_launch.choose_extend(head_dim=D, max_query_len=1 << 20, device_index=None).block_m
    assert bool(launched) == (causal and max(q_lens) >= dense_from), "whole prompts (only they) run dense"

    ref_cache = batch.kv_cache.clone()
    k_ref, v_ref = (c.view(FORMATS[fmt]) for c in kv_batches.split_kv(ref_cache, D))
    reference.write_kv_cache(batch.key, batch.value, k_ref, v_ref, batch.slot_mapping, k_scale=k_scale,
                             v_scale=v_scale)
    assert torch.equal(plugin_cache, ref_cache), "the plugin's fp8 write differs from the reference's bytes"

    n = batch.num_tokens
    want = reference.paged_attention(batch.query[:n], k_ref, v_ref, batch.block_table, batch.seq_lens,
                                     batch.query_start_loc, causal=causal, scale=D ** -0.5,
                                     k_scale=k_scale, v_scale=v_scale)
    # Values up to ~20 (dequantized): fp32 round-off of the sums is ~1e-5 there.
    torch.testing.assert_close(out[:n].double(), want, rtol=1e-4, atol=1e-4)
    assert torch.isnan(out[n:]).all()
    if scales == "tensor":  # TRITON_ATTN reads element 0 of a scale: per tensor only
        their_out = _run(theirs_builder, theirs, layer, batch, ref_cache.clone(), write=False)
        torch.testing.assert_close(out[:n], their_out[:n], rtol=1e-4, atol=1e-4)


def test_fnuz_platform_bytes_are_read_as_fnuz(engine_config, platform_fp8):
    """On gfx942 vLLM's fp8 cache holds e4m3fnuz: the adapter reads it so, never as e4m3fn."""
    from vllm.v1.kv_cache_interface import KVCacheLayout

    platform_fp8(torch.float8_e4m3fnuz)
    builder, impl, _, _ = _pair(engine_config, "fp8")
    layer = _layer(torch.tensor(1.0), torch.tensor(1.0))
    batch = _quantized_batch(kv_batches.build([40], [16], causal=False, layout=KVCacheLayout.LBHNC, seed=5),
                             torch.float8_e4m3fnuz)
    out = _run(builder, impl, layer, batch, batch.kv_cache.clone(), write=False)
    k, v = (c.view(torch.float8_e4m3fnuz) for c in kv_batches.split_kv(batch.kv_cache, D))
    args = (batch.query[:16], k, v, batch.block_table, batch.seq_lens, batch.query_start_loc)
    as_fnuz = reference.paged_attention(*args, causal=False, scale=D ** -0.5)
    torch.testing.assert_close(out[:16].double(), as_fnuz, rtol=2e-5, atol=2e-5)
    as_fn = reference.paged_attention(batch.query[:16], k.view(torch.float8_e4m3fn), v.view(torch.float8_e4m3fn),
                                      *args[3:], causal=False, scale=D ** -0.5)
    assert (out[:16].double() - as_fn).abs().max() > 0.1


@pytest.mark.parametrize("causal,seq_lens,q_lens", [
    (False, [37, 16, 50], [16, 16, 16]), (True, [37, 16, 50], [16, 1, 7]),
    # gpt-oss prefill: whole prompts read the step's own key/value (the dense kernel) beside a decode
    # and a chunk over a prefix (paged).
    (True, [70, 33, 90, 45], [70, 1, 50, 45])], ids=["draft", "verify", "prefill"])
@pytest.mark.parametrize("window", [None, 8, 40])
def test_sinks_match_triton_attn_and_reference(engine_config, causal, seq_lens, q_lens, window, monkeypatch):
    from vllm.v1.kv_cache_interface import KVCacheLayout
    from dflash_rocm_plugin.ops import extend_launch
    from dflash_rocm_plugin.ops.backends import triton_extend

    launched = []
    real = triton_extend.launch
    monkeypatch.setattr(triton_extend, "launch", lambda *a, **k: launched.append(a) or real(*a, **k))
    sinks = torch.tensor([0.5, -1.0, 2.0, 1.0])  # per query head, in the scaled-score units
    ours_builder, ours, theirs_builder, theirs = _pair(engine_config, "auto", sinks=sinks, sliding_window=window)
    layer = _layer(torch.tensor(1.0), torch.tensor(1.0))
    batch = kv_batches.build(seq_lens, q_lens, causal=causal, layout=KVCacheLayout.LBNHC, padding_rows=2, seed=9)
    cache = batch.kv_cache.clone()
    out = _run(ours_builder, ours, layer, batch, cache, write=True)
    dense_from = extend_launch.choose_extend(head_dim=D, max_query_len=1 << 20, device_index=None).block_m
    assert bool(launched) == (causal and max(q_lens) >= dense_from), "whole prompts (only they) run dense"
    their_cache = batch.kv_cache.clone()
    their_out = _run(theirs_builder, theirs, layer, batch, their_cache, write=True)
    n = batch.num_tokens
    k, v = kv_batches.split_kv(cache, D)
    want = reference.paged_attention(batch.query[:n], k, v, batch.block_table, batch.seq_lens, batch.query_start_loc,
                                     causal=causal, scale=D ** -0.5, sliding_window=window, sinks=sinks)
    torch.testing.assert_close(out[:n].double(), want, rtol=2e-5, atol=2e-5)
    if causal:  # TRITON_ATTN's non-causal window is symmetric (|p - j| < W); causal rows agree
        torch.testing.assert_close(out[:n], their_out[:n], rtol=2e-5, atol=2e-5)
    assert torch.isnan(out[n:]).all()


def test_sinks_loaded_after_the_impl_was_built_are_used(engine_config):
    """vLLM copies the checkpoint's sinks into the parameter after the impl exists."""
    from vllm.v1.kv_cache_interface import KVCacheLayout

    sinks = torch.full((HQ,), float("-inf"))
    builder, impl, _, _ = _pair(engine_config, "auto", sinks=sinks)
    layer = _layer(torch.tensor(1.0), torch.tensor(1.0))
    batch = kv_batches.build([30], [16], causal=False, layout=KVCacheLayout.LBHNC, seed=2)
    before = _run(builder, impl, layer, batch, batch.kv_cache.clone(), write=True)
    sinks.copy_(torch.tensor([3.0, 3.0, 3.0, 3.0]))
    after = _run(builder, impl, layer, batch, batch.kv_cache.clone(), write=True)
    assert (before - after).abs().max() > 1e-2


def _reasons(**overrides):
    from dflash_rocm_plugin.vllm.backend import RocmDFlashBackend
    args = dict(head_size=64, dtype=torch.bfloat16, kv_cache_dtype="auto", block_size=16, use_mla=False,
                has_sink=False, use_sparse=False, use_mm_prefix=False, use_per_head_quant_scales=False,
                device_capability=None, attn_type="decoder", use_non_causal=True, has_sliding_window=True)
    args.update(overrides)
    return RocmDFlashBackend.validate_configuration(**args)


def test_gpt_oss_layers_and_fp8_are_accepted_at_selection():
    assert _reasons(has_sink=True) == []                      # gpt-oss: sinks, window, head_dim 64
    assert _reasons(kv_cache_dtype="fp8") == []
    assert _reasons(kv_cache_dtype="fp8_e4m3", use_per_head_quant_scales=True) == []


@pytest.mark.parametrize("mode,why", [
    ("fp8_e5m2", "float8_e5m2 is not supported (supported: the model dtype, or fp8 float8_e4m3fn, float8_e4m3fnuz"),
    ("fp8_ds_mla", "multi-head latent attention (MLA) is not supported"),
    ("fp8_per_token_head", "per-token-head scales stored inline"),
    ("fp8_inc", "Intel Neural Compressor"),
])
def test_other_quantized_modes_are_refused_with_a_reason(mode, why):
    assert any(why in r for r in _reasons(kv_cache_dtype=mode)), _reasons(kv_cache_dtype=mode)


def test_a_bad_fp8_qk_switch_is_refused_at_selection(monkeypatch):
    """``DFLASH_ROCM_FP8_QK`` (which calls over an fp8 cache dot Q K^T in fp8) is read at vLLM's backend
    validation: a value it does not know refuses the fp8 layers there, naming its values; bf16 layers
    do not read it."""
    from dflash_rocm_plugin import ops
    monkeypatch.setenv("DFLASH_ROCM_FP8_QK", "yes")
    ops.fp8_qk_policy.cache_clear()
    try:
        assert any("DFLASH_ROCM_FP8_QK='yes' is not one of: off, draft, all" in r
                   for r in _reasons(kv_cache_dtype="fp8")), _reasons(kv_cache_dtype="fp8")
        assert _reasons() == []
    finally:
        monkeypatch.delenv("DFLASH_ROCM_FP8_QK")
        ops.fp8_qk_policy.cache_clear()
    assert _reasons(kv_cache_dtype="fp8") == []


def test_draft_keeps_bf16_while_the_target_is_fp8(model_dirs):
    """speculative_config.kv_cache_dtype (vllm#48787): the draft's layers get their own dtype."""
    from tests.vllm.conftest import dflash_spec, engine_args
    config = engine_args(model_dirs, attention_backend="rocm_dflash", kv_cache_dtype="fp8",
                         speculative_config=dflash_spec(model_dirs, kv_cache_dtype="auto")).create_engine_config()
    assert config.cache_config.cache_dtype == "fp8"
    assert config.speculative_config.kv_cache_dtype in ("auto", None)
