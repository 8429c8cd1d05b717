"""Scatter new keys and values into a paged cache through a slot mapping.

slot = block * PAGE_SIZE + offset.  Negative slots mark padding tokens and are
skipped, which is what both hosts use for CUDA-graph padding.
"""

import triton
import triton.language as tl


@triton.jit
def write_kv_cache_kernel(
    key_ptr, value_ptr, k_cache_ptr, v_cache_ptr, slot_mapping_ptr,
    num_kv_heads, head_dim, page_size,
    stride_kt, stride_kh, stride_kd,
    stride_vt, stride_vh, stride_vd,
    stride_kcb, stride_kcs, stride_kch, stride_kcd,
    stride_vcb, stride_vcs, stride_vch, stride_vcd,
    BLOCK_H: tl.constexpr, BLOCK_D: tl.constexpr,
):
    tok = tl.program_id(0)
    slot = tl.load(slot_mapping_ptr + tok).to(tl.int64)
    if slot < 0:
        return
    block = slot // page_size
    offset = slot % page_size
    heads = tl.arange(0, BLOCK_H)
    dims = tl.arange(0, BLOCK_D)
    mask = (heads < num_kv_heads)[:, None] & (dims < head_dim)[None, :]
    tok64 = tok.to(tl.int64)

    k = tl.load(key_ptr + tok64 * stride_kt + heads[:, None] * stride_kh + dims[None, :] * stride_kd,
                mask=mask)
    tl.store(k_cache_ptr + block * stride_kcb + offset * stride_kcs
             + heads[:, None] * stride_kch + dims[None, :] * stride_kcd, k, mask=mask)
    v = tl.load(value_ptr + tok64 * stride_vt + heads[:, None] * stride_vh + dims[None, :] * stride_vd,
                mask=mask)
    tl.store(v_cache_ptr + block * stride_vcb + offset * stride_vcs
             + heads[:, None] * stride_vch + dims[None, :] * stride_vcd, v, mask=mask)
