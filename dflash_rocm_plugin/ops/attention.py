"""``paged_attention``: a short query block per sequence over a paged KV cache."""

from __future__ import annotations

import torch

from dflash_rocm_plugin.ops import _runtime, _validate, impl_select, launch_config, workspace


def paged_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_table: torch.Tensor,
    seq_lens: torch.Tensor,
    query_start_loc: torch.Tensor,
    *,
    causal: bool,
    scale: float | None = None,
    sliding_window: int | None = None,
    softcap: float | None = None,
    out: torch.Tensor | None = None,
    max_query_len: int | None = None,
    num_kv_splits: int | None = None,
    workspace_buffer: torch.Tensor | None = None,
) -> torch.Tensor:
    """Attention of each sequence's newest query tokens over its paged K/V.

    Args:
        q: ``[num_tokens, num_q_heads, head_dim]``.
        k_cache, v_cache: ``[num_blocks, block_size, num_kv_heads, head_dim]``, any strides
            (views of a host's cache are read in place).
        block_table: int32 ``[>= num_seqs, max_blocks_per_seq]``.
        seq_lens: int32 ``[num_seqs]``: KV length of each sequence including this step's
            tokens, which must already be in the cache.
        query_start_loc: int32 ``[num_seqs + 1]``: rows of sequence ``i`` are
            ``q[qsl[i]:qsl[i+1]]``, the last ``qsl[i+1] - qsl[i]`` positions of that sequence.
            Rows past ``qsl[-1]`` are padding and are left untouched.
        causal: the query at absolute position ``p`` sees keys ``0..p``; otherwise every query
            sees all ``seq_len`` keys of its sequence (the DFlash draft block).
        scale: softmax scale, default ``head_dim ** -0.5``.
        sliding_window: key ``j`` is visible to the query at position ``p`` iff ``p - j < window``.
        softcap: logits become ``softcap * tanh(logits / softcap)``.
        out: written in place when given (any strides); otherwise allocated.
        max_query_len: optional host-known upper bound on query rows per sequence; lets
            decode batches use smaller tiles.  Never read from the device.
        num_kv_splits: force the split-KV count (``None`` chooses from the shapes).
        workspace_buffer: optional float32 scratch for split-KV; otherwise a per-device
            buffer reserved with :func:`reserve_workspace` (or grown outside graph capture).

    Returns:
        ``out``: ``[num_tokens, num_q_heads, head_dim]`` in ``q.dtype``.
    """
    _validate.tensor("q", q, ndim=3, dtypes=_validate.ATTENTION_DTYPES)
    device = q.device
    _runtime.require_launchable(device)
    num_tokens, num_q_heads, head_dim = q.shape
    _validate.head_dim("q.shape[2] (head_dim)", head_dim)
    for name, cache in (("k_cache", k_cache), ("v_cache", v_cache)):
        _validate.tensor(name, cache, ndim=4, device=device)
        if cache.dtype != q.dtype:
            raise ValueError(
                f"{name} has dtype {cache.dtype} but q has {q.dtype}; the cache must hold q's dtype "
                f"(supported: float16, bfloat16, float32; quantized caches are not supported)")
    if k_cache.shape != v_cache.shape:
        raise ValueError(f"k_cache {tuple(k_cache.shape)} and v_cache {tuple(v_cache.shape)} differ in shape")
    _, block_size, num_kv_heads, cache_head_dim = k_cache.shape
    if cache_head_dim != head_dim:
        raise ValueError(f"k_cache head_dim {cache_head_dim} differs from q head_dim {head_dim}")
    if block_size < 1:
        raise ValueError("k_cache.shape[1] (block_size) must be >= 1")
    group = _validate.heads(num_q_heads, num_kv_heads)

    _validate.tensor("seq_lens", seq_lens, ndim=1, dtypes=_validate.INDEX_DTYPES, device=device)
    num_seqs = seq_lens.shape[0]
    _validate.tensor("query_start_loc", query_start_loc, ndim=1, dtypes=_validate.INDEX_DTYPES, device=device)
    if query_start_loc.shape[0] != num_seqs + 1:
        raise ValueError(
            f"query_start_loc must have num_seqs + 1 = {num_seqs + 1} entries, got {query_start_loc.shape[0]}")
    _validate.tensor("block_table", block_table, ndim=2, dtypes=_validate.INDEX_DTYPES, device=device)
    if block_table.shape[0] < num_seqs:
        raise ValueError(f"block_table has {block_table.shape[0]} rows for {num_seqs} sequences")
    if not isinstance(causal, bool):
        raise ValueError(f"causal must be a bool, got {causal!r}")
    scale = head_dim ** -0.5 if scale is None else _validate.positive_float("scale", scale)
    window = 0 if sliding_window is None else _validate.positive_int("sliding_window", sliding_window)
    cap = 0.0 if softcap is None else _validate.positive_float("softcap", softcap)
    if max_query_len is not None:
        _validate.positive_int("max_query_len", max_query_len)
    if num_kv_splits is not None:
        _validate.positive_int("num_kv_splits", num_kv_splits)
        if num_kv_splits > launch_config.MAX_SPLITS:
            raise ValueError(f"num_kv_splits must be <= {launch_config.MAX_SPLITS}, got {num_kv_splits}")
    if out is None:
        out = torch.empty_like(q)
    else:
        _validate.tensor("out", out, ndim=3, dtypes=(q.dtype,), device=device)
        if out.shape != q.shape:
            raise ValueError(f"out has shape {tuple(out.shape)}, expected q's {tuple(q.shape)}")
    if num_tokens == 0 or num_seqs == 0:
        return out
    if impl_select.try_aiter_attention(
            q, k_cache, v_cache, block_table, seq_lens, query_start_loc, out, causal=causal,
            scale=scale, window=window, softcap=cap, max_query_len=max_query_len,
            num_kv_splits=num_kv_splits):
        return out

    cfg = launch_config.choose(
        num_tokens=num_tokens, num_seqs=num_seqs, num_kv_heads=num_kv_heads, group=group,
        head_dim=head_dim, kv_capacity=block_table.shape[1] * block_size,
        max_query_len=max_query_len, num_splits=num_kv_splits, device_index=device.index,
        page_size=block_size)
    if cfg.num_splits > 1:
        p_out, p_lse = workspace.partials(device, cfg.num_splits, num_tokens, num_q_heads, head_dim,
                                          workspace_buffer)
    else:
        p_out = p_lse = out  # not read when there is one split
    kernels, _ = _runtime.kernels()
    grid = (num_tokens // cfg.block_q + num_seqs, num_kv_heads, cfg.num_splits)
    kernels.paged_attention_kernel[grid](
        q, k_cache, v_cache, out,
        block_table, seq_lens, query_start_loc,
        p_out, p_lse,
        scale, cap, window, num_seqs,
        *q.stride(), *k_cache.stride(), *v_cache.stride(), *out.stride(),
        *block_table.stride(),
        *_partial_strides(p_out, p_lse, cfg.num_splits),
        HEAD_DIM=head_dim, HEAD_DIM_PAD=cfg.head_dim_pad,
        GQA=group, BLOCK_Q=cfg.block_q, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n,
        PAGE_SIZE=block_size, CAUSAL=causal, USE_WINDOW=window > 0, USE_SOFTCAP=cap > 0.0,
        NUM_SPLITS=cfg.num_splits, DOT_PRECISION="ieee" if q.dtype == torch.float32 else None,
        PAGE_IDS_ASM=cfg.page_ids_asm, OVERLAP_QK=cfg.overlap_qk, OFFSETS_32=cfg.offsets_32 and _fits_int32(k_cache) and _fits_int32(v_cache),
        num_warps=cfg.num_warps, num_stages=cfg.num_stages,
    )
    if cfg.num_splits > 1:
        kernels.merge_splits_kernel[(num_tokens, num_q_heads)](
            out, p_out, p_lse, query_start_loc, num_seqs,
            *out.stride(), *_partial_strides(p_out, p_lse, cfg.num_splits),
            HEAD_DIM=head_dim, HEAD_DIM_PAD=cfg.head_dim_pad,
            NUM_SPLITS=cfg.num_splits, SPLITS_PAD=max(2, _runtime.next_power_of_2(cfg.num_splits)),
            num_warps=cfg.merge_warps,
        )
    return out


def _fits_int32(cache: torch.Tensor) -> bool:
    """Every element's offset from the base fits in int32 (the kernel's 32-bit address math)."""
    return sum((n - 1) * abs(st) for n, st in zip(cache.shape, cache.stride())) < 2**31


def _partial_strides(p_out: torch.Tensor, p_lse: torch.Tensor, num_splits: int):
    if num_splits == 1:
        return (0, 0, 0, 0, 0)
    return (p_out.stride(0), p_out.stride(1), p_out.stride(2), p_lse.stride(0), p_lse.stride(1))


def reserve_workspace(device, max_num_tokens: int, num_q_heads: int, head_dim: int,
                      max_splits: int = launch_config.MAX_SPLITS) -> None:
    """Allocate split-KV scratch for launches up to this size now (before graph capture)."""
    workspace.reserve(device, max_num_tokens, num_q_heads, head_dim, max_splits)
