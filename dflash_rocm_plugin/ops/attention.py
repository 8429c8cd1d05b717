"""``paged_attention``: a short query block per sequence over a paged KV cache."""

from __future__ import annotations

import torch

from dflash_rocm_plugin.ops import _runtime, _validate, backends, call_cache, launch_config, plan, support
from dflash_rocm_plugin.ops.call import AttentionCall


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
    sinks: torch.Tensor | None = None,
    k_scale: torch.Tensor | None = None,
    v_scale: torch.Tensor | None = None,
    out: torch.Tensor | None = None,
    max_query_len: int | None = None,
    workspace: torch.Tensor | None = None,
    backend: str | None = None,
    num_kv_splits: int | None = None,
    new_keys: torch.Tensor | None = None,
    new_values: torch.Tensor | None = None,
) -> torch.Tensor:
    """Attention of each sequence's newest query tokens over its paged K/V.

    Args:
        q: ``[num_tokens, num_q_heads, head_dim]``.
        k_cache, v_cache: ``[num_blocks, block_size, num_kv_heads, head_dim]``, any strides
            (views of a host's cache are read in place); q's dtype, or fp8 ``float8_e4m3fn`` /
            ``float8_e4m3fnuz`` (a host keeping the cache as uint8 passes a ``.view()`` of its
            fp8 dtype), where a cached value means ``cache.float() * scale``.
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
        sinks: ``[num_q_heads]`` logits (float32, or q's dtype), in the units of the scaled (and
            softcapped) scores: row ``r`` of head ``h`` is ``sum_j e^{s_j} v_j / (sum_j e^{s_j} +
            e^{sinks[h]})``; the sink adds to the denominator once and contributes no value.
        k_scale, v_scale: None (1.0) or float32 tensors of 1 element (per tensor) or
            ``num_kv_heads`` elements (per KV head), for fp8 caches; read on the device.
        out: written in place when given (any strides); otherwise allocated.
        max_query_len: optional host-known upper bound on query rows per sequence; lets
            decode batches use smaller tiles.  Never read from the device.
        workspace: caller-owned float32 scratch for split-KV, at least
            :func:`workspace_floats` elements for the largest batch the caller will run (size it
            once, before CUDA/HIP graph capture).  Without it a per-device buffer is grown on
            demand, which is refused inside a graph capture.
        backend: ``"auto"``, ``"triton"`` or ``"aiter"`` (see ``ops.backends``); None takes the
            default from ``DFLASH_ROCM_ATTENTION_IMPL``, read once per process.
        num_kv_splits: force the split-KV count (tuning; ``None`` chooses from the shapes).
        new_keys, new_values: optional ``[>= num_tokens, num_kv_heads, head_dim]`` in q's dtype: the
            K/V rows of this call's query tokens, row ``t`` for ``q[t]``, exactly as the cache holds
            them (the rows the host wrote this step; over an fp8 cache the rows ``write_kv_cache``
            was given, which the call rounds as it stored them, into two buffers of that size it
            allocates).  Given both, the whole prompts of a causal call
            (sequences with nothing cached before this step's tokens) read their keys from them
            instead of gathering them from the pages, which is faster; the result is the same
            (``support.extend_problem`` says which calls qualify, ``extend_launch.choose_extend``
            from which prompt length).  So do the chunks of such a call whose prefix holds at most
            GQA times their own tokens in keys they see (under a sliding window its last
            ``window - 1``): the call first copies those out of the pages into two buffers of GQA
            rows per query token it allocates (the memory of q and out together).

    Returns:
        ``out``: ``[num_tokens, num_q_heads, head_dim]`` in ``q.dtype``.
    """
    # A call of a key seen before passed every check below and reuses its launch (ops/call_cache.py).
    key = call_cache.key(q, k_cache, v_cache, block_table, seq_lens, query_start_loc, sinks, k_scale, v_scale, out,
                         workspace, causal, scale, sliding_window, softcap, max_query_len, num_kv_splits, backend,
                         new_keys, new_values)
    prepared = call_cache.get(key)
    if prepared is not None:
        _runtime.require_launchable(q.device)  # reads TRITON_INTERPRET for CPU tensors
        if out is None:
            out = torch.empty_like(q)
        backends.run_prepared(prepared, backend, q, k_cache, v_cache, block_table, seq_lens, query_start_loc,
                              out, workspace, sinks, k_scale, v_scale, new_keys, new_values)
        return out
    _validate.tensor("q", q, ndim=3, dtypes=_validate.ATTENTION_DTYPES)
    device = q.device
    _runtime.require_launchable(device)
    num_tokens, num_q_heads, head_dim = q.shape
    _validate.head_dim("q.shape[2] (head_dim)", head_dim)
    for name, cache in (("k_cache", k_cache), ("v_cache", v_cache)):
        _validate.tensor(name, cache, ndim=4, device=device)
        problem = support.kv_cache_dtype_problem(cache.dtype, q.dtype)
        if problem:
            raise ValueError(f"{name} has dtype {cache.dtype} and q has {q.dtype}: {problem}")
    if k_cache.shape != v_cache.shape:
        raise ValueError(f"k_cache {tuple(k_cache.shape)} and v_cache {tuple(v_cache.shape)} differ in shape")
    if k_cache.dtype != v_cache.dtype:
        raise ValueError(f"k_cache holds {k_cache.dtype} but v_cache {v_cache.dtype}; both must hold one dtype")
    problem = support.fp8_qk_problem(k_cache.dtype)
    if problem:
        raise ValueError(problem)
    _, block_size, num_kv_heads, cache_head_dim = k_cache.shape
    if cache_head_dim != head_dim:
        raise ValueError(f"k_cache head_dim {cache_head_dim} differs from q head_dim {head_dim}")
    if block_size < 1:
        raise ValueError("k_cache.shape[1] (block_size) must be >= 1")
    _validate.heads("k_cache.shape[2] (num_kv_heads)", num_q_heads, num_kv_heads)
    _validate.kv_scales(k_scale, v_scale, k_cache.dtype, num_kv_heads, device)
    if sinks is not None:
        _validate.tensor("sinks", sinks, dtypes=support.SINK_DTYPES, device=device)
        if sinks.numel() != num_q_heads:
            raise ValueError(f"sinks has {sinks.numel()} elements; expected one per query head ({num_q_heads})")

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
    if workspace is not None:
        _validate.tensor("workspace", workspace, ndim=1, dtypes=(torch.float32,), device=device)
        if not workspace.is_contiguous():
            raise ValueError("workspace must be a contiguous float32 tensor")
    chosen = backends.policy(backend, backends.ATTENTION_ENV, backends.ATTENTION_CHOICES)  # a bad name fails now
    extend = None
    if new_keys is not None or new_values is not None:
        if new_keys is None or new_values is None:
            raise ValueError("new_keys and new_values go together: pass both or neither")
        for name, t in (("new_keys", new_keys), ("new_values", new_values)):
            _validate.tensor(name, t, ndim=3, dtypes=(q.dtype,), device=device)
            if t.shape[0] < num_tokens or tuple(t.shape[1:]) != (num_kv_heads, head_dim):
                raise ValueError(f"{name} has shape {tuple(t.shape)}; expected [>= num_tokens = {num_tokens}, "
                                 f"num_kv_heads = {num_kv_heads}, head_dim = {head_dim}]")
        if support.extend_layout_problem(q, out, new_keys, new_values, k_cache, v_cache) is None:
            extend = plan.dense_kv_launch(
                causal=causal, window=window, softcap=cap, dtype=q.dtype, kv_cache_dtype=k_cache.dtype,
                heads=(num_q_heads, num_kv_heads, head_dim), num_tokens=num_tokens, num_seqs=num_seqs,
                max_query_len=max_query_len, kv_capacity=block_table.shape[1] * block_size, page_size=block_size,
                num_kv_splits=num_kv_splits, backend=chosen, device_index=device.index)
    if num_tokens == 0 or num_seqs == 0:
        return out
    call = AttentionCall(q, k_cache, v_cache, block_table, seq_lens, query_start_loc, out, causal=causal,
                         scale=scale, window=window, softcap=cap, max_query_len=max_query_len,
                         num_kv_splits=num_kv_splits, workspace=workspace, sinks=sinks,
                         k_scale=k_scale, v_scale=v_scale, extend_min_q=extend.block_m if extend else 0,
                         extend_chunks=bool(extend and extend.chunks))
    if key is None and extend is None:
        backends.run_attention(call, backend)
        return out
    prepared = backends.Prepared(call, dense=extend, new_keys=new_keys, new_values=new_values)
    backends.run_prepared(prepared, backend, q, k_cache, v_cache, block_table, seq_lens, query_start_loc,
                          out, workspace, sinks, k_scale, v_scale, new_keys, new_values)
    call_cache.put(key, prepared)  # after a launch that did not raise
    return out
