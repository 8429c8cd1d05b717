"""Builders for differential tests: one batch = paged KV cache + new tokens + CommonAttentionMetadata.

The cache is vLLM's logical per-layer ``[blocks, kv_heads, block_size, K|V]`` tensor laid out
physically as one of vLLM's ``KVCacheLayout``s, so backends must read it through strides.
"""

from __future__ import annotations

import dataclasses

import torch


@dataclasses.dataclass
class Batch:
    kv_cache: torch.Tensor  # logical [blocks, Hkv, block_size, 2*D]
    query: torch.Tensor  # [T + pad, Hq, D]
    key: torch.Tensor  # [T + pad, Hkv, D]
    value: torch.Tensor
    slot_mapping: torch.Tensor  # int64 [T + pad], -1 on padding rows
    block_table: torch.Tensor  # int32 [reqs, width]
    seq_lens: torch.Tensor  # int32
    query_start_loc: torch.Tensor  # int32 [reqs + 1]
    num_tokens: int  # real rows (T)
    causal: bool

    def common_metadata(self):
        from vllm.v1.attention.backend import CommonAttentionMetadata
        q_lens = (self.query_start_loc[1:] - self.query_start_loc[:-1]).tolist()
        return CommonAttentionMetadata(
            query_start_loc=self.query_start_loc, query_start_loc_cpu=self.query_start_loc.clone(),
            seq_lens=self.seq_lens, num_reqs=len(q_lens), num_actual_tokens=self.query.shape[0],
            max_query_len=max(q_lens), max_seq_len=int(self.seq_lens.max()),
            block_table_tensor=self.block_table, slot_mapping=self.slot_mapping, causal=self.causal)


def allocate_kv_cache(num_blocks, num_kv_heads, block_size, head_dim, layout, dtype, gen):
    """A logical [B, H, N, 2D] view over storage ordered as ``layout`` (a KVCacheLayout)."""
    logical = (num_blocks, num_kv_heads, block_size, 2 * head_dim)
    order = layout.layer_view_order  # physical order of the logical axes
    storage = torch.randn([logical[i] for i in order], generator=gen).to(dtype)
    inverse = sorted(range(4), key=lambda i: order[i])
    return storage.permute(*inverse)


def build(seq_lens, q_lens, *, causal, layout, num_q_heads=4, num_kv_heads=2, head_dim=32,
          block_size=16, dtype=torch.float32, padding_rows=0, seed=0) -> Batch:
    """Sequence i holds ``seq_lens[i]`` tokens; its last ``q_lens[i]`` are this step's queries,
    whose K/V are still to be written; the earlier ones are already in the (random) cache."""
    gen = torch.Generator().manual_seed(seed)
    pages = [-(-s // block_size) for s in seq_lens]
    num_blocks = sum(pages) + 2  # spare blocks hold garbage that must never be read
    kv_cache = allocate_kv_cache(num_blocks, num_kv_heads, block_size, head_dim, layout, dtype, gen)
    perm = torch.randperm(num_blocks, generator=gen)
    table = torch.zeros(len(seq_lens), max(pages) + 1, dtype=torch.int32)
    used = 0
    for row, n in enumerate(pages):
        table[row, :n] = perm[used:used + n].to(torch.int32)
        used += n
    slots = []
    for row, (s, q) in enumerate(zip(seq_lens, q_lens)):
        for pos in range(s - q, s):
            slots.append(int(table[row, pos // block_size]) * block_size + pos % block_size)
    num_tokens = len(slots)
    slots += [-1] * padding_rows
    rows = num_tokens + padding_rows
    qsl = torch.zeros(len(q_lens) + 1, dtype=torch.int32)
    qsl[1:] = torch.tensor(q_lens).cumsum(0)
    return Batch(
        kv_cache=kv_cache,
        query=torch.randn(rows, num_q_heads, head_dim, generator=gen).to(dtype),
        key=torch.randn(rows, num_kv_heads, head_dim, generator=gen).to(dtype),
        value=torch.randn(rows, num_kv_heads, head_dim, generator=gen).to(dtype),
        slot_mapping=torch.tensor(slots, dtype=torch.int64),
        block_table=table, seq_lens=torch.tensor(seq_lens, dtype=torch.int32), query_start_loc=qsl,
        num_tokens=num_tokens, causal=causal)


def split_kv(kv_cache, head_dim):
    """[B, H, N, 2D] -> K, V as [B, N, H, D] strided views (the ops/reference convention)."""
    return kv_cache.transpose(1, 2).split(head_dim, dim=-1)
