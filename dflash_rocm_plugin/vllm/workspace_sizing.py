"""Reserve the split-KV scratch that every CUDA/HIP-graph-captured launch will need.

ops picks tiles and split counts from shapes only, so the worst launch over the batches
vLLM captures (uniform batches of 1 or 1 + k query rows per request, up to the largest
capture size) is known at start-up.  Reserving it then keeps captured launches from
allocating; eager batches outside that range may still grow the scratch (not in a capture).
"""

from __future__ import annotations

import logging

from dflash_rocm_plugin import ops
from dflash_rocm_plugin.ops import workspace_plan

logger = logging.getLogger("dflash_rocm_plugin.vllm")


def uniform_query_rows(vllm_config) -> tuple[int, ...]:
    """Query rows per request of the batches vLLM replays through full graphs."""
    spec = vllm_config.speculative_config
    k = (spec.num_speculative_tokens or 0) if spec is not None else 0
    rows = 1 + k
    if spec is not None and spec.parallel_drafting and not getattr(vllm_config, "use_v2_model_runner", True):
        rows += k  # model runner V1's parallel drafter appends k mask slots per request
    return tuple(sorted({1, rows}))


def max_captured_tokens(vllm_config) -> int:
    budget = vllm_config.scheduler_config.max_num_batched_tokens
    captured = getattr(vllm_config.compilation_config, "max_cudagraph_capture_size", None)
    return max(1, min(budget, captured) if captured else budget)


def reserve(vllm_config, device, num_q_heads: int, num_kv_heads: int, head_dim: int) -> None:
    splits, tokens = workspace_plan.worst_split_launch(
        max_requests=vllm_config.scheduler_config.max_num_seqs,
        rows_per_request=uniform_query_rows(vllm_config),
        num_q_heads=num_q_heads, num_kv_heads=num_kv_heads, head_dim=head_dim,
        # Upper bound on block_table width x block size: more keys never means fewer splits.
        kv_capacity=2 * vllm_config.model_config.max_model_len,
        device_index=getattr(device, "index", None),
        max_tokens=max_captured_tokens(vllm_config))
    if splits:
        ops.reserve_workspace(device, tokens, num_q_heads, head_dim, max_splits=splits)
        logger.debug("dflash_rocm_plugin: reserved split-KV scratch for %d tokens x %d splits",
                     tokens, splits)
