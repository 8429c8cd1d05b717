"""Per-batch metadata for rocm_dflash and the builder vLLM calls to make it.

The builder only re-labels ``CommonAttentionMetadata`` fields: no device work, no host
syncs, no allocation.  That is what makes the path safe to capture in CUDA/HIP graphs and
``build_for_drafting`` cheap.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch
from vllm.v1.attention.backend import (
    AttentionCGSupport,
    AttentionMetadata,
    AttentionMetadataBuilder,
    CommonAttentionMetadata,
)

from dflash_rocm_plugin import ops


def max_kv_len(vllm_config, kv_cache_spec) -> int:
    """A bound on the keys one block-table row of this layer addresses (width x block size), which the
    split-KV scratch is sized for.  vLLM's model runner rounds each table's width up to a whole multiple
    of 128 tokens' worth of blocks (lcm(128, block size) tokens: 4224 for the hybrid manager's
    1056-token blocks), so a table can be wider than a short max_model_len."""
    return 2 * vllm_config.model_config.max_model_len + math.lcm(128, kv_cache_spec.block_size)


@dataclass
class RocmDFlashMetadata(AttentionMetadata):
    num_actual_tokens: int  # may include padding rows past query_start_loc[-1]
    max_query_len: int  # host-known bound, lets decode batches use small tiles
    max_seq_len: int
    query_start_loc: torch.Tensor  # int32 [num_reqs + 1]
    seq_lens: torch.Tensor  # int32 [num_reqs], KV length including this step's tokens
    block_table: torch.Tensor  # int32 [num_reqs, max_blocks]
    slot_mapping: torch.Tensor
    causal: bool  # False for the DFlash draft block
    workspace: torch.Tensor | None  # the builder's split-KV scratch, sized for every batch


class RocmDFlashMetadataBuilder(AttentionMetadataBuilder[RocmDFlashMetadata]):
    # Full graphs for uniform batches (decode, and 1+k spec-decode / DFlash blocks): the
    # forward allocates nothing (out= and the split-KV scratch owned here) and never reads the
    # device from the host.  Not ALWAYS: max_query_len is baked into a captured launch, and
    # mixed prefill batches replayed through one graph could exceed it.
    _cudagraph_support: ClassVar[AttentionCGSupport] = AttentionCGSupport.UNIFORM_BATCH
    # The metadata references the runner's persistent buffers, so a draft decode graph
    # needs no refresh (update_draft_decode_metadata is a no-op).
    supports_draft_decode_metadata_update = True

    def __init__(self, kv_cache_spec, layer_names, vllm_config, device):
        super().__init__(kv_cache_spec, layer_names, vllm_config, device)
        # One scratch for every batch this builder's layers will run (any mix of query lengths, up
        # to max_num_seqs requests), allocated before vLLM captures graphs.
        floats = ops.workspace_floats(
            num_q_heads=vllm_config.model_config.get_num_attention_heads(vllm_config.parallel_config),
            num_kv_heads=kv_cache_spec.num_kv_heads, head_dim=kv_cache_spec.head_size,
            max_num_seqs=vllm_config.scheduler_config.max_num_seqs,
            max_kv_len=max_kv_len(vllm_config, kv_cache_spec), device=device)
        self.workspace = torch.empty(floats, dtype=torch.float32, device=device) if floats else None

    def build(self, common_prefix_len: int, common_attn_metadata: CommonAttentionMetadata,
              fast_build: bool = False) -> RocmDFlashMetadata:
        cam = common_attn_metadata
        if not isinstance(cam.causal, bool):
            raise ops.Unsupported(f"rocm_dflash: {ops.features_problem({'per_request_causal'})} "
                                  "(a causal tensor in CommonAttentionMetadata)")
        return RocmDFlashMetadata(
            num_actual_tokens=int(cam.num_actual_tokens),  # host ints (numpy scalars at times)
            max_query_len=int(cam.max_query_len),
            max_seq_len=int(cam.max_seq_len),
            query_start_loc=cam.query_start_loc,
            seq_lens=cam.seq_lens,
            block_table=cam.block_table_tensor,
            slot_mapping=cam.slot_mapping,
            causal=cam.causal,
            workspace=self.workspace,
        )

    def build_for_drafting(self, common_attn_metadata: CommonAttentionMetadata,
                           draft_index: int) -> RocmDFlashMetadata:
        return self.build(0, common_attn_metadata, fast_build=True)

    def update_draft_decode_metadata(self, metadata: RocmDFlashMetadata) -> None:
        pass

