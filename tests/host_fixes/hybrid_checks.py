"""Run inside ONE sglang release: the adapter over that release's hybrid pools; print a JSON report.

Used by test_sglang_hybrid_pools_old_releases.py.  The runner stand-in of adapter_checks.py gets
the release's own ``HybridLinearKVPool`` (full-attention K/V of GDN hybrids, global layer ids 3
and 7) or ``SWAKVPool`` with its ``SWATokenToKVPoolAllocator`` (window layers 0 and 2, full
layer 1; pages allocated round robin from shuffled free lists, out-of-window pages freed with
``free_swa`` and NaN-poisoned).  The plugin backend and the release's TritonAttnBackend run the
same ForwardBatches; outputs are compared with each other and with a float64 reference over
the requests' logical K/V.  Where the release cannot serve a pool the refusal is reported.
"""

from __future__ import annotations

import inspect
import json
import logging
import sys

import torch

from tests.host_fixes import adapter_checks as ac
from tests.host_fixes.release_checks import _import

torch.set_grad_enabled(False)
HQ, HKV, D = ac.HQ, ac.HKV, ac.D
GDN_FULL = (3, 7)
SWA_FULL, SWA_WINDOW = (1,), (0, 2)
WINDOW = 20  # SGLang's window_left
CASES = {  # name: (mode, prefix lens, new lens)
    "extend_prefix": ("EXTEND", [45, 3, 0], [7, 12, 17]),
    "verify_causal": ("TARGET_VERIFY", [50, 17, 70], [16, 16, 16]),
}


def _construct(cls, **kwargs):
    """``cls(**kwargs)`` keeping what this release's constructor takes (and its required
    ``enable_kvcache_transpose`` before 0.5.18)."""
    params = inspect.signature(cls.__init__).parameters
    if "enable_kvcache_transpose" in params:
        kwargs["enable_kvcache_transpose"] = False
    if not any(p.kind == p.VAR_KEYWORD for p in params.values()):
        kwargs = {k: v for k, v in kwargs.items() if k in params}
    return cls(**kwargs)


def _rebind(runner, pool, allocator=None):
    runner.token_to_kv_pool = pool
    if allocator is None:
        runner.token_to_kv_pool_allocator.get_kvcache = lambda: pool
    else:
        runner.token_to_kv_pool_allocator = allocator
    if hasattr(runner, "kv_index_translator"):
        from sglang.srt.mem_cache.kv_index_translator import KVIndexTranslator
        runner.kv_index_translator = KVIndexTranslator(
            req_to_token=runner.req_to_token_pool.req_to_token,
            token_to_kv_pool_allocator=runner.token_to_kv_pool_allocator, token_to_kv_pool=pool,
            page_size=runner.page_size, device="cpu", is_draft_worker=False)


def gdn_runner(page):
    from sglang.srt.mem_cache.memory_pool import HybridLinearKVPool

    runner = ac.make_runner(page)
    pool = _construct(HybridLinearKVPool, size=runner.token_to_kv_pool.size, dtype=torch.float32, page_size=page,
                      head_num=HKV, head_dim=D, full_attention_layer_ids=list(GDN_FULL), device="cpu",
                      mamba_pool=None, enable_memory_saver=False)
    _rebind(runner, pool)
    return runner


def swa_runner(page, seed, *, allocate=True):
    from sglang.srt.mem_cache.swa_memory_pool import SWAKVPool

    runner = ac.make_runner(page)
    runner.sliding_window_size = WINDOW
    pool = _construct(SWAKVPool, size=1024, size_swa=512, page_size=page, dtype=torch.float32, head_num=HKV,
                      head_dim=D, swa_attention_layer_ids=list(SWA_WINDOW), full_attention_layer_ids=list(SWA_FULL),
                      device="cpu", enable_memory_saver=False, enable_alt_stream=False)
    if not allocate:  # before 0.5.14 the allocator lives elsewhere; a refusal needs none
        _rebind(runner, pool)
        return runner
    from sglang.srt.mem_cache.allocator.swa import SWATokenToKVPoolAllocator

    allocator = SWATokenToKVPoolAllocator(size=1024, size_swa=512, page_size=page, dtype=torch.float32, device="cpu",
                                          kvcache=pool, need_sort=False)
    gen = torch.Generator().manual_seed(seed)
    for sub in (allocator.full_attn_allocator, allocator.swa_attn_allocator):
        sub.free_pages = sub.free_pages[torch.randperm(sub.free_pages.numel(), generator=gen)]
    _rebind(runner, pool, allocator)
    return runner


def _alloc(allocator, lengths, page):
    slots, done = [torch.empty(0, dtype=torch.int64) for _ in lengths], [0] * len(lengths)
    while any(d < n for d, n in zip(done, lengths)):
        for r, n in enumerate(lengths):
            if done[r] >= n:
                continue
            take = min(page, n - done[r])
            t = lambda x: torch.tensor([x])  # noqa: E731
            got = allocator.alloc(take) if page == 1 else allocator.alloc_extend(
                t(done[r]), t(done[r]), t(done[r] + take), t(done[r] + take),
                t(int(slots[r][-1]) if done[r] else -1), take)
            slots[r] = torch.cat([slots[r], got.to(torch.int64)])
            done[r] += take
    return slots


def build_case(runner, mode, prefix, new, seed, *, layers, window_layers=(), evict=False):
    """Prefix K/V in every layer's buffers; with ``evict``, whole window pages before each
    request's first window freed through ``free_swa`` and poisoned."""
    from types import SimpleNamespace

    page, pool = runner.page_size, runner.token_to_kv_pool
    gen = torch.Generator().manual_seed(seed)
    case = SimpleNamespace(mode=mode, prefix=prefix, new=new, rows=[], slots=[], logical=[], evicted=[])
    total = [p + n for p, n in zip(prefix, new)]
    if evict:
        case.slots = _alloc(runner.token_to_kv_pool_allocator, total, page)
    else:
        free = torch.randperm(pool.size // page - 1, generator=gen) + 1
        for n in total:
            pages, free = free[: -(-n // page)], free[-(-n // page):]
            pos = torch.arange(n)
            case.slots.append(pages[pos // page] * page + pos % page)
    for layer_id in layers:
        pool.get_key_buffer(layer_id).fill_(float("nan"))
        pool.get_value_buffer(layer_id).fill_(float("nan"))
    to_window = getattr(pool, "translate_loc_from_full_to_swa", None)
    freed = []
    for r, (s, p) in enumerate(zip(case.slots, prefix)):
        row = r + 1
        runner.req_to_token_pool.req_to_token[row].zero_()
        runner.req_to_token_pool.req_to_token[row, : len(s)] = s.to(torch.int32)
        case.rows.append(row)
        k, v = torch.randn((len(s), HKV, D), generator=gen), torch.randn((len(s), HKV, D), generator=gen)
        case.logical.append((k, v))
        for layer_id in layers:
            dst = to_window(s[:p]) if layer_id in window_layers else s[:p]
            pool.get_key_buffer(layer_id)[dst] = k[:p]
            pool.get_value_buffer(layer_id)[dst] = v[:p]
        keep_from = max(0, p - WINDOW) // page * page if evict else 0
        case.evicted.append(keep_from)
        if keep_from:
            freed.append(to_window(s[:keep_from]))
            runner.token_to_kv_pool_allocator.free_swa(s[:keep_from])
    for layer_id in window_layers:
        for buf in (pool.get_key_buffer(layer_id), pool.get_value_buffer(layer_id)):
            buf[:page] = float("nan")
            for f in freed:
                buf[f] = float("nan")
    t = sum(new)
    case.q, case.k, case.v = (torch.randn((t, h, D), generator=gen) for h in (HQ, HKV, HKV))
    return case


def expected(case, *, window=-1):
    from dflash_rocm_plugin import reference

    lo, width = 0, max(p + n for p, n in zip(case.prefix, case.new))
    kc = torch.zeros((len(case.new), width, HKV, D))
    vc = torch.zeros_like(kc)
    for r, ((k, v), p, n) in enumerate(zip(case.logical, case.prefix, case.new)):
        k, v = k.clone(), v.clone()
        k[p:p + n], v[p:p + n] = case.k[lo:lo + n], case.v[lo:lo + n]
        lo += n
        kc[r, : p + n], vc[r, : p + n] = k, v
    qsl = torch.tensor([0] + torch.tensor(case.new).cumsum(0).tolist(), dtype=torch.int32)
    total = torch.tensor([p + n for p, n in zip(case.prefix, case.new)], dtype=torch.int32)
    return reference.paged_attention(case.q, kc, vc, torch.arange(len(case.new), dtype=torch.int32)[:, None],
                                     total, qsl, causal=True, sliding_window=None if window < 0 else window + 1)


def _layer(layer_id, window):
    from sglang.srt.layers.radix_attention import RadixAttention

    return RadixAttention(num_heads=HQ, head_dim=D, scaling=D ** -0.5, num_kv_heads=HKV, layer_id=layer_id,
                          sliding_window_size=window)


def _pool_buffers(pool, layers):
    return [b.clone() for layer_id in layers for b in (pool.get_key_buffer(layer_id), pool.get_value_buffer(layer_id))]


def _run(name, runner, case, layer, poison):
    from sglang.srt.layers.attention.attention_registry import ATTENTION_BACKENDS

    backend = ATTENTION_BACKENDS[name](runner)
    fb = ac.forward_batch(runner, case)
    backend.init_forward_metadata(fb)
    if poison:
        fb._attn_output = torch.full((case.q.shape[0], HQ * D), float("nan"))
    out = backend.forward(case.q.reshape(case.q.shape[0], -1), case.k, case.v, layer, fb)
    return out.view(case.q.shape)


def compare(runner, case, layers_windows) -> dict:
    """Every (layer, window) through both backends from the same starting pool."""
    pool, layers = runner.token_to_kv_pool, [l for l, _ in layers_windows]
    start = _pool_buffers(pool, layers)
    plugin = {l: _run("rocm_dflash", runner, case, _layer(l, w), True) for l, w in layers_windows}
    plugin_pool = _pool_buffers(pool, layers)
    for dst, src in zip([b for l in layers for b in (pool.get_key_buffer(l), pool.get_value_buffer(l))], start):
        dst.copy_(src)
    res = {}
    try:
        triton = {l: _run("triton", runner, case, _layer(l, w), False) for l, w in layers_windows}
    except ValueError as exc:
        # Before 0.5.23 TritonAttnBackend sizes itself from layer 0, a linear layer here.
        triton, res["triton_error"] = None, str(exc)
    for l, w in layers_windows:
        ref = expected(case, window=w)
        res[str(l)] = {"finite": bool(torch.isfinite(plugin[l]).all()),
                       "vs_reference": float((plugin[l].double() - ref).abs().max())}
        if triton is not None:
            res[str(l)]["vs_triton"] = float((plugin[l] - triton[l]).abs().max())
            res[str(l)]["triton_vs_reference"] = float((triton[l].double() - ref).abs().max())
    if triton is not None:
        res["pools_equal"] = all(torch.equal(a.nan_to_num(7.0), b.nan_to_num(7.0))
                                 for a, b in zip(plugin_pool, _pool_buffers(pool, layers)))
    return res


def wrapper_reads(runner) -> dict:
    """What this release's HybridLinearAttnBackend reads off its full-attention child."""
    from sglang.srt.layers.attention.base_attn_backend import AttentionBackend
    from sglang.srt.layers.attention.attention_registry import ATTENTION_BACKENDS
    from sglang.srt.layers.attention.hybrid_linear_attn_backend import HybridLinearAttnBackend

    class _LinearSide(AttentionBackend):  # the GDN side is SGLang's; only its defaults are read here
        needs_cpu_seq_lens = False

        def init_forward_metadata(self, forward_batch):  # abstract before 0.5.13
            pass

    ours = ATTENTION_BACKENDS["rocm_dflash"](runner)
    try:
        wrapper = HybridLinearAttnBackend(ours, _LinearSide(), list(GDN_FULL))
    except Exception as exc:  # noqa: BLE001
        return {"built": False, "error": f"{type(exc).__name__}: {exc}"}
    # 0.5.11/0.5.12's wrapper copies neither; later ones read both off the full-attention child.
    return {"built": True,
            "req_to_token_pool": getattr(wrapper, "req_to_token_pool", None) is runner.req_to_token_pool,
            "token_to_kv_pool": getattr(wrapper, "token_to_kv_pool", None) is runner.token_to_kv_pool}


def refusal(runner) -> str | None:
    from sglang.srt.layers.attention.attention_registry import ATTENTION_BACKENDS
    try:
        ATTENTION_BACKENDS["rocm_dflash"](runner)
    except ValueError as exc:
        return str(exc)
    return None


def main(version: str) -> dict:
    import sglang

    report = {"version": version, "imported_from": sglang.__file__}
    _import("sglang.srt.layers.attention.triton_backend")
    _import("sglang.srt.speculative.dflash_info")
    ac.install_runtime_context()
    from dflash_rocm_plugin.sglang import compat, register

    register()
    report["gdn"], report["swa"] = {}, {}
    report["gdn_wrapper"] = wrapper_reads(gdn_runner(1))
    for page in (1, 16):
        for name, (mode, prefix, new) in CASES.items():
            runner = gdn_runner(page)
            case = build_case(runner, mode, prefix, new, seed=page + len(name), layers=GDN_FULL)
            report["gdn"][f"{name}/page{page}"] = compare(runner, case, [(3, -1)])
    swa_served = compat.kv_write_loc_class() is not None
    report["swa_served"] = swa_served
    if not swa_served:
        report["swa_refusal"] = refusal(swa_runner(1, seed=0, allocate=False))
        return report
    for page in (1, 16):
        for name, (mode, prefix, new) in CASES.items():
            runner = swa_runner(page, seed=page)
            case = build_case(runner, mode, prefix, new, seed=len(name), layers=SWA_FULL + SWA_WINDOW,
                              window_layers=SWA_WINDOW, evict=True)
            r = compare(runner, case, [(0, WINDOW), (1, -1), (2, WINDOW)])
            r["evicted"] = any(case.evicted)
            r["window_gap"] = float((expected(case, window=WINDOW) - expected(case)).abs().max())
            r["slots_differ"] = any(not torch.equal(s, runner.token_to_kv_pool.translate_loc_from_full_to_swa(s))
                                    for s in case.slots)
            report["swa"][f"{name}/page{page}"] = r
    return report


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    print("RESULT " + json.dumps(main(sys.argv[1]), default=str))
