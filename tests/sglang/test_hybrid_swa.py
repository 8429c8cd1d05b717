"""Hybrid sliding-window memory (SWAKVPool, SGLang's default for Gemma-4 and gpt-oss) on
SGLang 0.5.23: window layers read and write the window sub-pool through the pool's own
full->window slot translation; full layers read the full sub-pool.

Requests are allocated by SGLang's ``SWATokenToKVPoolAllocator`` from shuffled free lists
(so full and window slots differ) and their out-of-window pages are freed with its
``free_swa``, as the sliding-window cache does; the freed window slots and page 0 (where the
freed pages now point) hold NaN.  Outputs must be finite and equal the float64 reference
over the requests' logical K/V, and SGLang's own TritonAttnBackend on the same pool; after
the forward both sub-pools must equal Triton's bit for bit.
"""

import pytest
import torch
from sglang.srt.model_executor.forward_batch_info import ForwardMode

import harness as h
import hybrid_harness as hh
from dflash_rocm_plugin.sglang import pools
from dflash_rocm_plugin.sglang.config_check import UnsupportedConfig

EXTEND, DECODE, VERIFY = ForwardMode.EXTEND, ForwardMode.DECODE, ForwardMode.TARGET_VERIFY
WINDOW = 20  # SGLang's window_left: keys p-20..p
CASES = {
    "extend_prefix": (EXTEND, [45, 3, 0], [7, 12, 17]),
    "decode": (DECODE, [60, 31, 7], [1, 1, 1]),
    "verify_causal": (VERIFY, [50, 17, 70], [16, 16, 16]),
}


def all_kv(runner):
    pool = runner.token_to_kv_pool
    return [b.clone() for sub in (pool.full_kv_pool, pool.swa_kv_pool) for b in sub.k_buffer + sub.v_buffer]


def restore_kv(runner, snap):
    pool = runner.token_to_kv_pool
    for dst, src in zip([b for sub in (pool.full_kv_pool, pool.swa_kv_pool) for b in sub.k_buffer + sub.v_buffer],
                        snap):
        dst.copy_(src)


def run_layers(name, runner, case, shape):
    """Backend ``name`` on the batch for every layer (window 0 and 2, full 1); outputs by layer."""
    backend = h.make_backend(name, runner)
    outs = {}
    for layer_id in (0, 1, 2):
        window = WINDOW if layer_id in hh.SWA_WINDOW_LAYERS else -1
        layer = h.make_layer(shape, sliding_window=window, layer_id=layer_id)
        fb = hh.swa_forward_batch(runner, case)
        outs[layer_id] = h.run(backend, layer, fb, case.q, case.k, case.v, poison_out=name == "rocm_dflash")
    return outs


def test_swa_pool_is_read_through_its_translation():
    runner = hh.make_swa_runner(h.Shape(), window=WINDOW)
    layout = pools.describe(runner.token_to_kv_pool)
    assert layout.kind == "swa" and layout.swa_layers == frozenset(hh.SWA_WINDOW_LAYERS)
    backend = h.make_backend("rocm_dflash", runner)
    assert backend.swa_pool is runner.token_to_kv_pool


@pytest.mark.parametrize("page_size", [1, 16])
@pytest.mark.parametrize("case_name", CASES)
def test_window_and_full_layers_match_reference_and_triton_after_eviction(case_name, page_size):
    mode, prefix, new = CASES[case_name]
    shape = h.Shape(page_size=page_size)
    runner = hh.make_swa_runner(shape, window=WINDOW, seed=page_size)
    case = hh.build_swa_case(runner, shape, mode, prefix, new, window=WINDOW, seed=len(case_name))
    assert any(case.evicted), "the case must evict window pages"
    full, swa = case.slots, [runner.token_to_kv_pool.translate_loc_from_full_to_swa(s) for s in case.slots]
    assert any(not torch.equal(f[e:], s[e:]) for f, s, e in zip(full, swa, case.evicted)), \
        "full and window slots must differ, or a missed translation would pass"

    start = all_kv(runner)
    plugin = run_layers("rocm_dflash", runner, case, shape)
    plugin_kv = all_kv(runner)
    restore_kv(runner, start)
    triton = run_layers("triton", runner, case, shape)

    for layer_id, out in plugin.items():
        window = WINDOW if layer_id in hh.SWA_WINDOW_LAYERS else -1
        assert torch.isfinite(out).all(), f"layer {layer_id}: an evicted (NaN) slot was read"
        ref = hh.swa_expected(case, shape, causal=True, sglang_window=window)
        torch.testing.assert_close(out.double(), ref, atol=2e-5, rtol=2e-5, msg=f"layer {layer_id}")
        if mode != DECODE or window < 0:
            # Triton's decode keeps min(seq_len, W) window keys; ours and the reference W + 1
            # (tests/sglang/test_numerics.py::test_sliding_window_decode_keeps_window_plus_one_keys).
            torch.testing.assert_close(out, triton[layer_id], atol=2e-5, rtol=2e-5, msg=f"layer {layer_id}")
    for a, b in zip(plugin_kv, all_kv(runner)):
        assert torch.equal(a.nan_to_num(7.0), b.nan_to_num(7.0))


def test_graph_metadata_translates_window_writes_and_reads():
    """Capture-shaped metadata: the window table and write slots live in graph buffers,
    refilled out of graph, and give the eager result."""
    shape = h.Shape(page_size=16)
    runner = hh.make_swa_runner(shape, window=WINDOW, seed=3)
    case = hh.build_swa_case(runner, shape, VERIFY, [50, 40], [16, 16], window=WINDOW, seed=4)
    layer = h.make_layer(shape, sliding_window=WINDOW, layer_id=0)
    start = all_kv(runner)
    eager = h.run(h.make_backend("rocm_dflash", runner), layer, hh.swa_forward_batch(runner, case),
                  case.q, case.k, case.v)
    eager_kv = all_kv(runner)
    restore_kv(runner, start)
    backend = h.make_backend("rocm_dflash", runner)
    backend.init_cuda_graph_state(4, 64)
    fb = hh.swa_forward_batch(runner, case)
    backend.init_forward_metadata_out_graph(fb)
    meta = backend.forward_metadata
    assert meta.swa_block_table is backend._graph.swa_block_table
    assert meta.swa_write_loc.data_ptr() == backend._graph.swa_write_loc.data_ptr()
    graph = h.run(backend, layer, fb, case.q, case.k, case.v, eager=False)
    torch.testing.assert_close(graph, eager, atol=0, rtol=0)
    for a, b in zip(eager_kv, all_kv(runner)):
        assert torch.equal(a.nan_to_num(7.0), b.nan_to_num(7.0))


def test_window_pool_layer_without_a_window_is_refused():
    shape = h.Shape()
    runner = hh.make_swa_runner(shape, window=WINDOW)
    case = hh.build_swa_case(runner, shape, VERIFY, [30], [16], window=WINDOW)
    backend = h.make_backend("rocm_dflash", runner)
    fb = hh.swa_forward_batch(runner, case)
    backend.init_forward_metadata(fb)
    with pytest.raises(ValueError, match="layer 0 lives in the sliding-window KV pool but has no sliding window"):
        backend.forward(case.q.reshape(16, -1), case.k, case.v, h.make_layer(shape, layer_id=0), fb)


@pytest.mark.parametrize("change, reason", [
    (dict(swa_req_ring_size=64), "per-request rings"),
    (dict(swa_uses_full_indices=True), "per-request rings"),
])
def test_unreadable_swa_pools_are_refused_naming_the_flag(change, reason):
    runner = hh.make_swa_runner(h.Shape(), window=WINDOW)
    for name, value in change.items():
        setattr(runner.token_to_kv_pool, name, value)
    with pytest.raises(UnsupportedConfig, match=f"{reason}.*--disable-hybrid-swa-memory"):
        h.make_backend("rocm_dflash", runner)


def test_the_flags_named_exist_in_this_release(capsys):
    """The refusal names --disable-hybrid-swa-memory; the README names the DFLASH draft window
    flag, which 0.5.23 spells --speculative-draft-window-size (the old
    --speculative-dflash-draft-window-size alias is gone)."""
    import argparse

    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    args = parser.parse_args(["--model-path", "m", pools.DISABLE_SWA_POOL,
                              "--speculative-draft-window-size", "2048"])
    assert args.disable_hybrid_swa_memory is True and args.speculative_draft_window_size == 2048
    with pytest.raises(SystemExit):
        parser.parse_args(["--model-path", "m", "--speculative-dflash-draft-window-size", "2048"])
