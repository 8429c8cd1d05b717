"""Model-runner stand-ins for SGLang's hybrid pools, built from SGLang's own classes.

GDN hybrids (Qwen3.5/3.6, Qwen3-Next): a real ``Qwen3_5TextConfig`` (every 4th layer full
attention), ``HybridReqToTokenPool`` with its ``MambaPool``, ``HybridLinearKVPool`` and the
runner's ``KVIndexTranslator``; the backend under test is wrapped by SGLang's own
``attn_backend_wrapper`` (``HybridLinearAttnBackend`` + the real ``GDNAttnBackend``).

Hybrid sliding-window memory (Gemma-4, gpt-oss): a real ``SWAKVPool`` and its
``SWATokenToKVPoolAllocator``; requests are allocated through the allocator page by page,
round robin (so pages interleave), from free lists shuffled as serving churn leaves them
(so full and window slots differ), and evicted through ``free_swa`` as SGLang's
sliding-window cache does.  Evicted window slots and slot 0 are NaN-poisoned.
"""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import torch
from sglang.srt.mem_cache.kv_index_translator import KVIndexTranslator

import harness as h

GDN_LAYERS = 8          # layers 3 and 7 are full attention (full_attention_interval 4)
FULL_LAYER = 3


def _attach(runner, req_pool, kv_pool, allocator):
    runner.req_to_token_pool, runner.token_to_kv_pool = req_pool, kv_pool
    runner.token_to_kv_pool_allocator = allocator
    runner.kv_index_translator = KVIndexTranslator(
        req_to_token=req_pool.req_to_token, token_to_kv_pool_allocator=allocator, token_to_kv_pool=kv_pool,
        page_size=runner.page_size, device="cpu", is_draft_worker=False)
    return runner


def gdn_config(shape: h.Shape):
    from sglang.srt.configs.qwen3_5 import Qwen3_5TextConfig

    return Qwen3_5TextConfig(
        hidden_size=64, num_hidden_layers=GDN_LAYERS, num_attention_heads=shape.num_q_heads,
        num_key_value_heads=shape.num_kv_heads, head_dim=shape.head_dim, full_attention_interval=4,
        linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16, linear_value_head_dim=16,
        linear_conv_kernel_dim=4, vocab_size=64)


def make_gdn_runner(shape: h.Shape, *, max_bs: int = 4, verify_tokens: int = 16):
    from sglang.srt.mem_cache.memory_pool import HybridLinearKVPool, HybridReqToTokenPool

    cfg = gdn_config(shape)
    runner = h.make_runner(shape, max_bs=max_bs, verify_tokens=verify_tokens)
    req_pool = HybridReqToTokenPool(
        size=max_bs, mamba_size=max_bs, mamba_spec_state_size=max_bs, max_context_len=h.CONTEXT_LEN,
        device="cpu", enable_memory_saver=False, cache_params=cfg.mamba2_cache_params,
        mamba_layer_ids=cfg.linear_layer_ids, enable_mamba_extra_buffer=False,
        speculative_num_draft_tokens=verify_tokens, speculative_eagle_topk=1, enable_overlap_schedule=False)
    size = runner.token_to_kv_pool.size
    kv_pool = HybridLinearKVPool(
        size=size, dtype=shape.dtype, page_size=shape.page_size, head_num=shape.num_kv_heads,
        head_dim=shape.head_dim, full_attention_layer_ids=cfg.full_attention_layer_ids, device="cpu",
        mamba_pool=req_pool.mamba_pool)
    allocator = SimpleNamespace(page_size=shape.page_size, get_kvcache=lambda: kv_pool)
    runner.model_config.hf_config = runner.model_config.hf_text_config = cfg
    runner.server_args = SimpleNamespace(enable_mis=False)
    runner.prefill_attention_backend_str = runner.decode_attention_backend_str = "rocm_dflash"
    return _attach(runner, req_pool, kv_pool, allocator)


def wrapped(name: str, runner):
    """SGLang's own hybrid wrapper around backend ``name``, as ModelRunner builds it."""
    from sglang.srt.layers.attention.attention_registry import attn_backend_wrapper

    return attn_backend_wrapper(runner, h.make_backend(name, runner))


# ---- hybrid sliding-window memory ------------------------------------------------------

SWA_FULL_LAYERS, SWA_WINDOW_LAYERS = (1,), (0, 2)


def make_swa_runner(shape: h.Shape, *, window: int, max_bs: int = 4, verify_tokens: int = 16,
                    size: int = 1024, size_swa: int = 512, seed: int = 0):
    """``window`` is SGLang's window_left (the runner's ``sliding_window_size``)."""
    from sglang.srt.mem_cache.allocator.swa import SWATokenToKVPoolAllocator
    from sglang.srt.mem_cache.memory_pool import ReqToTokenPool
    from sglang.srt.mem_cache.swa_memory_pool import SWAKVPool

    page = shape.page_size
    runner = h.make_runner(shape, max_bs=max_bs, verify_tokens=verify_tokens, sliding_window=window)
    req_pool = ReqToTokenPool(size=max_bs, max_context_len=h.CONTEXT_LEN, device="cpu", enable_memory_saver=False)
    kv_pool = SWAKVPool(
        size=size, size_swa=size_swa, page_size=page, dtype=shape.dtype, head_num=shape.num_kv_heads,
        head_dim=shape.head_dim, swa_attention_layer_ids=list(SWA_WINDOW_LAYERS),
        full_attention_layer_ids=list(SWA_FULL_LAYERS), device="cpu", enable_memory_saver=False,
        enable_alt_stream=False)
    allocator = SWATokenToKVPoolAllocator(size=size, size_swa=size_swa, page_size=page, dtype=shape.dtype,
                                          device="cpu", kvcache=kv_pool, need_sort=False)
    gen = torch.Generator().manual_seed(seed)
    for sub in (allocator.full_attn_allocator, allocator.swa_attn_allocator):
        sub.free_pages = sub.free_pages[torch.randperm(sub.free_pages.numel(), generator=gen)]
    return _attach(runner, req_pool, kv_pool, allocator)


@dataclasses.dataclass
class SwaCase(h.Case):
    evicted: list[int] = dataclasses.field(default_factory=list)  # per request: positions < this freed
    logical_k: list[torch.Tensor] = dataclasses.field(default_factory=list)  # [total, Hkv, D] per request
    logical_v: list[torch.Tensor] = dataclasses.field(default_factory=list)


def _alloc_pages_round_robin(allocator, lengths: list[int], page: int) -> list[torch.Tensor]:
    slots = [torch.empty(0, dtype=torch.int64) for _ in lengths]
    done = [0] * len(lengths)
    while any(d < n for d, n in zip(done, lengths)):
        for r, n in enumerate(lengths):
            if done[r] >= n:
                continue
            take = min(page, n - done[r])
            if page == 1:
                got = allocator.alloc(take)
            else:
                last = int(slots[r][-1]) if done[r] else -1
                t = lambda x: torch.tensor([x])  # noqa: E731
                got = allocator.alloc_extend(t(done[r]), t(done[r]), t(done[r] + take), t(done[r] + take),
                                             t(last), take)
            assert got is not None, "the test pools are too small"
            slots[r] = torch.cat([slots[r], got.to(torch.int64)])
            done[r] += take
    return slots


def build_swa_case(runner, shape: h.Shape, mode, prefix: list[int], new: list[int], *, window: int,
                   seed: int = 0) -> SwaCase:
    """Prefix K/V in both sub-pools for every layer; then the window layers' slots of
    whole pages that lie entirely before this step's first window are freed through
    ``free_swa`` and NaN-poisoned, as is every unowned slot of both sub-pools."""
    page = shape.page_size
    pool, allocator = runner.token_to_kv_pool, runner.token_to_kv_pool_allocator
    case = SwaCase(mode, list(prefix), list(new))
    case.slots = _alloc_pages_round_robin(allocator, case.total, page)
    case.rows = list(range(1, len(new) + 1))
    gen = torch.Generator().manual_seed(seed)
    for sub in (pool.full_kv_pool, pool.swa_kv_pool):
        for buf in sub.k_buffer + sub.v_buffer:
            buf.fill_(float("nan"))
    hkv, d = shape.num_kv_heads, shape.head_dim

    def draw(n, heads):
        return torch.randn((n, heads, d), generator=gen).to(shape.dtype)

    freed = []
    for row, s, p, n in zip(case.rows, case.slots, case.prefix, case.new):
        runner.req_to_token_pool.req_to_token[row].zero_()
        runner.req_to_token_pool.req_to_token[row, : p + n] = s.to(torch.int32)
        k, v = draw(p + n, hkv), draw(p + n, hkv)
        case.logical_k.append(k)
        case.logical_v.append(v)
        swa_slots = pool.translate_loc_from_full_to_swa(s[:p])
        for layer_id in SWA_FULL_LAYERS + SWA_WINDOW_LAYERS:
            dst = swa_slots if layer_id in SWA_WINDOW_LAYERS else s[:p]
            pool.get_key_buffer(layer_id)[dst] = k[:p]
            pool.get_value_buffer(layer_id)[dst] = v[:p]
        # Keys at positions >= p - window stay visible to this step's first query.
        keep_from = max(0, p - window) // page * page
        case.evicted.append(keep_from)
        if keep_from:
            freed.append(pool.translate_loc_from_full_to_swa(s[:keep_from]))
            allocator.free_swa(s[:keep_from])
    for layer_id in SWA_WINDOW_LAYERS:
        for buf in (pool.get_key_buffer(layer_id), pool.get_value_buffer(layer_id)):
            buf[:page] = float("nan")  # page 0: where freed window pages now point
            for f in freed:
                buf[f] = float("nan")
    t = sum(new)
    case.q, case.k, case.v = draw(t, shape.num_q_heads), draw(t, hkv), draw(t, hkv)
    return case


def swa_expected(case: SwaCase, shape: h.Shape, *, causal: bool, sglang_window: int = -1) -> torch.Tensor:
    """float64 oracle over the requests' logical K/V (the step's own included), laid out
    densely: nothing the pools freed or poisoned can reach it."""
    from dflash_rocm_plugin import reference

    lo = 0
    ks, vs, pages = [], [], []
    for r, (p, n) in enumerate(zip(case.prefix, case.new)):
        k, v = case.logical_k[r].clone(), case.logical_v[r].clone()
        k[p:p + n], v[p:p + n] = case.k[lo:lo + n], case.v[lo:lo + n]
        lo += n
        ks.append(k)
        vs.append(v)
    width = max(case.total)
    kc = torch.zeros((len(ks), width, shape.num_kv_heads, shape.head_dim), dtype=shape.dtype)
    vc = torch.zeros_like(kc)
    for r, (k, v) in enumerate(zip(ks, vs)):
        kc[r, : k.shape[0]], vc[r, : v.shape[0]] = k, v
    table = torch.arange(len(ks), dtype=torch.int32)[:, None]
    qsl = torch.tensor([0] + torch.tensor(case.new).cumsum(0).tolist(), dtype=torch.int32)
    return reference.paged_attention(case.q, kc, vc, table, torch.tensor(case.total, dtype=torch.int32), qsl,
                                     causal=causal, sliding_window=None if sglang_window < 0 else sglang_window + 1)


def swa_forward_batch(runner, case: SwaCase):
    return h.forward_batch(runner, case)
