"""Batches whose block tables come from vLLM's own KV-cache managers, as the hybrid KV-cache
manager and sliding-window layers produce them.

``sliding_window_batch``: each request's blocks are allocated by vLLM's ``BlockPool`` through a
``SlidingWindowManager`` (round robin across requests, so blocks interleave), then
``remove_skipped_blocks`` frees the blocks wholly outside this step's window and puts the null
block (block 0) in their table slots, as the scheduler does before each step.  Every block no
request owns after that (block 0, the freed ones, the spare ones) is NaN, and the K/V every
request attends to is kept separately (``logical_k/v``) for a dense float64 oracle.
"""

from __future__ import annotations

import dataclasses

import torch

from dflash_rocm_plugin import reference
from tests.vllm import kv_batches


@dataclasses.dataclass
class SlidingBatch(kv_batches.Batch):
    logical_k: list = dataclasses.field(default_factory=list)  # per request [seq_len, Hkv, D]
    logical_v: list = dataclasses.field(default_factory=list)
    nulled: list = dataclasses.field(default_factory=list)      # per request: table slots set to block 0


def sliding_window_batch(seq_lens, q_lens, *, causal, window, block_size, layout, num_q_heads=4, num_kv_heads=2,
                         head_dim=32, dtype=torch.float32, padding_rows=0, seed=0) -> SlidingBatch:
    from vllm.v1.core.block_pool import BlockPool
    from vllm.v1.core.single_type_kv_cache_manager import SlidingWindowManager
    from vllm.v1.kv_cache_interface import SlidingWindowSpec

    gen = torch.Generator().manual_seed(seed)
    pages = [-(-s // block_size) for s in seq_lens]
    num_blocks = sum(pages) + 3
    pool = BlockPool(num_gpu_blocks=num_blocks, enable_caching=False, hash_block_size=block_size)
    spec = SlidingWindowSpec(block_size=block_size, num_kv_heads=num_kv_heads, head_size=head_dim, dtype=dtype,
                             sliding_window=window)
    manager = SlidingWindowManager(spec, block_pool=pool, enable_caching=False, kv_cache_group_id=0,
                                   scheduler_block_size=block_size)
    ids = [f"req{i}" for i in range(len(seq_lens))]
    grown = [0] * len(seq_lens)
    while any(g < s for g, s in zip(grown, seq_lens)):
        for i, (rid, s) in enumerate(zip(ids, seq_lens)):
            if grown[i] < s:
                grown[i] = min(s, grown[i] + block_size)
                manager.allocate_new_blocks(rid, grown[i], grown[i])
    # The scheduler frees what this step's queries cannot see: tokens before the window of
    # the first query, at position seq_len - q_len (the tokens computed so far).
    for rid, s, q in zip(ids, seq_lens, q_lens):
        manager.remove_skipped_blocks(rid, s - q)
    tables = [[b.block_id for b in manager.req_to_blocks[rid]] for rid in ids]
    null = pool.null_block.block_id

    kv_cache = kv_batches.allocate_kv_cache(num_blocks, num_kv_heads, block_size, head_dim, layout, dtype, gen)
    kv_cache.fill_(float("nan"))
    table = torch.zeros(len(seq_lens), max(pages) + 1, dtype=torch.int32)
    logical_k, logical_v, slots, nulled = [], [], [], []
    for row, (t, s, q) in enumerate(zip(tables, seq_lens, q_lens)):
        table[row, : len(t)] = torch.tensor(t, dtype=torch.int32)
        k = torch.randn(s, num_kv_heads, head_dim, generator=gen).to(dtype)
        v = torch.randn(s, num_kv_heads, head_dim, generator=gen).to(dtype)
        logical_k.append(k)
        logical_v.append(v)
        nulled.append(sum(b == null for b in t))
        for pos in range(s - q):  # the cache holds the earlier tokens of blocks still owned
            blk = t[pos // block_size]
            if blk != null:
                kv_cache[blk, :, pos % block_size, :head_dim] = k[pos]
                kv_cache[blk, :, pos % block_size, head_dim:] = v[pos]
        for pos in range(s - q, s):
            slots.append(t[pos // block_size] * block_size + pos % block_size)
    num_tokens = len(slots)
    rows = num_tokens + padding_rows
    new_k = torch.cat([k[s - q:] for k, s, q in zip(logical_k, seq_lens, q_lens)])
    new_v = torch.cat([v[s - q:] for v, s, q in zip(logical_v, seq_lens, q_lens)])
    pad = lambda x: torch.cat([x, torch.randn(padding_rows, *x.shape[1:], generator=gen).to(dtype)])  # noqa: E731
    qsl = torch.zeros(len(q_lens) + 1, dtype=torch.int32)
    qsl[1:] = torch.tensor(q_lens).cumsum(0)
    return SlidingBatch(
        kv_cache=kv_cache, query=torch.randn(rows, num_q_heads, head_dim, generator=gen).to(dtype),
        key=pad(new_k), value=pad(new_v), slot_mapping=torch.tensor(slots + [-1] * padding_rows, dtype=torch.int64),
        block_table=table, seq_lens=torch.tensor(seq_lens, dtype=torch.int32), query_start_loc=qsl,
        num_tokens=num_tokens, causal=causal, logical_k=logical_k, logical_v=logical_v, nulled=nulled)


def dense_reference(batch: SlidingBatch, *, window, scale, causal=None):
    """float64 attention over the requests' logical K/V, one dense page per request."""
    width = int(batch.seq_lens.max())
    reqs = len(batch.logical_k)
    kc = torch.zeros(reqs, width, *batch.logical_k[0].shape[1:], dtype=torch.float64)
    vc = torch.zeros_like(kc)
    for r, (k, v) in enumerate(zip(batch.logical_k, batch.logical_v)):
        kc[r, : k.shape[0]], vc[r, : v.shape[0]] = k.double(), v.double()
    n = batch.num_tokens
    return reference.paged_attention(
        batch.query[:n].double(), kc, vc, torch.arange(reqs, dtype=torch.int32)[:, None], batch.seq_lens,
        batch.query_start_loc, causal=batch.causal if causal is None else causal, scale=scale,
        sliding_window=window)


def padded_block_kv_cache(num_blocks, num_kv_heads, block_size, head_dim, dtype, gen, pad_elems):
    """A block-outer logical [B, H, N, 2D] cache whose block stride exceeds its dense page by
    ``pad_elems`` (vLLM pads attention pages up to a larger sibling page); padding is NaN."""
    page = num_kv_heads * block_size * 2 * head_dim
    storage = torch.full((num_blocks, page + pad_elems), float("nan"), dtype=dtype)
    storage[:, :page] = torch.randn(num_blocks, page, generator=gen).to(dtype)
    return storage.as_strided((num_blocks, num_kv_heads, block_size, 2 * head_dim),
                              (page + pad_elems, block_size * 2 * head_dim, 2 * head_dim, 1))
