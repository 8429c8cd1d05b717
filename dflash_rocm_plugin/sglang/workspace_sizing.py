"""How much split-KV scratch the decode / verify launches of a batch-size range need.

The sizing itself is host-independent (``ops.workspace_plan``); this module only names the
SGLang batch shapes: every batch size up to the graph's ``max_bs``.
"""

from __future__ import annotations

from dflash_rocm_plugin.ops import workspace, workspace_plan


def worst_split_launch(*, max_bs: int, rows_per_request: tuple[int, ...], num_q_heads: int,
                       num_kv_heads: int, head_dim: int, kv_capacity: int, device_index) -> tuple[int, int]:
    """(num_splits, num_tokens) of the launch needing the most split-KV scratch over
    bs in 1..max_bs and the given rows per request; (0, 0) when none splits."""
    return workspace_plan.worst_split_launch(
        max_requests=max_bs, rows_per_request=rows_per_request, num_q_heads=num_q_heads,
        num_kv_heads=num_kv_heads, head_dim=head_dim, kv_capacity=kv_capacity,
        device_index=device_index)


def workspace_floats(num_splits: int, num_tokens: int, num_q_heads: int, head_dim: int) -> int:
    return workspace.elements(num_splits, num_tokens, num_q_heads, head_dim) if num_splits else 0
