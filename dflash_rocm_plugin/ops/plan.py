"""What a call would run, and how much split-KV scratch a caller must own, from shapes alone.

Benchmarks, sweeps, the demo and doctor ask here instead of re-deriving the launch choice; hosts
size their one workspace here.  Nothing reads device memory, so these answers are what graph
capture and replay will run.
"""

from __future__ import annotations

import dataclasses

import torch

from dflash_rocm_plugin.ops import _runtime, backends, extend_launch, launch_config, support, tuned, workspace

AttentionLaunch = launch_config.AttentionLaunch
forced_launch = launch_config.forced


@dataclasses.dataclass(frozen=True)
class LaunchDescription:
    backend: str                      # "triton", "aiter", or "error" (the call would raise)
    reason: str                       # why that backend
    launch: AttentionLaunch | None    # Triton's tiles, warps, stages and KV splits
    workspace_floats: int             # split-KV scratch this call needs (0: none)
    # Given the call's own K/V (``new_kv``): the launch of the dense-K/V kernel that serves its whole
    # prompts (the launch above serves the rest); None: every row reads the pages.
    dense_launch: extend_launch.ExtendLaunch | None = None


def dense_kv_launch(*, causal: bool, window: int, softcap: float, dtype, kv_cache_dtype, heads: tuple,
                    num_tokens: int, num_seqs: int, max_query_len: int | None, kv_capacity: int, page_size: int,
                    num_kv_splits: int | None, backend: str,
                    device_index: int | None) -> extend_launch.ExtendLaunch | None:
    """The dense-K/V launch a call that passes its own K/V runs its whole prompts in, or None: a call
    ``support.extend_problem`` names, one pinned to AITER or to a split count, one whose host bound on
    query rows is too short for it, or one a tuned entry for its bucket keeps paged
    (``extend_launch.choose_extend``).  ``heads``: (q heads, kv heads, head_dim)."""
    head_dim = heads[2]
    if backend == "aiter" or num_kv_splits is not None or support.extend_problem(
            causal=causal, softcap=softcap, dtype=dtype,
            kv_cache_dtype=dtype if kv_cache_dtype is None else kv_cache_dtype, head_dim=head_dim):
        return None
    entry = None if window else tuned.lookup(
        _runtime.gpu_arch(device_index), heads=heads, dtype=dtype, kv_cache_dtype=kv_cache_dtype,
        causal=causal, num_tokens=num_tokens, num_seqs=num_seqs, max_query_len=max_query_len, kv_keys=kv_capacity,
        page_size=page_size)
    return extend_launch.choose_extend(head_dim=head_dim, max_query_len=max_query_len, device_index=device_index,
                                       window=window, num_tokens=num_tokens, kv_cache_dtype=kv_cache_dtype,
                                       tuned=None if entry is None else entry.dense)


def fp8_dots_choices(*, kv_cache_dtype, dtype, causal: bool, device=None, arch: str | None = None) -> tuple[str, ...]:
    """The ``fp8_dots`` values a call of these dtypes may run on the device's GPU
    (``launch_config.fp8_dots_allowed``; only "none" under the interpreter), or, given ``arch``, on a GPU
    of that architecture (what a tuning plan counts away from it).  A tuned entry chooses among them."""
    if arch is None:
        if _runtime.interpreting():
            return ("none",)
        arch = _runtime.gpu_arch(None if device is None else torch.device(device).index)
    native = support.multiplies_fp8(kv_cache_dtype, arch)
    return launch_config.fp8_dots_allowed(native_fp8=native, dtype=dtype, causal=causal,
                                          pv_split=support.splits_p_for_fp8_dots(arch))


def describe_launch(*, num_tokens: int, num_seqs: int, num_q_heads: int, num_kv_heads: int, head_dim: int,
                    page_size: int, kv_capacity: int, causal: bool = False, dtype=torch.bfloat16,
                    max_query_len: int | None = None, num_kv_splits: int | None = None,
                    sliding_window: int | None = None, softcap: float | None = None, sinks: bool = False,
                    kv_cache_dtype=None, device=None, backend: str | None = None,
                    new_kv: bool = False) -> LaunchDescription:
    """The backend and launch ``paged_attention`` would use for a call of these shapes (host-standard
    cache layouts on the GPU).  ``kv_capacity`` = block-table width x page size.  ``new_kv``: the call
    passes its own K/V (``new_keys`` / ``new_values``) in the hosts' layout."""
    index = None if device is None else torch.device(device).index
    choice = backends.tuned_backend(
        device_index=index, heads=(num_q_heads, num_kv_heads, head_dim), dtype=dtype,
        kv_cache_dtype=kv_cache_dtype, causal=causal, num_tokens=num_tokens, num_seqs=num_seqs,
        max_query_len=max_query_len, kv_keys=kv_capacity, page_size=page_size)
    name, reason = backends.attention_backend_for(
        causal=causal, window=sliding_window or 0, softcap=softcap or 0.0, dtype=dtype, head_dim=head_dim,
        num_kv_splits=num_kv_splits, backend=backend, sinks=sinks, kv_cache_dtype=kv_cache_dtype,
        tuned_choice=choice)
    if name != "triton":
        return LaunchDescription(name, reason, None, 0)
    cfg = launch_config.choose(
        num_tokens=num_tokens, num_seqs=num_seqs, num_kv_heads=num_kv_heads, group=num_q_heads // num_kv_heads,
        head_dim=head_dim, kv_capacity=kv_capacity, max_query_len=max_query_len, num_splits=num_kv_splits,
        device_index=index, page_size=page_size, window=sliding_window, dtype=dtype,
        kv_cache_dtype=kv_cache_dtype, causal=causal)
    floats = workspace.elements(cfg.num_splits, num_tokens, num_q_heads, head_dim) if cfg.num_splits > 1 else 0
    dense = dense_kv_launch(
        causal=causal, window=sliding_window or 0, softcap=softcap or 0.0, dtype=dtype,
        kv_cache_dtype=kv_cache_dtype, heads=(num_q_heads, num_kv_heads, head_dim), num_tokens=num_tokens,
        num_seqs=num_seqs, max_query_len=max_query_len, kv_capacity=kv_capacity, page_size=page_size,
        num_kv_splits=num_kv_splits,
        backend=backends.policy(backend, backends.ATTENTION_ENV, backends.ATTENTION_CHOICES),
        device_index=index) if new_kv else None
    return LaunchDescription(name, reason, cfg, floats, dense)


def workspace_floats(*, num_q_heads: int, num_kv_heads: int, head_dim: int, max_num_seqs: int,
                     max_kv_len: int, device=None) -> int:
    """float32 elements of split-KV scratch that cover every call with up to ``max_num_seqs``
    sequences of up to ``max_kv_len`` keys (block-table width x page size), whatever their query
    lengths, dtypes and page sizes: allocate that once and pass it as ``paged_attention(...,
    workspace=)``.  0: no such call splits.

    A launch splits only when every sequence fits one query tile or has at most
    ``launch_config.SPLIT_QUERY_ROWS`` rows (``launch_config.may_split``), so its rows are at most
    ``num_seqs x max(rows, block_q)``; the bound walks each sequence count and power of two of rows
    per sequence through the same chooser the calls use (the split count is constant within each
    such bucket: ``launch_config.query_tiles``), and then, for every tuned entry in force that
    splits, the calls of its bucket with each power of two of rows per sequence up to its bound.
    """
    index = None if device is None else torch.device(device).index
    group = num_q_heads // num_kv_heads
    shape = dict(num_kv_heads=num_kv_heads, group=group, head_dim=head_dim, num_splits=None, device_index=index)

    def need_of(num_seqs: int, rows: int, kv_len: int, bound: int | None = None,
                **extra) -> tuple[int, launch_config.AttentionLaunch]:
        cfg = launch_config.choose(num_tokens=num_seqs * rows, num_seqs=num_seqs, kv_capacity=kv_len,
                                   max_query_len=rows if bound is None else bound, **shape, **extra)
        floats = workspace.elements(cfg.num_splits, num_seqs * max(rows, cfg.block_q), num_q_heads, head_dim)
        return (floats if cfg.num_splits > 1 else 0), cfg

    need = 0
    for num_seqs in range(1, max_num_seqs + 1):
        rows = 1
        while True:
            floats, cfg = need_of(num_seqs, rows, max_kv_len)
            need = max(need, floats)
            if cfg.block_q < rows and rows >= launch_config.SPLIT_QUERY_ROWS:
                break
            rows *= 2
    arch = _runtime.gpu_arch(index)
    for (*heads, dtype, kv_dtype, causal, q, batch, context, page) in tuned.split_keys(arch):
        if tuple(heads) != (num_q_heads, num_kv_heads, head_dim) or batch // 2 >= max_num_seqs \
                or context // 2 >= max_kv_len:
            continue  # no call of this layout and size reaches the bucket
        # The bucket's q is the host's bound on rows per sequence; a call under it with fewer rows on
        # average may split where one of q rows each would not (launch_config.may_split).
        rows = 1
        while rows <= q:
            need = max(need, need_of(min(batch, max_num_seqs), rows, min(context, max_kv_len), bound=q,
                                     page_size=page, dtype=dtype, kv_cache_dtype=kv_dtype, causal=causal)[0])
            rows *= 2
    return need
