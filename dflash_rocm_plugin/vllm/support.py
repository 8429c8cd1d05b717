"""What the rocm_dflash backend supports in vLLM, and the reasons it gives otherwise.

vLLM asks a backend ``validate_configuration(...)`` when it selects one (explicitly or
automatically) and reports the returned reasons; these tables feed the ``supports_*`` hooks
so an unsupported model is refused at selection time, never inside a kernel.
"""

from __future__ import annotations

import torch

# The kernels' head dims (dflash_rocm_plugin.ops._validate.head_dim): multiples of 8 in 16..256.
HEAD_SIZES = tuple(range(16, 257, 8))
DTYPES = (torch.float16, torch.bfloat16, torch.float32)
# "auto" = the model dtype.  Quantized caches (fp8*, int*, turboquant, ...) are not supported,
# and the kernels read the cache in the query's dtype, so an explicit one must match the model.
KV_CACHE_DTYPES = ("auto", "float16", "bfloat16")
_KV_TORCH_DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16}
# Paged-KV block sizes, as ROCM_ATTN / TRITON_ATTN, so a worker mixing them agrees.
BLOCK_SIZE_MULTIPLE = 16


def head_size_reason(head_size: int) -> str | None:
    if head_size in HEAD_SIZES:
        return None
    return (f"rocm_dflash: head_size {head_size} not supported "
            f"(multiples of 8 from {HEAD_SIZES[0]} to {HEAD_SIZES[-1]})")


def kv_cache_dtype_reason(kv_cache_dtype, dtype=None) -> str | None:
    if kv_cache_dtype is None or kv_cache_dtype == "auto":
        return None
    if kv_cache_dtype not in KV_CACHE_DTYPES:
        return (f"rocm_dflash: kv_cache_dtype {kv_cache_dtype!r} not supported "
                f"(quantized KV caches are not; use one of {', '.join(KV_CACHE_DTYPES)})")
    if dtype is not None and _KV_TORCH_DTYPES[kv_cache_dtype] != dtype:
        return f"rocm_dflash: kv_cache_dtype {kv_cache_dtype!r} must match the model dtype {dtype}"
    return None


def dtype_reason(dtype) -> str | None:
    if dtype in DTYPES:
        return None
    return f"rocm_dflash: dtype {dtype} not supported (float16, bfloat16, float32)"
