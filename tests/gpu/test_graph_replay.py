"""CUDA/HIP-graph capture + replay of the plugin's ops is bit-identical to eager launches.

Covers ops.paged_attention causal and non-causal, one split and forced split-KV (the merge
kernel is inside the graph too), page sizes 16 and 1, 512-wide heads, and ops.write_kv_cache with
padding slots.
Replays run on fresh inputs copied into the captured buffers, so a graph that baked in stale
values (or a host-side decision from the capture-time data) is caught.
"""

import pytest
import torch

from dflash_rocm_plugin import ops

pytestmark = pytest.mark.gpu


def _case(batch, ctx, page, q_len=16, hq=32, hkv=8, d=128, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    pages = ctx // page + 1
    nb = batch * pages + 4
    k = torch.randn(nb, page, hkv, d, device="cuda", dtype=torch.bfloat16, generator=g)
    v = torch.randn(nb, page, hkv, d, device="cuda", dtype=torch.bfloat16, generator=g)
    table = torch.randperm(nb, device="cuda", generator=g)[: batch * pages].view(batch, pages).int()
    q = torch.randn(batch * q_len, hq, d, device="cuda", dtype=torch.bfloat16, generator=g)
    seq_lens = torch.full((batch,), ctx, device="cuda", dtype=torch.int32)
    qsl = torch.arange(0, (batch + 1) * q_len, q_len, device="cuda", dtype=torch.int32)
    return q, k, v, table, seq_lens, qsl


def _capture(fn):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()  # warm-up compiles outside the capture
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("splits", [None, 1, 8])
@pytest.mark.parametrize("page", [16, 1])
def test_paged_attention_graph_matches_eager(causal, splits, page):
    _check_graph(causal, splits, page, heads=(32, 8, 128))


@pytest.mark.parametrize("causal", [False, True])
def test_512_wide_heads_graph_matches_eager(causal):
    """Gemma-4 global layers: two 64-row tiles of 8 warps per block, split at this small batch."""
    _check_graph(causal, None, 16, heads=(16, 2, 512))


def _check_graph(causal, splits, page, heads):
    hq, hkv, d = heads
    q, k, v, table, seq_lens, qsl = _case(batch=3, ctx=1040, page=page, hq=hq, hkv=hkv, d=d)
    ws = torch.empty(32 * q.shape[0] * q.shape[1] * (q.shape[2] + 1), device=q.device)  # 32 splits
    out = torch.full_like(q, float("nan"))

    def launch():
        ops.paged_attention(q, k, v, table, seq_lens, qsl, causal=causal, out=out,
                            max_query_len=16, num_kv_splits=splits, workspace=ws)

    graph = _capture(launch)
    for seed in (1, 2):
        # New values in the captured buffers: the replay must follow them.
        q2, k2, v2, *_ = _case(batch=3, ctx=1040, page=page, hq=hq, hkv=hkv, d=d, seed=seed)
        q.copy_(q2)
        k.copy_(k2)
        v.copy_(v2)
        seq_lens.fill_(1040 - 17 * seed)  # shorter sequences: device-side metadata only
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        replayed = out.clone()
        out.fill_(float("nan"))
        launch()
        torch.cuda.synchronize()
        assert torch.isfinite(replayed).all()
        assert torch.equal(replayed, out), "graph replay differs from the eager launch"


def test_write_kv_cache_graph_matches_eager():
    hkv, d, page, nb, t = 8, 128, 16, 64, 48
    key = torch.randn(t, hkv, d, device="cuda", dtype=torch.bfloat16)
    value = torch.randn(t, hkv, d, device="cuda", dtype=torch.bfloat16)
    slots = torch.randperm(nb * page, device="cuda")[:t].int()
    slots[::7] = -1  # padding tokens
    k_cache = torch.zeros(nb, page, hkv, d, device="cuda", dtype=torch.bfloat16)
    v_cache = torch.zeros_like(k_cache)

    def launch():
        ops.write_kv_cache(key, value, k_cache, v_cache, slots)

    graph = _capture(launch)
    key.normal_()
    value.normal_()
    slots.copy_(torch.randperm(nb * page, device="cuda")[:t].int())
    slots[::5] = -1
    k_cache.zero_()
    v_cache.zero_()
    graph.replay()
    torch.cuda.synchronize()
    k_graph, v_graph = k_cache.clone(), v_cache.clone()
    k_cache.zero_()
    v_cache.zero_()
    launch()
    torch.cuda.synchronize()
    assert torch.equal(k_graph, k_cache) and torch.equal(v_graph, v_cache)
    ok = slots >= 0
    s = slots[ok].long()
    assert torch.equal(k_cache.view(-1, hkv, d)[s], key[ok])
