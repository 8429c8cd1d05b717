"""fp8 KV pools and attention sinks through the SGLang adapter, on SGLang's own pools and
ForwardBatches.

* ``--kv-cache-dtype fp8_e4m3``: SGLang's MHATokenToKVPool stores e4m3 (e4m3fn; e4m3fnuz on
  gfx94x) as uint8 and hands back fp8 views; the layer's ``k_scale`` / ``v_scale`` (0-d) are the
  checkpoint's.  The plugin writes this step's K/V as ``(x / scale)`` saturated (SGLang's own
  write neither clamps nor leaves the caller's tensor alone) and reads them dequantized; checked
  against the float64 reference (SGLang's Triton backend casts Q and P to fp8 for its dots, so
  it is no exact oracle here).  Other quantized pools are refused at start-up.
* Sinks: the ``sinks`` keyword gpt-oss passes on every layer, in extend, decode and verify,
  against SGLang's Triton backend with the same sinks and the reference.
"""

import pytest
import torch
from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool
from sglang.srt.model_executor.forward_batch_info import ForwardMode

import harness as h
from dflash_rocm_plugin import reference
from dflash_rocm_plugin.sglang.config_check import UnsupportedConfig

EXTEND, DECODE, VERIFY = ForwardMode.EXTEND, ForwardMode.DECODE, ForwardMode.TARGET_VERIFY
FORMATS = {"e4m3fn": torch.float8_e4m3fn, "e4m3fnuz": torch.float8_e4m3fnuz}


def fp8_runner(shape, fmt):
    runner = h.make_runner(shape)
    runner.token_to_kv_pool = MHATokenToKVPool(
        size=runner.token_to_kv_pool.size, page_size=shape.page_size, dtype=fmt, head_num=shape.num_kv_heads,
        head_dim=shape.head_dim, layer_num=1, device="cpu", enable_memory_saver=False, enable_alt_stream=False)
    runner.kv_index_translator.token_to_kv_pool = runner.token_to_kv_pool
    runner.token_to_kv_pool_allocator.get_kvcache = lambda: runner.token_to_kv_pool
    return runner


def expected(runner, case, *, causal, k_scale=None, v_scale=None, sinks=None, quantize=True):
    """float64 oracle: the step's K/V stored as the pool stores them, then read dequantized."""
    page = runner.page_size
    pool = runner.token_to_kv_pool
    kbuf, vbuf = pool.get_key_buffer(0).clone(), pool.get_value_buffer(0).clone()
    loc = torch.cat([s[p:p + n] for s, p, n in zip(case.slots, case.prefix, case.new)])
    if quantize:
        kbuf[loc] = reference.quantized(case.k, kbuf.dtype, k_scale)
        vbuf[loc] = reference.quantized(case.v, vbuf.dtype, v_scale)
    else:
        kbuf[loc], vbuf[loc] = case.k, case.v
    table = torch.zeros((len(case.new), -(-max(case.total) // page)), dtype=torch.int32)
    for r, s in enumerate(case.slots):
        table[r, : -(-len(s) // page)] = (s[::page] // page).to(torch.int32)
    qsl = torch.tensor([0] + list(torch.tensor(case.new).cumsum(0)), dtype=torch.int32)
    out = reference.paged_attention(case.q, kbuf.view(-1, page, *kbuf.shape[1:]), vbuf.view(-1, page, *vbuf.shape[1:]),
                                    table, torch.tensor(case.total, dtype=torch.int32), qsl, causal=causal,
                                    k_scale=k_scale, v_scale=v_scale, sinks=sinks)
    return out, (kbuf, vbuf), loc


@pytest.mark.parametrize("fmt", sorted(FORMATS))
@pytest.mark.parametrize("page_size", [1, 16])
@pytest.mark.parametrize("mode,prefix,new,encoder_only", [
    (EXTEND, [5, 16, 0], [7, 3, 17], False), (DECODE, [8, 31, 16], [1, 1, 1], False),
    (VERIFY, [1, 17, 30], [16, 16, 16], False), (VERIFY, [1, 17, 30], [16, 16, 16], True),
    # Whole prompts read the step's own K/V, rounded as the write stored them (the dense kernel).
    (EXTEND, [0, 16, 0], [40, 3, 33], False),
], ids=["extend", "decode", "verify", "dflash_draft", "prefill"])
@pytest.mark.parametrize("scaled", [False, True])
def test_fp8_pool_matches_reference(fmt, page_size, mode, prefix, new, encoder_only, scaled, monkeypatch):
    from dflash_rocm_plugin.ops import extend_launch
    from dflash_rocm_plugin.ops.backends import triton_extend
    launched = []
    real = triton_extend.launch
    monkeypatch.setattr(triton_extend, "launch", lambda *a, **k: launched.append(a) or real(*a, **k))
    shape = h.Shape(page_size=page_size)
    runner = fp8_runner(shape, FORMATS[fmt])
    case = h.build_case(runner, shape, mode, prefix, new, seed=page_size + len(new))
    case.k, case.v = case.k * 3.0, case.v * 40.0  # some values beyond the fp8 range: saturated
    layer = h.make_layer(shape, encoder_only=encoder_only)
    k_scale = v_scale = None
    if scaled:
        layer.k_scale, layer.v_scale = torch.tensor(0.05), torch.tensor(0.1)
        layer.k_scale_float, layer.v_scale_float = 0.05, 0.1
        k_scale, v_scale = layer.k_scale, layer.v_scale
    k_before = case.k.clone()
    out = h.run(h.make_backend("rocm_dflash", runner), layer, h.forward_batch(runner, case), case.q, case.k, case.v)
    assert torch.equal(case.k, k_before), "the KV write must leave the caller's tensor alone"
    want, (kbuf, vbuf), loc = expected(runner, case, causal=not encoder_only, k_scale=k_scale, v_scale=v_scale)
    pool = runner.token_to_kv_pool
    for got, ref in ((pool.get_key_buffer(0), kbuf), (pool.get_value_buffer(0), vbuf)):
        assert torch.equal(got[loc].view(torch.uint8), ref[loc].view(torch.uint8)), "fp8 bytes differ"
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out.double(), want, atol=1e-4, rtol=1e-4)
    dense_from = extend_launch.choose_extend(head_dim=shape.head_dim, max_query_len=1 << 20, device_index=None).block_m
    assert bool(launched) == (mode == EXTEND and max(new) >= dense_from), "whole prompts (only they) run dense"


@pytest.mark.parametrize("dtype,accepted", [
    (torch.float8_e4m3fn, True), (torch.float8_e4m3fnuz, True), (torch.float8_e5m2, False), (torch.uint8, False)])
def test_start_up_check_of_quantized_pools(dtype, accepted):
    shape = h.Shape()
    runner = fp8_runner(shape, dtype) if dtype != torch.uint8 else h.make_runner(shape)
    if dtype == torch.uint8:
        runner.token_to_kv_pool.dtype = torch.uint8  # a pool of a format ops does not know
    if accepted:
        h.make_backend("rocm_dflash", runner)
    else:
        with pytest.raises(UnsupportedConfig, match=r"KV cache dtype torch\.\w+ is not supported"):
            h.make_backend("rocm_dflash", runner)


@pytest.mark.parametrize("mode,prefix,new,encoder_only", [
    (EXTEND, [5, 16, 0], [7, 3, 17], False), (DECODE, [8, 31, 16], [1, 1, 1], False),
    (VERIFY, [1, 17, 30], [16, 16, 16], False), (VERIFY, [1, 17, 30], [16, 16, 16], True),
], ids=["extend", "decode", "verify", "dflash_draft"])
@pytest.mark.parametrize("page_size", [1, 16])
def test_sinks_match_triton_and_reference(mode, prefix, new, encoder_only, page_size):
    shape = h.Shape(page_size=page_size)
    runner = h.make_runner(shape)
    case = h.build_case(runner, shape, mode, prefix, new, seed=11 + page_size)
    layer = h.make_layer(shape, encoder_only=encoder_only)
    sinks = torch.tensor([0.5, -1.0, 2.0, 1.0])
    start = h.snapshot(runner)

    def run(name):
        backend = h.make_backend(name, runner)
        fb = h.forward_batch(runner, case)
        backend.init_forward_metadata(fb)
        fb._attn_output = torch.full((case.q.shape[0], case.q.shape[1] * case.q.shape[2]), float("nan"))
        fwd = backend.forward_decode if mode == DECODE else backend.forward_extend
        return fwd(case.q.reshape(case.q.shape[0], -1), case.k, case.v, layer, fb, sinks=sinks).view(case.q.shape)

    ours = run("rocm_dflash")
    h.restore(runner, start)
    want, _, _ = expected(runner, case, causal=not encoder_only, sinks=sinks, quantize=False)
    torch.testing.assert_close(ours.double(), want, atol=2e-5, rtol=2e-5)
    if not encoder_only:  # SGLang's Triton verify ignores ENCODER_ONLY's non-causality
        theirs = run("triton")
        torch.testing.assert_close(ours, theirs, atol=2e-5, rtol=2e-5)
    no_sink, _, _ = expected(runner, case, causal=not encoder_only, quantize=False)
    assert (no_sink - want).abs().max() > 1e-2  # the sinks matter in this case
