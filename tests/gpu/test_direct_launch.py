"""Direct relaunches of the compiled kernels (ops/backends/triton_direct.py) are bit-identical to
``JITFunction.run`` launches, on shapes that change Triton's specialization.

Each case runs with ``DFLASH_ROCM_DIRECT_LAUNCH=0`` (every launch through ``JITFunction.run``) and
then with it on, where the repeat calls must not reach ``JITFunction.run`` at all; outputs start as
NaN and must match bit for bit, padding rows included.  Cases: split and unsplit, odd strides
(a q slice of a qkv buffer, interleaved K/V views, a strided out), views at addresses that are not
16-byte aligned alternating with aligned ones (two variants of one key), sequences of one key, an
fp8 cache with scales, a sliding window with sinks, and a CUDA/HIP graph captured on direct
launches and replayed on new inputs.
"""

from __future__ import annotations

import pytest
import torch

from dflash_rocm_plugin import ops
from dflash_rocm_plugin.ops import _runtime, call_cache
from dflash_rocm_plugin.ops.backends import triton_direct

pytestmark = pytest.mark.gpu


@pytest.fixture
def jit_runs(monkeypatch):
    """Counts JITFunction.run calls (the normal launch path)."""
    kernels, _ = _runtime.kernels()
    cls = type(kernels.paged_attention_kernel)
    original = cls.run
    count = [0]

    def counted(self, *args, **kwargs):
        count[0] += 1
        return original(self, *args, **kwargs)
    monkeypatch.setattr(cls, "run", counted)
    return count


def _switch(monkeypatch, on: bool):
    if on:
        monkeypatch.delenv(triton_direct.SWITCH, raising=False)
    else:
        monkeypatch.setenv(triton_direct.SWITCH, "0")
    monkeypatch.setattr(triton_direct, "_facts", None)  # read the switch again
    call_cache.clear()
    if on and not triton_direct.enabled():
        import triton
        pytest.skip(f"direct launches are off for Triton {triton.__version__} (3.2-3.9 only)")


def _case(batch, ctx, q_len, page=16, hq=32, hkv=8, d=128, layout="plain", seq_lens=None, seed=0,
          dtype=torch.bfloat16):
    g = torch.Generator(device="cuda").manual_seed(seed)
    lens = seq_lens or [ctx] * batch
    pages = max(lens) // page + 1
    nb = batch * pages + 4
    if layout == "strided":  # vLLM's per-layer [blocks, 2, ...] style: K and V views of one buffer
        buf = torch.randn(nb, hkv, page, 2 * d, device="cuda", dtype=dtype, generator=g)
        k, v = buf.transpose(1, 2).split(d, dim=-1)
        q = torch.randn(batch * q_len, hq + 2 * hkv, d, device="cuda", dtype=dtype, generator=g)[:, :hq]
    else:
        k = torch.randn(nb, page, hkv, d, device="cuda", dtype=dtype, generator=g)
        v = torch.randn(nb, page, hkv, d, device="cuda", dtype=dtype, generator=g)
        q = torch.randn(batch * q_len, hq, d, device="cuda", dtype=dtype, generator=g)
    table = torch.randperm(nb, device="cuda", generator=g)[: batch * pages].view(batch, pages).int()
    seq = torch.tensor(lens, device="cuda", dtype=torch.int32)
    qsl = torch.arange(0, (batch + 1) * q_len, q_len, device="cuda", dtype=torch.int32)
    return [q, k, v, table, seq, qsl]


def _out_like(q, strided):
    if strided:
        return torch.full((q.shape[0], q.shape[1], q.shape[2] + 64), float("nan"), device=q.device,
                          dtype=q.dtype)[..., :q.shape[2]]
    return torch.full_like(q, float("nan"))


def _unaligned(t):
    """A copy of ``t`` at an address 2 elements past a 16-byte boundary (not 16-byte aligned)."""
    flat = torch.empty(t.numel() + 8, device=t.device, dtype=t.dtype)[2:2 + t.numel()]
    flat.copy_(t.reshape(-1))
    assert flat.data_ptr() % 16 != 0
    return flat.view(t.shape)


def _runs(monkeypatch, jit_runs, calls, on):
    """Outputs of ``calls`` (each: args, kwargs, strided_out) run three times each."""
    _switch(monkeypatch, on)
    outs = []
    for rep in range(3):
        if rep == 1:
            before = jit_runs[0]
        for args, kw, strided in calls:
            out = _out_like(args[0], strided)
            ops.paged_attention(*args, out=out, **kw)
            outs.append(out)
    torch.cuda.synchronize()
    return outs, jit_runs[0] - before


def _check(monkeypatch, jit_runs, calls):
    want, _ = _runs(monkeypatch, jit_runs, calls, on=False)
    got, normal_after_warmup = _runs(monkeypatch, jit_runs, calls, on=True)
    assert normal_after_warmup == 0, "repeat calls went through JITFunction.run"
    for a, b in zip(got, want):
        assert torch.equal(a.nan_to_num(7.0), b.nan_to_num(7.0))
        assert torch.equal(a.isnan(), b.isnan())


FP8 = ops.native_fp8_dtype(ops.gpu_arch())


@pytest.mark.parametrize("name", ["split 8x4K", "forced split 1x4K", "unsplit 32x1K", "decode q1 64x1K",
                                  "prefill 1x2K", "draft 1x4K non-causal"])
def test_direct_launch_matches_the_normal_launch(monkeypatch, jit_runs, name):
    shapes = {"split 8x4K": (8, 4096, 16, {}), "forced split 1x4K": (1, 4096, 16, dict(num_kv_splits=4)),
              "unsplit 32x1K": (32, 1024, 16, dict(num_kv_splits=1)), "decode q1 64x1K": (64, 1024, 1, {}),
              "prefill 1x2K": (1, 2048, 2048, {}), "draft 1x4K non-causal": (1, 4096, 16, dict(causal=False))}
    batch, ctx, q_len, extra = shapes[name]
    kw = {"causal": True, "max_query_len": q_len, **extra}
    _check(monkeypatch, jit_runs, [(_case(batch, ctx, q_len), kw, False)])


def test_odd_strides(monkeypatch, jit_runs):
    _check(monkeypatch, jit_runs, [(_case(4, 1000, 16, layout="strided"), dict(causal=True, max_query_len=16), True),
                                   (_case(4, 1000, 16, layout="strided"), dict(causal=False), False)])


def test_unaligned_views_alternating_with_aligned_ones(monkeypatch, jit_runs):
    calls = []
    for seed in (0, 1):
        args = _case(2, 3000, 16, seed=seed)
        calls.append((args, dict(causal=True, max_query_len=16), False))
        for i in (0, 3, 4):  # q, the block table, the sequence lengths at unaligned addresses
            moved = list(args)
            moved[i] = _unaligned(args[i])
            calls.append((moved, dict(causal=True, max_query_len=16), False))
    _check(monkeypatch, jit_runs, calls)


def test_sequences_of_one_key(monkeypatch, jit_runs):
    _check(monkeypatch, jit_runs, [(_case(3, 17, 1, seq_lens=[1, 1, 17]), dict(causal=True, max_query_len=1), False),
                                   (_case(2, 1, 1, seq_lens=[1, 1]), dict(causal=False, num_kv_splits=2), False)])


def test_fp8_cache_window_and_sinks(monkeypatch, jit_runs):
    q, k, v, table, seq, qsl = _case(4, 2048, 16, hq=64, d=64)
    k8, v8 = k.to(FP8), v.to(FP8)
    scales = dict(k_scale=torch.tensor([0.75], device="cuda"), v_scale=torch.tensor([1.25], device="cuda"))
    sinks = torch.randn(64, device="cuda")
    _check(monkeypatch, jit_runs, [
        ((q, k8, v8, table, seq, qsl), dict(causal=True, max_query_len=16, **scales), False),
        ((q, k, v, table, seq, qsl), dict(causal=True, max_query_len=16, sliding_window=128, sinks=sinks), False),
        ((q, k8, v8, table, seq, qsl), dict(causal=False, sliding_window=128, sinks=sinks, **scales), False)])


@pytest.mark.parametrize("splits", [None, 1, 4])
def test_a_graph_captured_on_direct_launches_replays_like_eager_normal_launches(monkeypatch, jit_runs, splits):
    args = _case(3, 1040, 16)
    q = args[0]
    ws = torch.empty(32 * q.shape[0] * q.shape[1] * (q.shape[2] + 1), device="cuda")
    kw = dict(causal=True, max_query_len=16, num_kv_splits=splits, workspace=ws)
    _switch(monkeypatch, True)
    out = torch.full_like(q, float("nan"))
    run = lambda: ops.paged_attention(*args, out=out, **kw)  # noqa: E731
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        run()
        run()  # the second is a direct launch, on the side stream
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    before = jit_runs[0]
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        run()
    assert jit_runs[0] == before, "the captured launch went through JITFunction.run"
    fresh = _case(3, 1040, 16, seed=5)
    for dst, src in zip(args, fresh):
        dst.copy_(src)
    out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    _switch(monkeypatch, False)
    want = torch.full_like(q, float("nan"))
    ops.paged_attention(*args, out=want, **kw)
    torch.cuda.synchronize()
    assert torch.equal(out, want)


def _own_rows_case(seq_lens, q_lens, hq=32, hkv=8, d=128, unaligned=False):
    """A prefill call's tensors and its own K/V rows (views of a fused q/k/v buffer, as the hosts pass
    them); ``unaligned``: the buffer starts 4 bytes past a 16-byte boundary (pointer loads)."""
    from tests.gpu.test_dense_kv_prefill import _build
    q, k, v, table, sl, qsl, nk, nv = _build(seq_lens, q_lens, hq=hq, hkv=hkv, d=d)
    if unaligned:
        nk, nv = _unaligned(nk), _unaligned(nv)
    return [q, k, v, table, sl, qsl], dict(causal=True, max_query_len=max(q_lens), new_keys=nk, new_values=nv)


@pytest.mark.parametrize("feature", ["qwen3", "gpt-oss window and sinks"])
def test_dense_prefill_relaunches_match_the_normal_launch(monkeypatch, jit_runs, feature):
    """Whole prompts on the dense kernel (TMA descriptors built per call on Hopper), beside chunks on
    the paged one; rows at 16-byte aligned addresses alternate with rows that are not (pointer loads)."""
    heads, extra = ((32, 8, 128), {}) if feature == "qwen3" else (
        (64, 8, 64), dict(sliding_window=128, sinks=torch.randn(64, device="cuda")))
    calls = []
    for unaligned in (False, True, False):
        args, kw = _own_rows_case([2048, 300, 1500 + 700], [2048, 300, 700], *heads, unaligned=unaligned)
        calls.append((args, {**kw, **extra}, False))
    _check(monkeypatch, jit_runs, calls)
