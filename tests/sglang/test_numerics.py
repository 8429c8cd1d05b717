"""Differential numerics on identical SGLang ForwardBatches: the plugin's rocm_dflash
backend vs SGLang's own TritonAttnBackend (both Triton-interpreted on CPU) vs the plugin's
float64 reference, for EXTEND with a radix prefix, DECODE, causal TARGET_VERIFY of 16
tokens and non-causal ENCODER_ONLY (DFLASH draft) verify, page sizes 1 and 16, GQA, fp32
and fp16, shuffled non-contiguous pages.  Outputs start NaN-poisoned, unowned pool slots
hold NaN, and the KV pool after the forward must equal Triton's bit for bit."""

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sglang.srt.model_executor.forward_batch_info import ForwardMode

import harness as h
from dflash_rocm_plugin.sglang.backend import sglang_window_to_ops

EXTEND, DECODE, VERIFY = ForwardMode.EXTEND, ForwardMode.DECODE, ForwardMode.TARGET_VERIFY
CASES = {
    # name: (mode, prefix lens, new lens, ENCODER_ONLY layer)
    "extend_prefix": (EXTEND, [5, 16, 0], [7, 3, 17], False),
    # Whole prompts long enough for the dense-K/V kernel (forward_extend passes the rows it wrote),
    # beside a chunk over a prefix that reads the pages.
    "extend_prompts": (EXTEND, [0, 3, 0], [40, 35, 33], False),
    "decode": (DECODE, [8, 31, 16], [1, 1, 1], False),
    "verify_causal": (VERIFY, [1, 17, 30], [16, 16, 16], False),
    "verify_encoder_only": (VERIFY, [1, 17, 30], [16, 16, 16], True),
}
SHAPES = {
    "fp32_gqa2_d32": dict(num_q_heads=4, num_kv_heads=2, head_dim=32, dtype=torch.float32),
    "fp16_gqa4_d64": dict(num_q_heads=8, num_kv_heads=2, head_dim=64, dtype=torch.float16),
}


def run_both(runner, shape, case, layer):
    """(plugin out, triton out, plugin pool, triton pool) from the same starting pool."""
    start = h.snapshot(runner)
    plugin = h.run(h.make_backend("rocm_dflash", runner), layer, h.forward_batch(runner, case),
                   case.q, case.k, case.v)
    plugin_pool = h.snapshot(runner)
    h.restore(runner, start)
    triton = h.run(h.make_backend("triton", runner), layer, h.forward_batch(runner, case),
                   case.q, case.k, case.v, poison_out=False)
    return plugin, triton, plugin_pool, h.snapshot(runner)


def assert_pools_equal(a, b):
    for x, y in zip(a, b):
        assert torch.equal(x.nan_to_num(7.0), y.nan_to_num(7.0))


@pytest.mark.parametrize("shape_name", SHAPES)
@pytest.mark.parametrize("page_size", [1, 16])
@pytest.mark.parametrize("case_name", CASES)
def test_plugin_matches_triton_and_reference(case_name, page_size, shape_name):
    mode, prefix, new, encoder_only = CASES[case_name]
    shape = h.Shape(page_size=page_size, **SHAPES[shape_name])
    runner = h.make_runner(shape)
    case = h.build_case(runner, shape, mode, prefix, new, seed=len(case_name) + page_size)
    layer = h.make_layer(shape, encoder_only=encoder_only)
    plugin, triton, plugin_pool, triton_pool = run_both(runner, shape, case, layer)

    assert not plugin.isnan().any(), "rows left unwritten (NaN poison survived) or NaN read"
    ref = h.expected(runner, case, shape, causal=not encoder_only)
    tol = h.tolerance(shape.dtype)
    torch.testing.assert_close(plugin.double(), ref, atol=tol, rtol=tol)
    torch.testing.assert_close(plugin.double(), triton.double(), atol=tol, rtol=tol)
    assert_pools_equal(plugin_pool, triton_pool)
    if mode != DECODE:  # the mask matters in this case: the other causality is far off
        other = h.expected(runner, case, shape, causal=encoder_only)
        assert (other - ref).abs().max() > 0.05


def test_whole_prompts_read_the_rows_just_written(monkeypatch):
    from dflash_rocm_plugin.ops.backends import triton_extend
    launched = []
    real = triton_extend.launch
    monkeypatch.setattr(triton_extend, "launch", lambda *a, **k: launched.append(a) or real(*a, **k))
    test_plugin_matches_triton_and_reference("extend_prompts", 16, "fp32_gqa2_d32")
    assert launched, "forward_extend did not pass the new K/V to ops.paged_attention"


def test_draft_extend_matches_triton():
    """Eager DRAFT_EXTEND_V2 (EAGLE draft extend) carries extend fields like EXTEND."""
    shape = h.Shape(page_size=16)
    runner = h.make_runner(shape)
    case = h.build_case(runner, shape, ForwardMode.DRAFT_EXTEND_V2, [12, 30], [4, 4], seed=8)
    layer = h.make_layer(shape)
    plugin, triton, plugin_pool, triton_pool = run_both(runner, shape, case, layer)
    ref = h.expected(runner, case, shape, causal=True)
    torch.testing.assert_close(plugin.double(), ref, atol=2e-5, rtol=2e-5)
    torch.testing.assert_close(plugin.double(), triton.double(), atol=2e-5, rtol=2e-5)
    assert_pools_equal(plugin_pool, triton_pool)


@pytest.mark.parametrize("mode", [EXTEND, VERIFY])
def test_sliding_window_matches_triton(mode):
    """SGLang's window_left W (keys p-W..p) maps to ops' window W+1; Triton agrees in extend/verify."""
    window = 6
    shape = h.Shape(page_size=1)
    runner = h.make_runner(shape, sliding_window=window)
    prefix, new = ([9, 3], [7, 12]) if mode == EXTEND else ([9, 30], [16, 16])
    case = h.build_case(runner, shape, mode, prefix, new, seed=3)
    layer = h.make_layer(shape, sliding_window=window)
    plugin, triton, plugin_pool, triton_pool = run_both(runner, shape, case, layer)
    ref = h.expected(runner, case, shape, causal=True, sglang_window=window)
    torch.testing.assert_close(plugin.double(), ref, atol=2e-5, rtol=2e-5)
    torch.testing.assert_close(plugin.double(), triton.double(), atol=2e-5, rtol=2e-5)
    off_by_one = h.expected(runner, case, shape, causal=True, sglang_window=window - 1)
    assert (off_by_one - ref).abs().max() > 0.01


@pytest.mark.parametrize("window", [6, 37])
def test_sliding_window_whole_prompts_run_dense_and_match_triton(window, monkeypatch):
    """Gemma-4 / gpt-oss windowed layers: whole prompts take the dense kernel under the window, beside a
    chunk over a prefix on the pages."""
    from dflash_rocm_plugin.ops.backends import triton_extend
    launched = []
    real = triton_extend.launch
    monkeypatch.setattr(triton_extend, "launch", lambda *a, **k: launched.append(a) or real(*a, **k))
    shape = h.Shape(page_size=16)
    runner = h.make_runner(shape, sliding_window=window)
    case = h.build_case(runner, shape, EXTEND, [0, 9, 0], [70, 12, 45], seed=5)
    layer = h.make_layer(shape, sliding_window=window)
    plugin, triton, plugin_pool, triton_pool = run_both(runner, shape, case, layer)
    assert launched, "whole prompts under a window did not take the dense kernel"
    ref = h.expected(runner, case, shape, causal=True, sglang_window=window)
    torch.testing.assert_close(plugin.double(), ref, atol=2e-5, rtol=2e-5)
    torch.testing.assert_close(plugin.double(), triton.double(), atol=2e-5, rtol=2e-5)
    assert_pools_equal(plugin_pool, triton_pool)


def test_sliding_window_decode_keeps_window_plus_one_keys():
    """Decode uses the same W+1-key rule as extend (HF's window; SGLang's FlashInfer/FA3
    decode rule), not Triton's decode-only min(seq_len, W)."""
    window = 5
    shape = h.Shape(page_size=16)
    runner = h.make_runner(shape, sliding_window=window)
    case = h.build_case(runner, shape, DECODE, [20, 3, 40], [1, 1, 1], seed=4)
    layer = h.make_layer(shape, sliding_window=window)
    out = h.run(h.make_backend("rocm_dflash", runner), layer, h.forward_batch(runner, case), case.q, case.k, case.v)
    ref = h.expected(runner, case, shape, causal=True, sglang_window=window)
    torch.testing.assert_close(out.double(), ref, atol=2e-5, rtol=2e-5)


@pytest.mark.parametrize("w, expected", [(-1, None), (None, None), (0, 1), (7, 8), (4095, 4096)])
def test_window_translation(w, expected):
    assert sglang_window_to_ops(w) == expected


def test_decode_with_kv_already_written():
    """The fused-AITER Qwen3 decode path writes K/V itself and calls attention with
    k=v=None, save_kv_cache=False."""
    shape = h.Shape(page_size=16)
    runner = h.make_runner(shape)
    case = h.build_case(runner, shape, DECODE, [8, 31], [1, 1], seed=5)
    fb = h.forward_batch(runner, case)
    pool = runner.token_to_kv_pool
    pool.get_key_buffer(0)[fb.out_cache_loc] = case.k
    pool.get_value_buffer(0)[fb.out_cache_loc] = case.v
    backend = h.make_backend("rocm_dflash", runner)
    backend.init_forward_metadata(fb)
    layer = h.make_layer(shape)
    out = backend.forward_decode(case.q.reshape(2, -1), None, None, layer, fb, save_kv_cache=False)
    ref = h.expected(runner, case, shape, causal=True)
    torch.testing.assert_close(out.view(case.q.shape).double(), ref, atol=2e-5, rtol=2e-5)


def test_attention_through_radix_layer():
    """``RadixAttention.forward`` (what models call) reaches the backend the same way."""
    from sglang.srt.model_executor.forward_context import ForwardContext, forward_context

    shape = h.Shape(page_size=1)
    runner = h.make_runner(shape)
    case = h.build_case(runner, shape, VERIFY, [4, 9], [16, 16], seed=6)
    backend = h.make_backend("rocm_dflash", runner)
    fb = h.forward_batch(runner, case)
    backend.init_forward_metadata(fb)
    layer = h.make_layer(shape, encoder_only=True)
    with forward_context(ForwardContext(attn_backend=backend)):
        out = layer(case.q.reshape(32, -1), case.k.reshape(32, -1), case.v.reshape(32, -1), fb)
    ref = h.expected(runner, case, shape, causal=False)
    torch.testing.assert_close(out.view(case.q.shape).double(), ref, atol=2e-5, rtol=2e-5)


@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_random_batches_match_reference(data):
    page_size = data.draw(st.sampled_from([1, 4, 16]))
    group = data.draw(st.sampled_from([1, 2, 4]))
    mode = data.draw(st.sampled_from([EXTEND, DECODE, VERIFY]))
    encoder_only = mode == VERIFY and data.draw(st.booleans())
    bs = data.draw(st.integers(1, 3))
    prefix = data.draw(st.lists(st.integers(0 if mode == EXTEND else 1, 40), min_size=bs, max_size=bs))
    if mode == EXTEND:
        new = data.draw(st.lists(st.integers(1, 20), min_size=bs, max_size=bs))
    else:
        new = [1 if mode == DECODE else data.draw(st.sampled_from([4, 16]))] * bs
    shape = h.Shape(num_q_heads=2 * group, num_kv_heads=2, head_dim=data.draw(st.sampled_from([16, 24, 64])),
                    page_size=page_size)
    runner = h.make_runner(shape, verify_tokens=new[0])
    case = h.build_case(runner, shape, mode, prefix, new, seed=data.draw(st.integers(0, 1000)))
    out = h.run(h.make_backend("rocm_dflash", runner), h.make_layer(shape, encoder_only=encoder_only),
                h.forward_batch(runner, case), case.q, case.k, case.v)
    ref = h.expected(runner, case, shape, causal=not encoder_only)
    torch.testing.assert_close(out.double(), ref, atol=2e-5, rtol=2e-5)
