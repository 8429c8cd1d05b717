"""One validated ``paged_attention`` call, as every kernel backend receives it."""

from __future__ import annotations

import dataclasses

import torch


@dataclasses.dataclass(frozen=True)
class AttentionCall:
    q: torch.Tensor                 # [num_tokens, num_q_heads, head_dim]
    k_cache: torch.Tensor           # [num_blocks, page_size, num_kv_heads, head_dim]
    v_cache: torch.Tensor
    block_table: torch.Tensor       # int32 [>= num_seqs, pages per sequence]
    seq_lens: torch.Tensor          # int32 [num_seqs]
    query_start_loc: torch.Tensor   # int32 [num_seqs + 1]
    out: torch.Tensor               # like q
    causal: bool
    scale: float
    window: int                     # 0: no sliding window
    softcap: float                  # 0.0: no softcap
    max_query_len: int | None       # host-known bound on query rows per sequence
    num_kv_splits: int | None       # forced split count (tuning), else chosen from shapes
    workspace: torch.Tensor | None  # caller-owned split-KV scratch
    sinks: torch.Tensor | None = None    # [num_q_heads] logits, or None
    k_scale: torch.Tensor | None = None  # float32 [1] or [num_kv_heads]; fp8 caches only
    v_scale: torch.Tensor | None = None
    # Whole prompts (nothing cached before them) of at least this many tokens are served by the
    # dense-K/V prefill kernel (ops/backends/triton_extend.py), not the paged one; 0: none.
    extend_min_q: int = 0
    # ... and chunks of that many tokens over a prefix of at most GQA times as many keys.
    extend_chunks: bool = False

    @property
    def num_tokens(self) -> int:
        return self.q.shape[0]

    @property
    def num_seqs(self) -> int:
        return self.seq_lens.shape[0]

    @property
    def num_q_heads(self) -> int:
        return self.q.shape[1]

    @property
    def head_dim(self) -> int:
        return self.q.shape[2]

    @property
    def page_size(self) -> int:
        return self.k_cache.shape[1]

    @property
    def num_kv_heads(self) -> int:
        return self.k_cache.shape[2]

    @property
    def fp8(self) -> bool:
        return self.k_cache.dtype in (torch.float8_e4m3fn, torch.float8_e4m3fnuz)

    @property
    def kv_capacity(self) -> int:
        """Keys a block-table row can address: an upper bound on any sequence's length."""
        return self.block_table.shape[1] * self.page_size
