"""Plain-torch float64 reference of the ops semantics: the oracle for tests and benchmarks."""

from __future__ import annotations

import torch


def paged_attention(q, k_cache, v_cache, block_table, seq_lens, query_start_loc, *, causal,
                    scale=None, sliding_window=None, softcap=None) -> torch.Tensor:
    """Same contract as ``ops.paged_attention``; returns float64.  Padding rows are NaN."""
    num_tokens, num_q_heads, head_dim = q.shape
    block_size, num_kv_heads = k_cache.shape[1], k_cache.shape[2]
    group = num_q_heads // num_kv_heads
    scale = head_dim ** -0.5 if scale is None else scale
    out = torch.full((num_tokens, num_q_heads, head_dim), float("nan"), dtype=torch.float64)
    qsl = query_start_loc.tolist()
    for s, seq_len in enumerate(seq_lens.tolist()):
        q_lo, q_hi = qsl[s], qsl[s + 1]
        if q_hi == q_lo:
            continue
        keys = torch.arange(seq_len)
        pages = block_table[s, keys // block_size].long().cpu()
        k = k_cache[pages, keys % block_size].double().cpu()          # [L, Hkv, D]
        v = v_cache[pages, keys % block_size].double().cpu()
        k = k.repeat_interleave(group, dim=1)
        v = v.repeat_interleave(group, dim=1)
        qs = q[q_lo:q_hi].double().cpu()                              # [n, Hq, D]
        logits = torch.einsum("nhd,lhd->hnl", qs, k) * scale
        if softcap:
            logits = softcap * torch.tanh(logits / softcap)
        pos = seq_len - (q_hi - q_lo) + torch.arange(q_hi - q_lo)
        visible = torch.ones(q_hi - q_lo, seq_len, dtype=torch.bool)
        if causal:
            visible &= keys[None, :] <= pos[:, None]
        if sliding_window:
            visible &= (pos[:, None] - keys[None, :]) < sliding_window
        logits = logits.masked_fill(~visible[None], float("-inf"))
        probs = torch.softmax(logits, dim=-1).nan_to_num(0.0)
        out[q_lo:q_hi] = torch.einsum("hnl,lhd->nhd", probs, v)
    return out


def write_kv_cache(key, value, k_cache, v_cache, slot_mapping) -> None:
    block_size = k_cache.shape[1]
    for i, slot in enumerate(slot_mapping.tolist()):
        if slot >= 0:
            k_cache[slot // block_size, slot % block_size] = key[i]
            v_cache[slot // block_size, slot % block_size] = value[i]
