"""Reserve the split-KV scratch that every CUDA/HIP-graph-captured launch will need.

ops picks tiles and split counts from shapes only, so the worst launch over the batches
vLLM captures (uniform batches of 1 or 1 + k query rows per request, up to the largest
capture size) is known at start-up.  Reserving it then keeps captured launches from
allocating; eager batches outside that range may still grow the scratch (not in a capture).
"""

from __future__ import annotations

import logging

from dflash_rocm_plugin import ops
from dflash_rocm_plugin.ops import launch_config, workspace

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
    max_tokens = max_captured_tokens(vllm_config)
    max_reqs = vllm_config.scheduler_config.max_num_seqs
    # Upper bound on block_table width x block size: more keys never means fewer splits.
    kv_capacity = 2 * vllm_config.model_config.max_model_len
    device_index = getattr(device, "index", None)
    worst_splits, worst_tokens, need = 0, 0, 0
    for rows in uniform_query_rows(vllm_config):
        for reqs in range(1, min(max_reqs, max_tokens // rows) + 1):
            cfg = launch_config.choose(
                num_tokens=reqs * rows, num_seqs=reqs, num_kv_heads=num_kv_heads,
                group=num_q_heads // num_kv_heads, head_dim=head_dim, kv_capacity=kv_capacity,
                max_query_len=rows, num_splits=None, device_index=device_index)
            size = workspace.elements(cfg.num_splits, reqs * rows, num_q_heads, head_dim)
            if cfg.num_splits > 1 and size > need:
                worst_splits, worst_tokens, need = cfg.num_splits, reqs * rows, size
    if need:
        ops.reserve_workspace(device, worst_tokens, num_q_heads, head_dim, max_splits=worst_splits)
        logger.debug("dflash_rocm_plugin: reserved split-KV scratch for %d tokens x %d splits",
                     worst_tokens, worst_splits)
