"""bf16 prefill and chunked prefill with their own K/V (``paged_attention(new_keys=, new_values=)``), over
bf16 and fp8 caches, against the float64 reference, on the GPU's own launch (TMA tiles on Hopper), and
graph replay equal to eager.

Batches mix decodes, q16 blocks, prefill chunks over a prefix and whole prompts, so both kernels of a call
run; unowned cache slots, the new K/V's padding rows and the outputs are NaN before each call.
"""

import json

import pytest
import torch

from dflash_rocm_plugin import ops, reference
from dflash_rocm_plugin.ops import extend_launch
from tests.conftest import clear_tuned_caches
from tests.gpu.caches import paged_caches

pytestmark = pytest.mark.gpu


def _build(seq_lens, q_lens, page=16, hq=32, hkv=8, d=128, seed=0, pad_rows=8):
    g = torch.Generator(device="cuda").manual_seed(seed)
    k, v, table = paged_caches(seq_lens, page, hkv, d, g)
    qsl = torch.tensor([0] + list(torch.tensor(q_lens).cumsum(0)), dtype=torch.int32, device="cuda")
    tokens = int(qsl[-1])
    q = torch.randn(tokens, hq, d, device="cuda", dtype=torch.bfloat16, generator=g)
    # The hosts' layout: q, k and v of a token side by side in one row of the fused projection.
    fused = torch.full((tokens + pad_rows, (hq + 2 * hkv) * d), float("nan"), device="cuda", dtype=torch.bfloat16)
    new_k = fused[:, hq * d:(hq + hkv) * d].view(-1, hkv, d)
    new_v = fused[:, (hq + hkv) * d:].view(-1, hkv, d)
    for i, (s, n) in enumerate(zip(seq_lens, q_lens)):
        pos = torch.arange(s - n, s, device="cuda")
        slots = table[i, pos // page].long()
        new_k[qsl[i]:qsl[i + 1]] = k[slots, pos % page]
        new_v[qsl[i]:qsl[i + 1]] = v[slots, pos % page]
    return q, k, v, table, torch.tensor(seq_lens, dtype=torch.int32, device="cuda"), qsl, new_k, new_v


def _assert_matches_float64(q, k, v, table, sl, qsl, out, **features):
    """``out`` is finite and within 1 % (relative norm) of the float64 reference of the causal call."""
    torch.cuda.synchronize()
    assert torch.isfinite(out).all()
    cpu = {name: t.cpu() if isinstance(t, torch.Tensor) else t for name, t in features.items()}
    ref = reference.paged_attention(q.cpu(), k.cpu(), v.cpu(), table.cpu(), sl.cpu(), qsl.cpu(), causal=True, **cpu)
    rel = float((out.double().cpu() - ref).norm() / ref.norm())
    assert rel < 1e-2, rel


CASES = {
    "1x4K prompt": ([4096], [4096]),
    "chunk 2.5K over 3K": ([3072 + 2500], [2500]),
    "short prompts beside a long one": ([300, 129, 2048, 64], [300, 129, 2048, 64]),
    "mixed": ([1, 700, 2100, 4096, 40, 513], [1, 16, 2100, 1500, 1, 513]),
    # Prefixes at GQA x the chunk (dense, for Qwen3-8B's 4), one key past it (paged there, dense for GQA 8)
    # and off every tile and page edge.
    "chunks at and past the prefix bound": ([2048 + 8192, 2048 + 8193, 3001 + 2100], [2048, 2048, 2100]),
}


def _stored(cache, scale, fmt):
    """What a host's fp8 write stores: ``(x / scale)`` saturated, in the GPU's own format."""
    big = torch.finfo(fmt).max
    return (cache.float() / scale.view(1, 1, -1, 1)).clamp(-big, big).to(fmt)


def _fp8(k, v, hkv):
    fmt = ops.native_fp8_dtype(ops.gpu_arch(0))
    ks = torch.linspace(0.01, 0.03, hkv, device="cuda")
    vs = torch.linspace(0.004, 0.01, hkv, device="cuda")
    return _stored(k, ks, fmt), _stored(v, vs, fmt), ks, vs


@pytest.mark.parametrize("kv", ["bf16", "fp8"])
@pytest.mark.parametrize("heads", [(32, 8, 128), (16, 2, 256)], ids=["qwen3-8b", "qwen3.5-full-attention"])
@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("tma", [True, False], ids=["tma", "pointers"])
def test_dense_kv_prefill_matches_float64(name, tma, heads, kv):
    # Over an fp8 cache (per-head scales) the call rounds the host's rows as the write stored them; the
    # reference reads the dequantized cache.
    seq_lens, q_lens = CASES[name]
    hq, hkv, d = heads
    q, k, v, table, sl, qsl, nk, nv = _build(seq_lens, q_lens, hq=hq, hkv=hkv, d=d)
    scales = {}
    if kv == "fp8":
        k, v, ks, vs = _fp8(k, v, hkv)
        scales = dict(k_scale=ks, v_scale=vs)
    out = torch.full_like(q, float("nan"))
    with extend_launch.forced_extend(use_desc=tma):
        assert extend_launch.choose_extend(head_dim=d, max_query_len=max(q_lens), device_index=0) is not None
        ops.paged_attention(q, k, v, table, sl, qsl, causal=True, out=out, max_query_len=max(q_lens),
                            new_keys=nk, new_values=nv, **scales)
    _assert_matches_float64(q, k, v, table, sl, qsl, out, **scales)
    # The same call reading every key from the pages agrees as closely.
    paged = ops.paged_attention(q, k, v, table, sl, qsl, causal=True, max_query_len=max(q_lens), **scales)
    assert float((out.double() - paged.double()).norm() / paged.double().norm()) < 1e-2


def _graph_replays_as_eager(call, out, refresh):
    """Capture ``call(out)``, put fresh values into the captured buffers (``refresh``: a graph that baked
    in the capture's values fails), replay: the replay equals an eager call and differs from the first."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        call(out)
    torch.cuda.current_stream().wait_stream(s)
    eager = out.clone()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        call(out)
    refresh()
    out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    want = torch.full_like(out, float("nan"))
    call(want)
    torch.cuda.synchronize()
    assert torch.equal(out, want)
    assert not torch.equal(out, eager)


@pytest.mark.parametrize("layer", ["qwen3", "gpt-oss window and sinks"])
def test_dense_kv_prefill_graph_matches_eager(layer):
    seq_lens, q_lens = CASES["mixed"]
    if layer == "qwen3":
        q, k, v, table, sl, qsl, nk, nv = _build(seq_lens, q_lens)
        extra = {}
    else:
        q, k, v, table, sl, qsl, nk, nv = _build(seq_lens, q_lens, hq=64, hkv=8, d=64)
        extra = dict(sliding_window=128, sinks=torch.randn(64, device="cuda"))

    def call(into):
        ops.paged_attention(q, k, v, table, sl, qsl, causal=True, out=into, max_query_len=max(q_lens),
                            new_keys=nk, new_values=nv, **extra)

    def refresh():
        q.copy_(torch.randn_like(q))
        for t in (k, nk):      # the cache and the new rows stay equal (unowned slots stay NaN)
            t.mul_(0.5)
        for t in (v, nv):
            t.mul_(-2.0)
        if extra:
            extra["sinks"].mul_(-1.5)

    _graph_replays_as_eager(call, torch.full_like(q, float("nan")), refresh)


# gpt-oss (sinks on every layer, a 128-key window on every other one) and Gemma-4's sliding layers.
FEATURES = {
    "gpt-oss full": ((64, 8, 64), dict(sinks=True)),
    "gpt-oss windowed": ((64, 8, 64), dict(sinks=True, window=128)),
    "gemma-4 sliding": ((16, 8, 256), dict(window=512)),
}


@pytest.mark.parametrize("feature", list(FEATURES))
@pytest.mark.parametrize("name", ["1x4K prompt", "short prompts beside a long one", "mixed",
                                  "chunks at and past the prefix bound"])
@pytest.mark.parametrize("tma", [True, False], ids=["tma", "pointers"])
def test_dense_kv_prefill_with_sinks_and_windows_matches_float64(feature, name, tma):
    (hq, hkv, d), kw = FEATURES[feature]
    seq_lens, q_lens = CASES[name]
    q, k, v, table, sl, qsl, nk, nv = _build(seq_lens, q_lens, hq=hq, hkv=hkv, d=d, seed=1)
    sinks = torch.randn(hq, device="cuda") + 1.0 if kw.get("sinks") else None
    window = kw.get("window")
    out = torch.full_like(q, float("nan"))
    with extend_launch.forced_extend(use_desc=tma):
        ops.paged_attention(q, k, v, table, sl, qsl, causal=True, out=out, max_query_len=max(q_lens),
                            new_keys=nk, new_values=nv, sliding_window=window, sinks=sinks)
    _assert_matches_float64(q, k, v, table, sl, qsl, out, sliding_window=window, sinks=sinks)


@pytest.mark.parametrize("tma", [True, False], ids=["tma", "pointers"])
def test_short_prompts_in_a_step_of_many_rows_run_dense(tma):
    # Hopper's short-prompt launch (host bound 1024, at least 4096 rows): 128 x 64 tiles.
    seq_lens = [1024, 1024, 1024, 1024, 900, 77]
    q, k, v, table, sl, qsl, nk, nv = _build(seq_lens, seq_lens)
    cfg = extend_launch.choose_extend(head_dim=128, max_query_len=1024, device_index=0, num_tokens=q.shape[0])
    if cfg is None:
        pytest.skip("short prompts read the pages on this GPU")
    assert (cfg.block_m, cfg.block_n) == (128, 64)
    out = torch.full_like(q, float("nan"))
    with extend_launch.forced_extend(use_desc=tma, qo_desc=tma):
        ops.paged_attention(q, k, v, table, sl, qsl, causal=True, out=out, max_query_len=1024,
                            new_keys=nk, new_values=nv)
    _assert_matches_float64(q, k, v, table, sl, qsl, out)


TUNED_TILE = dict(block_m=64, block_n=64, num_warps=4, num_stages=3)


@pytest.mark.parametrize("dense", [False, TUNED_TILE], ids=["pages", "tile-64x64"])
def test_a_tuned_entry_decides_its_bucket_s_prompts(dense, tmp_path, monkeypatch, tuned_caches_cleared):
    # What ``dflash-rocm tune --prefill`` writes for a bucket: its prompts on the pages, or the dense kernel in
    # another tile than the rule's.  The file is read as a user's is; the call follows it and stays exact.
    seq_lens = [2048, 2048]
    q, k, v, table, sl, qsl, nk, nv = _build(seq_lens, seq_lens, seed=4)
    capacity = table.shape[1] * 16
    bucket = ops.tuned_bucket(num_tokens=q.shape[0], num_seqs=2, max_query_len=2048, kv_keys=capacity, page_size=16)
    entry = dict(zip(("q", "batch", "context", "page"), bucket), heads=[32, 8, 128], dtype="bfloat16",
                 kv_cache_dtype="bfloat16", causal=True, dense=dense)
    arch = ops.gpu_arch(0)
    path = tmp_path / f"{arch}.json"
    path.write_text(json.dumps(ops.tuned_document(arch, [entry], device="test")))
    monkeypatch.setenv(ops.TUNED_CONFIGS_ENV, str(path))
    clear_tuned_caches()
    launch = ops.describe_launch(num_tokens=q.shape[0], num_seqs=2, num_q_heads=32, num_kv_heads=8, head_dim=128,
                                 page_size=16, kv_capacity=capacity, causal=True, max_query_len=2048, device="cuda",
                                 new_kv=True).dense_launch
    if dense is False:
        assert launch is None
    else:
        assert {f: getattr(launch, f) for f in TUNED_TILE} == TUNED_TILE

    def call(into):
        ops.paged_attention(q, k, v, table, sl, qsl, causal=True, out=into, max_query_len=2048,
                            new_keys=nk, new_values=nv)

    out = torch.full_like(q, float("nan"))
    call(out)
    _assert_matches_float64(q, k, v, table, sl, qsl, out)

    def refresh():
        q.copy_(torch.randn_like(q))
        for t in (v, nv):
            t.mul_(-2.0)

    _graph_replays_as_eager(call, out, refresh)


def test_dense_kv_prefill_over_an_fp8_cache_graph_matches_eager():
    seq_lens, q_lens = CASES["mixed"]
    q, k, v, table, sl, qsl, nk, nv = _build(seq_lens, q_lens, seed=3)
    k8, v8, ks, vs = _fp8(k, v, 8)

    def call(into):
        ops.paged_attention(q, k8, v8, table, sl, qsl, causal=True, out=into, max_query_len=max(q_lens),
                            new_keys=nk, new_values=nv, k_scale=ks, v_scale=vs)

    def refresh():   # new rows and scales; the cache stays what the rows write
        q.copy_(torch.randn_like(q))
        for t in (k, nk):
            t.mul_(0.5)
        for t in (v, nv):
            t.mul_(-2.0)
        ks.mul_(1.5)
        k8.copy_(_stored(k, ks, k8.dtype))
        v8.copy_(_stored(v, vs, v8.dtype))

    out = torch.full_like(q, float("nan"))
    _graph_replays_as_eager(call, out, refresh)
    _assert_matches_float64(q, k8, v8, table, sl, qsl, out, k_scale=ks, v_scale=vs)
