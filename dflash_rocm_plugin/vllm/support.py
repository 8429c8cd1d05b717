"""vLLM's vocabulary for what the plugin supports: a translation of ``ops.supports``, no facts of its own.

vLLM asks a backend ``validate_configuration(...)`` when it selects one (explicitly or
automatically) and reports the returned reasons; these helpers feed the ``supports_*`` hooks
so an unsupported model is refused at selection time, never inside a kernel.
"""

from __future__ import annotations

import torch

from dflash_rocm_plugin import ops

# Paged-KV block sizes vLLM may give this backend: as ROCM_ATTN / TRITON_ATTN, so a worker mixing
# them agrees.  (The kernels take any page size; this is a host-side choice.)
BLOCK_SIZE_MULTIPLE = 16

# vLLM's --kv-cache-dtype names for the cache dtypes ops supports.  "auto" = the model dtype.
_KV_CACHE_NAMES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}
# fp8 names that mean e4m3 in the platform's own format (current_platform.fp8_dtype(): e4m3fnuz on
# gfx942, e4m3fn on gfx950 and NVIDIA), never one format's bytes read as the other's.
FP8_NAMES = ("fp8", "fp8_e4m3")
KV_CACHE_DTYPES = ("auto",) + tuple(n for n, d in _KV_CACHE_NAMES.items() if d in ops.KV_CACHE_DTYPES) + FP8_NAMES
# vLLM's names for refused caches that ops has words for: the format, or the kind of layer.
_OPS_REFUSES = {"fp8_e5m2": lambda dtype: ops.kv_cache_dtype_problem(torch.float8_e5m2, dtype),
                "fp8_ds_mla": lambda dtype: ops.features_problem({"mla"})}
# vLLM's other quantized cache modes (layouts of vLLM's own), and why each is refused.
_REFUSED = {
    "fp8_per_token_head": "per-token-head scales stored inline in the cache are not supported; use fp8 "
                          "with per-tensor or per-head checkpoint scales",
    "fp8_inc": "Intel Neural Compressor fp8 caches are not supported; use fp8",
}


def attn_type_features(attn_type: str) -> frozenset | None:
    """The ops features a vLLM attention type asks for (none for a decoder's self-attention), or None for a
    type this translation does not know."""
    from vllm.v1.attention.backend import AttentionType
    return {AttentionType.DECODER: frozenset(), AttentionType.ENCODER_DECODER: frozenset({"cross_attention"}),
            AttentionType.ENCODER: frozenset({"encoder"}), AttentionType.ENCODER_ONLY: frozenset({"encoder"})
            }.get(attn_type)


class UnknownCacheDtype(Exception):
    pass


def platform_fp8_dtype():
    from vllm.platforms import current_platform
    return current_platform.fp8_dtype()


def kv_cache_torch_dtype(kv_cache_dtype, dtype):
    """The torch dtype a vLLM ``kv_cache_dtype`` name stores, or raise ``UnknownCacheDtype``."""
    if kv_cache_dtype in (None, "auto"):
        return dtype
    if kv_cache_dtype in _KV_CACHE_NAMES:
        return _KV_CACHE_NAMES[kv_cache_dtype]
    if kv_cache_dtype in FP8_NAMES:
        return platform_fp8_dtype()
    raise UnknownCacheDtype(kv_cache_dtype)


def spec(*, head_size: int, dtype, kv_cache_dtype="auto", features=(), **fields) -> ops.AttentionSpec | str:
    """The ops spec of a vLLM layer configuration, or the reason it has none."""
    try:
        cache = kv_cache_torch_dtype(kv_cache_dtype, dtype)
    except UnknownCacheDtype:
        refuses = _OPS_REFUSES.get(kv_cache_dtype)
        why = refuses(dtype) if refuses else _REFUSED.get(kv_cache_dtype, "this quantized KV cache is not supported")
        return f"kv_cache_dtype {kv_cache_dtype!r}: {why} (supported: {', '.join(KV_CACHE_DTYPES)})"
    return ops.AttentionSpec(head_dim=head_size, dtype=dtype, kv_cache_dtype=cache,
                             features=frozenset(features), **fields)


def reason(**config) -> str | None:
    """``rocm_dflash: ...`` when the plugin cannot serve this vLLM layer configuration."""
    s = spec(**config)
    why = s if isinstance(s, str) else ops.supports(s)
    return None if why is None else f"rocm_dflash: {why}"


def require(**config) -> None:
    why = reason(**config)
    if why is not None:
        raise ops.Unsupported(why)
