"""Paged K/V caches and the attention callback that runs ``dflash_rocm_plugin.ops`` over them.

Pages come from a shuffled free list, so a sequence's pages are scattered and never contiguous
(the block table is really exercised).  Fresh caches are filled with NaN: a kernel that reads a
slot nothing was written to poisons the output instead of passing silently.  A sliding-window
cache evicts the pages that lie wholly before every future window, as the hosts' window
managers do, and poisons them with NaN too.
"""

from __future__ import annotations

import random

import torch

from dflash_rocm_plugin import ops


class PageAllocator:
    def __init__(self, num_pages: int, seed: int = 0):
        self._free = list(range(num_pages))
        random.Random(seed).shuffle(self._free)

    def allocate(self, n: int) -> list[int]:
        if n > len(self._free):
            raise RuntimeError(f"paged cache is full: need {n} more pages, {len(self._free)} free")
        pages, self._free = self._free[:n], self._free[n:]
        return pages


class PagedKVCache:
    """Per-layer ``[num_pages, page_size, kv_heads, head_dim]`` K and V, plus each sequence's pages."""

    def __init__(self, num_layers: int, num_pages: int, page_size: int, kv_heads: int, head_dim: int,
                 dtype: torch.dtype, device: torch.device, seed: int = 0):
        shape = (num_pages, page_size, kv_heads, head_dim)
        self.k = [torch.full(shape, float("nan"), dtype=dtype, device=device) for _ in range(num_layers)]
        self.v = [torch.full(shape, float("nan"), dtype=dtype, device=device) for _ in range(num_layers)]
        self.page_size = page_size
        self.device = device
        self._allocator = PageAllocator(num_pages, seed)
        self.pages: dict[int, list[int]] = {}
        self.evicted: dict[int, int] = {}  # per sequence: leading pages evicted (NaN, never read again)

    @staticmethod
    def pages_needed(num_seqs: int, max_len: int, page_size: int) -> int:
        return num_seqs * -(-max_len // page_size)

    def reserve(self, seq: int, length: int) -> None:
        """Make sure positions ``0..length-1`` of ``seq`` have pages."""
        have = self.pages.setdefault(seq, [])
        need = -(-length // self.page_size) - len(have)
        if need > 0:
            have.extend(self._allocator.allocate(need))

    def evict_before(self, seq: int, position: int) -> None:
        """Evict the pages of ``seq`` wholly before ``position`` (no later window reaches them):
        their K/V become NaN in every layer, so a read of one would poison the output."""
        pages = self.pages.get(seq, [])
        upto = min(position // self.page_size, len(pages))
        for page in pages[self.evicted.get(seq, 0):upto]:
            for buf in self.k + self.v:
                buf[page] = float("nan")
        self.evicted[seq] = max(self.evicted.get(seq, 0), upto)

    def batch(self, seqs: list[int], starts: list[int], lengths: list[int], *, causal: bool,
              sliding_window: int | None = None) -> "PagedBatch":
        """One forward in which sequence ``seqs[i]`` brings ``lengths[i]`` tokens at positions
        ``starts[i]...`` and attends over keys ``0 .. starts[i] + lengths[i] - 1`` (those of the
        last ``sliding_window`` positions when given)."""
        slots, positions = [], []
        for s, start, n in zip(seqs, starts, lengths):
            self.reserve(s, start + n)
            pages = self.pages[s]
            for p in range(start, start + n):
                slots.append(pages[p // self.page_size] * self.page_size + p % self.page_size)
                positions.append(p)
        width = max(len(self.pages[s]) for s in seqs)
        table = [self.pages[s] + [0] * (width - len(self.pages[s])) for s in seqs]
        qsl = [0]
        for n in lengths:
            qsl.append(qsl[-1] + n)
        i32 = dict(dtype=torch.int32, device=self.device)
        return PagedBatch(
            self, causal=causal, sliding_window=sliding_window, max_query_len=max(lengths),
            slots=torch.tensor(slots, dtype=torch.int64, device=self.device),
            positions=torch.tensor(positions, dtype=torch.int64, device=self.device),
            block_table=torch.tensor(table, **i32),
            seq_lens=torch.tensor([a + n for a, n in zip(starts, lengths)], **i32),
            query_start_loc=torch.tensor(qsl, **i32))


class PagedBatch:
    """The ``attend(layer, q, k, v)`` callback of one forward: store this step's K/V, then attend."""

    def __init__(self, cache: PagedKVCache, *, causal: bool, max_query_len: int, slots, positions,
                 block_table, seq_lens, query_start_loc, sliding_window: int | None = None):
        self.cache, self.causal, self.max_query_len = cache, causal, max_query_len
        self.sliding_window = sliding_window
        self.slots, self.positions = slots, positions
        self.block_table, self.seq_lens, self.query_start_loc = block_table, seq_lens, query_start_loc

    def store(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> None:
        ops.write_kv_cache(k, v, self.cache.k[layer], self.cache.v[layer], self.slots)

    def __call__(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        self.store(layer, k, v)
        return ops.paged_attention(
            q, self.cache.k[layer], self.cache.v[layer], self.block_table, self.seq_lens,
            self.query_start_loc, causal=self.causal, sliding_window=self.sliding_window,
            max_query_len=self.max_query_len)
