"""Scatter new keys and values into a paged cache through a slot mapping.

slot = block * PAGE_SIZE + offset.  Negative slots mark padding tokens and are
skipped, which is what both hosts use for CUDA-graph padding.

FP8 (1: e4m3fn, 2: e4m3fnuz): the caches arrive as bytes and each value is stored as
``(x / scale)`` rounded to nearest even and saturated (kernels/fp8.py), exactly as torch converts,
on every platform.  A scale is per tensor (stride 0) or per KV head (stride 1).

Two kernels serve the dense prefill kernel (kernels/extend_attention.py) with rows in q's dtype:
``cached_rows_kernel`` computes what an fp8 cache holds for the step's own rows, without storing them;
``cached_prefix_kernel`` copies what the cache holds before a chunk out of the pages.
"""

import triton
import triton.language as tl

from dflash_rocm_plugin.kernels import fp8
from dflash_rocm_plugin.kernels.paged_attention import _dense_serves, _find_sequence, _prefix_kept


@triton.jit
def _code(x, scale, FP8: tl.constexpr, USE_SCALE: tl.constexpr):
    # One expression for both kernels below, so that a row's dense copy holds the bits its cache slot does.
    x = x.to(tl.float32)
    if USE_SCALE:
        x = x / scale
    return fp8.encode_e4m3(x, FP8 == 2)


@triton.jit
def _stored(x, heads, head_ok, scale_ptr, scale_stride, FP8: tl.constexpr, USE_SCALE: tl.constexpr):
    if FP8:
        scale = 1.0
        if USE_SCALE:
            scale = tl.load(scale_ptr + heads * scale_stride, mask=head_ok, other=1.0)[:, None]
        x = _code(x, scale, FP8, USE_SCALE)
    return x


@triton.jit
def write_kv_cache_kernel(
    key_ptr, value_ptr, k_cache_ptr, v_cache_ptr, slot_mapping_ptr,
    k_scale_ptr, v_scale_ptr, k_scale_stride, v_scale_stride,
    num_kv_heads, head_dim, page_size,
    stride_kt, stride_kh, stride_kd,
    stride_vt, stride_vh, stride_vd,
    stride_kcb, stride_kcs, stride_kch, stride_kcd,
    stride_vcb, stride_vcs, stride_vch, stride_vcd,
    BLOCK_H: tl.constexpr, BLOCK_D: tl.constexpr,
    FP8: tl.constexpr, USE_K_SCALE: tl.constexpr, USE_V_SCALE: tl.constexpr,
):
    tok = tl.program_id(0)
    slot = tl.load(slot_mapping_ptr + tok).to(tl.int64)
    if slot < 0:
        return
    block = slot // page_size
    offset = slot % page_size
    heads = tl.arange(0, BLOCK_H)
    dims = tl.arange(0, BLOCK_D)
    head_ok = heads < num_kv_heads
    mask = head_ok[:, None] & (dims < head_dim)[None, :]
    tok64 = tok.to(tl.int64)

    k = tl.load(key_ptr + tok64 * stride_kt + heads[:, None] * stride_kh + dims[None, :] * stride_kd,
                mask=mask)
    tl.store(k_cache_ptr + block * stride_kcb + offset * stride_kcs
             + heads[:, None] * stride_kch + dims[None, :] * stride_kcd,
             _stored(k, heads, head_ok, k_scale_ptr, k_scale_stride, FP8, USE_K_SCALE), mask=mask)
    v = tl.load(value_ptr + tok64 * stride_vt + heads[:, None] * stride_vh + dims[None, :] * stride_vd,
                mask=mask)
    tl.store(v_cache_ptr + block * stride_vcb + offset * stride_vcs
             + heads[:, None] * stride_vch + dims[None, :] * stride_vcd,
             _stored(v, heads, head_ok, v_scale_ptr, v_scale_stride, FP8, USE_V_SCALE), mask=mask)


@triton.jit
def cached_rows_kernel(
    key_ptr, value_ptr, k_rows_ptr, v_rows_ptr, k_scale_ptr, v_scale_ptr, k_scale_stride, v_scale_stride,
    num_tokens, stride_kt, stride_kh, stride_vt, stride_vh, stride_rt,
    HEAD_DIM: tl.constexpr, BLOCK_T: tl.constexpr,
    FP8: tl.constexpr, USE_K_SCALE: tl.constexpr, USE_V_SCALE: tl.constexpr,
):
    """``[tokens, kv_heads * head_dim]`` rows in the rows' own dtype holding the fp8 values the cache stores for
    ``key`` / ``value`` (``write_kv_cache_kernel``), before their scale: every e4m3 value is exact in fp16,
    bf16 and fp32, and the scale stays with the attention (one per program there).  One program: BLOCK_T
    tokens of one KV head."""
    head = tl.program_id(1)
    toks = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    ok = (toks < num_tokens)[:, None]
    toks = toks.to(tl.int64)
    dims = tl.arange(0, HEAD_DIM)
    rows = toks[:, None] * stride_rt + head * HEAD_DIM + dims[None, :]
    k_scale = 1.0
    if USE_K_SCALE:
        k_scale = tl.load(k_scale_ptr + head * k_scale_stride)
    v_scale = 1.0
    if USE_V_SCALE:
        v_scale = tl.load(v_scale_ptr + head * v_scale_stride)
    k = tl.load(key_ptr + toks[:, None] * stride_kt + head * stride_kh + dims[None, :], mask=ok, other=0.0)
    k = fp8.decode_e4m3(_code(k, k_scale, FP8, USE_K_SCALE), FP8 == 2)
    tl.store(k_rows_ptr + rows, k.to(k_rows_ptr.dtype.element_ty), mask=ok)
    v = tl.load(value_ptr + toks[:, None] * stride_vt + head * stride_vh + dims[None, :], mask=ok, other=0.0)
    v = fp8.decode_e4m3(_code(v, v_scale, FP8, USE_V_SCALE), FP8 == 2)
    tl.store(v_rows_ptr + rows, v.to(v_rows_ptr.dtype.element_ty), mask=ok)


@triton.jit
def cached_prefix_kernel(
    k_cache_ptr, v_cache_ptr, block_table_ptr, seq_lens_ptr, query_start_loc_ptr, k_rows_ptr, v_rows_ptr,
    window, num_seqs, stride_kcb, stride_kcs, stride_kch, stride_vcb, stride_vcs, stride_vch, stride_bt, stride_bp,
    stride_rt,
    HEAD_DIM: tl.constexpr, PAGE_SIZE: tl.constexpr, GQA: tl.constexpr, MIN_QUERY: tl.constexpr,
    USE_WINDOW: tl.constexpr, BLOCK_T: tl.constexpr, FP8: tl.constexpr,
):
    """The keys and values cached before each chunk the dense prefill kernel serves, copied out of the
    pages: of a chunk of at least MIN_QUERY query tokens, its prefix's keys any of them sees (all of them,
    or under a sliding window the last ``window - 1``), when they are at most GQA times its tokens.  They go
    to the chunk's own GQA rows per query token: the i-th kept key of sequence s to row ``GQA * qsl[s] + i``
    of ``[GQA * tokens, kv_heads * head_dim]`` buffers, so no program needs another sequence's lengths and
    the buffers never hold more than the call's queries do.  fp8 caches arrive as bytes and leave as
    their exact values, before their scale (as ``cached_rows_kernel``'s).  One program: BLOCK_T kept
    keys of one sequence and one KV head."""
    head = tl.program_id(1)
    tile = tl.program_id(0)
    seq = _find_sequence(query_start_loc_ptr, tile, num_seqs, BLOCK_T, GQA)
    q_start = tl.load(query_start_loc_ptr + seq)
    q_len = tl.load(query_start_loc_ptr + seq + 1) - q_start
    prefix = tl.load(seq_lens_ptr + seq) - q_len
    kept = _prefix_kept(prefix, window, USE_WINDOW)
    first = (tile - (GQA * q_start // BLOCK_T + seq)) * BLOCK_T
    if first >= kept:
        return
    if not _dense_serves(q_len, prefix, window, MIN_QUERY, GQA, True, USE_WINDOW):
        return
    i = first + tl.arange(0, BLOCK_T)
    ok = i < kept
    pos = prefix - kept + i  # the key's position in its sequence
    dims = tl.arange(0, HEAD_DIM)
    page = tl.load(block_table_ptr + seq.to(tl.int64) * stride_bt + (pos // PAGE_SIZE) * stride_bp, mask=ok,
                   other=0).to(tl.int64)
    slot = (pos % PAGE_SIZE).to(tl.int64)
    rows = (GQA * q_start + i).to(tl.int64)[:, None] * stride_rt + head * HEAD_DIM + dims[None, :]
    k = tl.load(k_cache_ptr + (page * stride_kcb + slot * stride_kcs + head * stride_kch)[:, None] + dims[None, :],
                mask=ok[:, None])
    if FP8:
        k = fp8.decode_e4m3(k, FP8 == 2)
    tl.store(k_rows_ptr + rows, k.to(k_rows_ptr.dtype.element_ty), mask=ok[:, None])
    v = tl.load(v_cache_ptr + (page * stride_vcb + slot * stride_vcs + head * stride_vch)[:, None] + dims[None, :],
                mask=ok[:, None])
    if FP8:
        v = fp8.decode_e4m3(v, FP8 == 2)
    tl.store(v_rows_ptr + rows, v.to(v_rows_ptr.dtype.element_ty), mask=ok[:, None])
