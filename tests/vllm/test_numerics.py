"""The plugin's vLLM backend computes what vLLM's own TRITON_ATTN backend and the float64
reference compute, on identical CommonAttentionMetadata and KV caches.

For causal prefill, decode, mixed batches, spec-decode verify (1 + 15 tokens, causal) and DFlash
draft blocks (1 + 15 tokens, causal=False): ``do_kv_cache_update`` writes the same cache
(padding slots skipped) and ``forward`` writes the same rows (padding rows untouched), across
vLLM's KV-cache layouts, in fp32 and fp16.  Outputs start as NaN so unwritten rows show.
"""

import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings, strategies as st

from dflash_rocm_plugin import reference
from tests.vllm import kv_batches

HQ, HKV, D, BS = 4, 2, 32, 16  # the tiny target model's attention shape
TOL = {torch.float32: 2e-5, torch.float16: 3e-3}


@pytest.fixture(scope="module")
def backends(engine_config):
    """(plugin builder, plugin impl, TRITON_ATTN builder, TRITON_ATTN impl) on one config."""
    from vllm.config import set_current_vllm_config
    from vllm.v1.attention.backends.registry import AttentionBackendEnum
    from vllm.v1.kv_cache_interface import FullAttentionSpec

    spec = FullAttentionSpec(block_size=BS, num_kv_heads=HKV, head_size=D, dtype=torch.float32)
    out = []
    with set_current_vllm_config(engine_config):
        for member in (AttentionBackendEnum["ROCM_DFLASH"], AttentionBackendEnum.TRITON_ATTN):
            cls = member.get_class()
            builder = cls.get_builder_cls()(spec, ["layer.0"], engine_config, torch.device("cpu"))
            impl = cls.get_impl_cls()(HQ, D, D ** -0.5, HKV, None, None, "auto")
            out += [builder, impl]
    return out



def run_backend(builder, impl, layer, batch, kv_cache):
    metadata = builder.build(0, batch.common_metadata())
    impl.do_kv_cache_update(layer, batch.key, batch.value, kv_cache, batch.slot_mapping)
    output = torch.full_like(batch.query, float("nan"))
    impl.forward(layer, batch.query, batch.key, batch.value, kv_cache, metadata, output)
    return output


def check(backends, layer, batch, dtype, sliding_window=None, softcap=None):
    plugin_builder, plugin_impl, triton_builder, triton_impl = backends
    plugin_cache, triton_cache, ref_cache = (batch.kv_cache.clone() for _ in range(3))
    before = batch.kv_cache.clone()
    ours = run_backend(plugin_builder, plugin_impl, layer, batch, plugin_cache)
    theirs = run_backend(triton_builder, triton_impl, layer, batch, triton_cache)

    # Same cache writes; slots not in slot_mapping (incl. the -1 padding) keep their bytes.
    torch.testing.assert_close(plugin_cache, triton_cache, rtol=0, atol=0)
    k_ref, v_ref = kv_batches.split_kv(ref_cache, D)
    reference.write_kv_cache(batch.key, batch.value, k_ref, v_ref, batch.slot_mapping)
    torch.testing.assert_close(plugin_cache, ref_cache, rtol=0, atol=0)
    assert not torch.equal(plugin_cache, before) or batch.num_tokens == 0

    n = batch.num_tokens
    expected = reference.paged_attention(
        batch.query[:n].double(), k_ref.double(), v_ref.double(), batch.block_table,
        batch.seq_lens, batch.query_start_loc, causal=batch.causal, scale=D ** -0.5,
        sliding_window=sliding_window, softcap=softcap)
    tol = TOL[dtype]
    torch.testing.assert_close(ours[:n].double(), expected, rtol=tol, atol=tol)
    torch.testing.assert_close(ours[:n], theirs[:n], rtol=tol, atol=tol)
    assert torch.isnan(ours[n:]).all(), "padding rows past the real tokens must stay untouched"


def test_long_blocks_read_the_steps_own_key_value(backends, layer, monkeypatch):
    from dflash_rocm_plugin.ops.backends import triton_extend
    launched = []
    real = triton_extend.launch
    monkeypatch.setattr(triton_extend, "launch", lambda *a, **k: launched.append(a) or real(*a, **k))
    batch = kv_batches.build([70, 90, 33], [70, 50, 1], causal=True, layout=layouts()[0], padding_rows=3)
    check(backends, layer, batch, torch.float32)
    assert launched, "forward did not pass the step's key/value to ops.paged_attention"


def layouts():
    from vllm.v1.kv_cache_interface import KVCacheLayout
    return [KVCacheLayout.LBHNC, KVCacheLayout.LBNHC, KVCacheLayout.LHBNC]


# (name, seq_lens, q_lens, causal)
CASES = [
    ("prefill", [5, 17, 9], [5, 17, 9], True),
    ("decode", [1, 33, 16, 20], [1, 1, 1, 1], True),
    ("mixed", [40, 7, 18, 3], [1, 7, 6, 1], True),
    ("spec_verify_1+15", [37, 16], [16, 16], True),
    ("dflash_draft_1+15", [37, 16, 50], [16, 16, 16], False),
    # Blocks long enough for the dense-K/V kernel (forward passes the step's key/value), beside short ones.
    ("long_prefill_and_chunk", [70, 90, 33, 5], [70, 50, 1, 5], True),
]


@pytest.mark.parametrize("layout_index", [0, 1, 2])
@pytest.mark.parametrize("name,seq_lens,q_lens,causal", CASES, ids=[c[0] for c in CASES])
def test_matches_triton_attn_and_reference_fp32(backends, layer, name, seq_lens, q_lens, causal,
                                                 layout_index):
    layout = layouts()[layout_index]
    batch = kv_batches.build(seq_lens, q_lens, causal=causal, layout=layout, padding_rows=3,
                             seed=layout_index)
    check(backends, layer, batch, torch.float32)


@pytest.mark.parametrize("name,seq_lens,q_lens,causal", [CASES[2], CASES[4]], ids=["mixed", "dflash_draft"])
def test_matches_triton_attn_and_reference_fp16(engine_config, layer, name, seq_lens, q_lens, causal):
    from vllm.config import set_current_vllm_config
    from vllm.v1.attention.backends.registry import AttentionBackendEnum
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheLayout

    spec = FullAttentionSpec(block_size=BS, num_kv_heads=HKV, head_size=D, dtype=torch.float16)
    pair = []
    with set_current_vllm_config(engine_config):
        for member in (AttentionBackendEnum["ROCM_DFLASH"], AttentionBackendEnum.TRITON_ATTN):
            cls = member.get_class()
            pair += [cls.get_builder_cls()(spec, ["layer.0"], engine_config, torch.device("cpu")),
                     cls.get_impl_cls()(HQ, D, D ** -0.5, HKV, None, None, "auto")]
    batch = kv_batches.build(seq_lens, q_lens, causal=causal, layout=KVCacheLayout.LBNHC,
                             dtype=torch.float16, padding_rows=2, seed=7)
    check(pair, layer, batch, torch.float16)


def test_sliding_window_and_softcap(engine_config, layer):
    """Gemma/Mistral-style layers: window 8 and logit soft-capping, as vLLM passes them."""
    from vllm.config import set_current_vllm_config
    from vllm.v1.attention.backends.registry import AttentionBackendEnum
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheLayout

    spec = FullAttentionSpec(block_size=BS, num_kv_heads=HKV, head_size=D, dtype=torch.float32,
                             sliding_window=8)
    pair = []
    with set_current_vllm_config(engine_config):
        for member in (AttentionBackendEnum["ROCM_DFLASH"], AttentionBackendEnum.TRITON_ATTN):
            cls = member.get_class()
            pair += [cls.get_builder_cls()(spec, ["layer.0"], engine_config, torch.device("cpu")),
                     cls.get_impl_cls()(HQ, D, D ** -0.5, HKV, None, 8, "auto", 5.0)]
    batch = kv_batches.build([40, 7, 18, 3], [1, 7, 6, 1], causal=True, layout=KVCacheLayout.LBHNC,
                             padding_rows=1, seed=11)
    check(pair, layer, batch, torch.float32, sliding_window=8, softcap=5.0)


@settings(max_examples=6, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # `layer` is stateless
@given(data=st.data())
def test_random_batches(backends, layer, data):
    num_reqs = data.draw(st.integers(1, 3), label="num_reqs")
    q_lens = [data.draw(st.integers(1, 16), label="q_len") for _ in range(num_reqs)]
    seq_lens = [q + data.draw(st.integers(0, 40), label="context") for q in q_lens]
    causal = data.draw(st.booleans(), label="causal")
    layout = data.draw(st.sampled_from(layouts()), label="layout")
    batch = kv_batches.build(seq_lens, q_lens, causal=causal, layout=layout,
                             padding_rows=data.draw(st.integers(0, 2)), seed=data.draw(st.integers(0, 99)))
    check(backends, layer, batch, torch.float32)


def test_profiling_run_without_metadata(backends, layer):
    _, plugin_impl, _, _ = backends
    output = torch.full((5, HQ, D), float("nan"))
    kv_cache = torch.zeros(0, HKV, BS, 2 * D)
    assert plugin_impl.forward(layer, torch.randn(5, HQ, D), None, None, kv_cache, None, output) is output
    assert torch.equal(output, torch.zeros_like(output))


def test_non_causal_really_differs_from_causal(backends, layer):
    """Guards the differential tests: the draft case is not accidentally causal."""
    from vllm.v1.kv_cache_interface import KVCacheLayout
    plugin_builder, plugin_impl, _, _ = backends
    outs = []
    for causal in (True, False):
        batch = kv_batches.build([20], [16], causal=causal, layout=KVCacheLayout.LBHNC, seed=3)
        outs.append(run_backend(plugin_builder, plugin_impl, layer, batch, batch.kv_cache.clone()))
    assert not torch.allclose(outs[0][:15], outs[1][:15])
    torch.testing.assert_close(outs[0][15], outs[1][15])  # the last row sees every key either way
    assert math.isfinite(float(outs[1].sum()))


def _vllm_table_keys(vllm_config, spec) -> int:
    """Keys one row of vLLM's block table for this layer addresses (width x block size), by vLLM's own
    functions: the model runner rounds the width up to whole 128-token multiples of blocks."""
    try:
        from vllm.v1.kv_cache_interface import get_block_table_width  # 0.34
    except ImportError:
        from vllm.v1.worker.block_table import get_block_table_width  # 0.33
    blocks = spec.max_num_blocks_per_req(vllm_config, vllm_config.model_config.max_model_len)
    return get_block_table_width(blocks, spec.block_size, token_alignment=spec.block_table_token_alignment) \
        * spec.block_size


@pytest.mark.parametrize("max_model_len", [64, 100, 1000, 2048, 4100])
@pytest.mark.parametrize("block_size", [16, 32, 544, 592, 1056])
def test_the_scratch_bound_covers_vllms_block_table_rows(engine_config, max_model_len, block_size):
    """The builder sizes its split-KV scratch for rows of up to metadata.max_kv_len keys; a row of the
    table vLLM hands it may not be longer, or a long-context decode would find the scratch too small
    (hybrid blocks of 1056 tokens: rows of 4224 keys under max_model_len 1000)."""
    import copy

    from vllm.v1.kv_cache_interface import FullAttentionSpec

    from dflash_rocm_plugin.vllm import metadata
    config = copy.copy(engine_config)
    config.model_config = copy.copy(engine_config.model_config)
    config.model_config.max_model_len = max_model_len
    spec = FullAttentionSpec(block_size=block_size, num_kv_heads=2, head_size=128, dtype=torch.bfloat16)
    assert _vllm_table_keys(config, spec) <= metadata.max_kv_len(config, spec)


def test_split_kv_decode_uses_the_builders_workspace(backends, layer, monkeypatch):
    """Long-context decode takes the split-KV path through the scratch the builder allocated
    when it was made (sized by ops for every batch), so the forward allocates nothing: what full
    CUDA/HIP graph capture needs.  The fallback buffer is never touched."""
    from vllm.v1.kv_cache_interface import KVCacheLayout

    from dflash_rocm_plugin.ops import workspace
    plugin_builder = backends[0]
    assert plugin_builder.workspace is not None and plugin_builder.workspace.dtype == torch.float32
    used = []
    real = workspace.scratch
    monkeypatch.setattr(workspace, "scratch", lambda *a: used.append(a[-1]) or real(*a))
    monkeypatch.setattr(workspace, "_get", lambda *a: pytest.fail("the fallback buffer was used"))
    batch = kv_batches.build([700, 300], [1, 1], causal=True, layout=KVCacheLayout.LBNHC, seed=5)
    check(backends, layer, batch, torch.float32)
    assert used and all(ws is plugin_builder.workspace for ws in used)
