"""``write_kv_cache``: store this step's keys and values into a paged cache."""

from __future__ import annotations

import torch

from dflash_rocm_plugin.ops import _runtime, _validate, support

SLOT_DTYPES = (torch.int32, torch.int64)
# The kernels' code for each fp8 format (0: not fp8).
FP8_CODES = {torch.float8_e4m3fn: 1, torch.float8_e4m3fnuz: 2}


def write_kv_cache(key: torch.Tensor, value: torch.Tensor, k_cache: torch.Tensor,
                   v_cache: torch.Tensor, slot_mapping: torch.Tensor, k_scale: torch.Tensor | None = None,
                   v_scale: torch.Tensor | None = None) -> None:
    """``k_cache[slot // bs, slot % bs] = key[i]`` (same for V) for every ``slot = slot_mapping[i] >= 0``.

    key, value: ``[>= num_slots, num_kv_heads, head_dim]`` (any strides); caches
    ``[num_blocks, block_size, num_kv_heads, head_dim]`` (any strides) in key's dtype or an fp8
    format (``float8_e4m3fn`` / ``float8_e4m3fnuz``); ``slot_mapping`` int32/int64 ``[num_slots]``;
    negative slots (padding) are skipped.  An fp8 cache stores ``key / k_scale`` rounded to nearest
    even and saturated to the format's largest finite value (448 / 240), i.e.
    ``(key.float() / k_scale).clamp(-max, max).to(fmt)``; scales as for ``paged_attention``.
    """
    _validate.tensor("key", key, ndim=3, dtypes=_validate.ATTENTION_DTYPES)
    device = key.device
    _runtime.require_launchable(device)
    _validate.tensor("value", value, ndim=3, dtypes=(key.dtype,), device=device)
    cache_dtypes = (key.dtype,) + support.FP8_KV_CACHE_DTYPES
    _validate.tensor("k_cache", k_cache, ndim=4, dtypes=cache_dtypes, device=device)
    _validate.tensor("v_cache", v_cache, ndim=4, dtypes=(k_cache.dtype,), device=device)
    _validate.tensor("slot_mapping", slot_mapping, ndim=1, dtypes=SLOT_DTYPES, device=device)
    if key.shape != value.shape:
        raise ValueError(f"key {tuple(key.shape)} and value {tuple(value.shape)} differ in shape")
    if k_cache.shape != v_cache.shape:
        raise ValueError(f"k_cache {tuple(k_cache.shape)} and v_cache {tuple(v_cache.shape)} differ in shape")
    if tuple(key.shape[1:]) != tuple(k_cache.shape[2:]):
        raise ValueError(
            f"key is [tokens, {key.shape[1]}, {key.shape[2]}] but the cache holds "
            f"[.., .., {k_cache.shape[2]}, {k_cache.shape[3]}] (num_kv_heads, head_dim)")
    num_slots = slot_mapping.shape[0]
    if key.shape[0] < num_slots:
        raise ValueError(f"slot_mapping has {num_slots} entries but key has only {key.shape[0]} tokens")
    _, block_size, num_kv_heads, head_dim = k_cache.shape
    _validate.kv_scales(k_scale, v_scale, k_cache.dtype, num_kv_heads, device)
    if num_slots == 0:
        return
    _, kv = _runtime.kernels()
    fp8 = FP8_CODES.get(k_cache.dtype, 0)
    if fp8:  # stored as bytes (kernels/kv_cache.py)
        k_cache, v_cache = k_cache.view(torch.uint8), v_cache.view(torch.uint8)
    kv.write_kv_cache_kernel[(num_slots,)](
        key, value, k_cache, v_cache, slot_mapping,
        key if k_scale is None else k_scale, key if v_scale is None else v_scale,
        int(k_scale is not None and k_scale.numel() > 1), int(v_scale is not None and v_scale.numel() > 1),
        num_kv_heads, head_dim, block_size,
        *key.stride(), *value.stride(), *k_cache.stride(), *v_cache.stride(),
        BLOCK_H=_runtime.next_power_of_2(num_kv_heads), BLOCK_D=_runtime.next_power_of_2(head_dim),
        FP8=fp8, USE_K_SCALE=k_scale is not None, USE_V_SCALE=v_scale is not None,
        num_warps=4 if num_kv_heads * head_dim >= 1024 else 1,
    )
