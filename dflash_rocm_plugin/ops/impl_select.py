"""Which implementation runs each op (placeholder; filled in below)."""

from __future__ import annotations


def try_aiter_attention(q, k_cache, v_cache, block_table, seq_lens, query_start_loc, out, *,
                        causal, scale, window, softcap, max_query_len, num_kv_splits) -> bool:
    return False
