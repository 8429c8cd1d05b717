"""Plain-torch float64 reference of the ops semantics: the oracle for tests and benchmarks."""

from __future__ import annotations

import torch

FP8_MAX = {torch.float8_e4m3fn: 448.0, torch.float8_e4m3fnuz: 240.0}


def _dequantized(cache, pages, offsets, scale):
    """Cached values as float64: ``cache.float() * scale`` (scale per tensor or per KV head)."""
    x = cache[pages, offsets].double().cpu()                      # [L, Hkv, D]
    if scale is not None:
        x = x * scale.double().cpu().reshape(1, -1, 1)
    return x


def paged_attention(q, k_cache, v_cache, block_table, seq_lens, query_start_loc, *, causal,
                    scale=None, sliding_window=None, softcap=None, sinks=None, k_scale=None,
                    v_scale=None) -> torch.Tensor:
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
        pos = seq_len - (q_hi - q_lo) + torch.arange(q_hi - q_lo)
        visible = torch.ones(q_hi - q_lo, seq_len, dtype=torch.bool)
        if causal:
            visible &= keys[None, :] <= pos[:, None]
        if sliding_window:
            visible &= (pos[:, None] - keys[None, :]) < sliding_window
        # Only keys some row may see are read: the rest may be freed (NaN) blocks.
        seen = visible.any(0)
        keys, visible = keys[seen], visible[:, seen]
        pages = block_table[s, keys // block_size].long().cpu()
        k = _dequantized(k_cache, pages, keys % block_size, k_scale).repeat_interleave(group, dim=1)
        v = _dequantized(v_cache, pages, keys % block_size, v_scale).repeat_interleave(group, dim=1)
        qs = q[q_lo:q_hi].double().cpu()                              # [n, Hq, D]
        logits = torch.einsum("nhd,lhd->hnl", qs, k) * scale
        if softcap:
            logits = softcap * torch.tanh(logits / softcap)
        logits = logits.masked_fill(~visible[None], float("-inf"))
        if sinks is not None:
            # One more logit per head with no value: it only joins the denominator.
            sink = sinks.double().cpu().reshape(-1, 1, 1).expand(-1, q_hi - q_lo, 1)
            probs = torch.softmax(torch.cat([logits, sink], dim=-1), dim=-1)[..., :-1].nan_to_num(0.0)
        else:
            probs = torch.softmax(logits, dim=-1).nan_to_num(0.0)
        out[q_lo:q_hi] = torch.einsum("hnl,lhd->nhd", probs, v)
    return out


def quantized(x: torch.Tensor, dtype, scale=None) -> torch.Tensor:
    """What an fp8 cache stores for ``x`` ([tokens, heads, dim]): ``(x / scale)`` saturated, RNE."""
    x = x.float()
    if scale is not None:
        x = x / scale.float().reshape(1, -1, 1).to(x.device)
    return x.clamp(-FP8_MAX[dtype], FP8_MAX[dtype]).to(dtype)


def write_kv_cache(key, value, k_cache, v_cache, slot_mapping, k_scale=None, v_scale=None) -> None:
    block_size = k_cache.shape[1]
    if k_cache.dtype in FP8_MAX:
        key, value = quantized(key, k_cache.dtype, k_scale), quantized(value, v_cache.dtype, v_scale)
    for i, slot in enumerate(slot_mapping.tolist()):
        if slot >= 0:
            k_cache[slot // block_size, slot % block_size] = key[i]
            v_cache[slot // block_size, slot % block_size] = value[i]
