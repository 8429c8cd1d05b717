"""How much split-KV scratch the decode / verify launches of a batch-size range need.

ops picks the split count from shapes only, so the worst case over every batch size
a graph may be captured for is known up front; reserving it before capture keeps
graph launches from ever allocating.
"""

from __future__ import annotations

from dflash_rocm_plugin.ops import launch_config, workspace


def worst_split_launch(*, max_bs: int, rows_per_request: tuple[int, ...], num_q_heads: int,
                       num_kv_heads: int, head_dim: int, kv_capacity: int, device_index) -> tuple[int, int]:
    """(num_splits, num_tokens) of the launch needing the most split-KV scratch over
    bs in 1..max_bs and the given rows per request; (0, 0) when none splits."""
    group = num_q_heads // num_kv_heads
    worst, need = (0, 0), 0
    for rows in rows_per_request:
        for bs in range(1, max_bs + 1):
            cfg = launch_config.choose(
                num_tokens=bs * rows, num_seqs=bs, num_kv_heads=num_kv_heads, group=group,
                head_dim=head_dim, kv_capacity=kv_capacity, max_query_len=rows, num_splits=None,
                device_index=device_index)
            size = workspace.elements(cfg.num_splits, bs * rows, num_q_heads, head_dim)
            if cfg.num_splits > 1 and size > need:
                worst, need = (cfg.num_splits, bs * rows), size
    return worst


def workspace_floats(num_splits: int, num_tokens: int, num_q_heads: int, head_dim: int) -> int:
    return workspace.elements(num_splits, num_tokens, num_q_heads, head_dim) if num_splits else 0
