"""The largest split-KV scratch any launch in a range of uniform batches needs.

ops picks the split count from shapes only, so the worst case over every batch a host may
capture into a CUDA/HIP graph is known at start-up; reserving it then (``reserve_workspace``)
keeps captured launches from ever allocating.
"""

from __future__ import annotations

from dflash_rocm_plugin.ops import launch_config, workspace


def worst_split_launch(*, max_requests: int, rows_per_request, num_q_heads: int, num_kv_heads: int,
                       head_dim: int, kv_capacity: int, device_index=None,
                       max_tokens: int | None = None) -> tuple[int, int]:
    """``(num_splits, num_tokens)`` of the launch needing the most scratch over batches of
    1..max_requests requests with each of ``rows_per_request`` query rows (at most
    ``max_tokens`` rows in all); ``(0, 0)`` when no such launch splits."""
    group = num_q_heads // num_kv_heads
    worst, need = (0, 0), 0
    for rows in rows_per_request:
        top = max_requests if max_tokens is None else min(max_requests, max_tokens // rows)
        for reqs in range(1, top + 1):
            cfg = launch_config.choose(
                num_tokens=reqs * rows, num_seqs=reqs, num_kv_heads=num_kv_heads, group=group,
                head_dim=head_dim, kv_capacity=kv_capacity, max_query_len=rows, num_splits=None,
                device_index=device_index)
            size = workspace.elements(cfg.num_splits, reqs * rows, num_q_heads, head_dim)
            if cfg.num_splits > 1 and size > need:
                worst, need = (cfg.num_splits, reqs * rows), size
    return worst
