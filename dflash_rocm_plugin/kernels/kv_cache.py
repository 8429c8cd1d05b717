"""Scatter new keys and values into a paged cache through a slot mapping.

slot = block * PAGE_SIZE + offset.  Negative slots mark padding tokens and are
skipped, which is what both hosts use for CUDA-graph padding.

FP8 (1: e4m3fn, 2: e4m3fnuz): the caches arrive as bytes and each value is stored as
``(x / scale)`` rounded to nearest even and saturated (kernels/fp8.py), exactly as torch converts,
on every platform.  A scale is per tensor (stride 0) or per KV head (stride 1).
"""

import triton
import triton.language as tl

from dflash_rocm_plugin.kernels import fp8


@triton.jit
def _stored(x, heads, head_ok, scale_ptr, scale_stride, FP8: tl.constexpr, USE_SCALE: tl.constexpr):
    if FP8:
        x = x.to(tl.float32)
        if USE_SCALE:
            x = x / tl.load(scale_ptr + heads * scale_stride, mask=head_ok, other=1.0)[:, None]
        x = fp8.encode_e4m3(x, FP8 == 2)
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
