"""``RocmDFlashBackend``: vLLM's view of the rocm_dflash paged-attention backend.

Selected with ``--attention-backend rocm_dflash`` (see registration.py for why vLLM shows it
as ``CUSTOM``).  Decoder self-attention only, causal and non-causal (the DFlash draft block).
"""

from __future__ import annotations

from typing import ClassVar

import torch
from vllm.v1.attention.backend import AttentionBackend, MultipleOf
from vllm.v1.kv_cache_interface import KVCacheLayout

from dflash_rocm_plugin import ops
from dflash_rocm_plugin.vllm import support
from dflash_rocm_plugin.vllm.names import BACKEND_ENUM_NAME


class RocmDFlashBackend(AttentionBackend):
    supported_dtypes: ClassVar[list[torch.dtype]] = list(ops.DTYPES)
    supported_kv_cache_dtypes: ClassVar[list[str]] = list(support.KV_CACHE_DTYPES)
    # vLLM writes K/V through do_kv_cache_update before forward (the DFlash draft calls it directly).
    forward_includes_kv_cache_update: bool = False

    @staticmethod
    def get_name() -> str:
        # The layer looks this up in AttentionBackendEnum; the registered alias resolves it.
        return BACKEND_ENUM_NAME

    @staticmethod
    def get_impl_cls():
        from dflash_rocm_plugin.vllm.impl import RocmDFlashImpl
        return RocmDFlashImpl

    @staticmethod
    def get_builder_cls():
        from dflash_rocm_plugin.vllm.metadata import RocmDFlashMetadataBuilder
        return RocmDFlashMetadataBuilder

    @staticmethod
    def get_supported_kernel_block_sizes(kv_cache_spec=None) -> list[int | MultipleOf]:
        return [MultipleOf(support.BLOCK_SIZE_MULTIPLE)]

    @classmethod
    def get_supported_head_sizes(cls) -> list[int]:
        return list(ops.HEAD_DIMS)

    @classmethod
    def supports_non_causal(cls) -> bool:
        return True

    @classmethod
    def supports_sliding_window(cls) -> bool:
        return True

    @classmethod
    def supports_sink(cls) -> bool:
        return True  # ops.paged_attention(sinks=): one logit per query head

    @classmethod
    def supports_per_head_quant_scales(cls) -> bool:
        return True  # the kernels take per-tensor or per-KV-head K/V scales

    @classmethod
    def supports_attn_type(cls, attn_type: str) -> bool:
        features = support.attn_type_features(attn_type)
        return features is not None and ops.features_problem(features) is None

    @classmethod
    def supports_kv_cache_dtype(cls, kv_cache_dtype) -> bool:
        return kv_cache_dtype in support.KV_CACHE_DTYPES or kv_cache_dtype is None

    @classmethod
    def supports_combination(cls, head_size, dtype, kv_cache_dtype, block_size, use_mla, has_sink,
                             use_sparse, use_mm_prefix, device_capability) -> str | None:
        # Specific reasons next to vLLM's generic ones ("head_size not supported", ...).
        asked = {"mla": use_mla, "sparse": use_sparse, "mm_prefix": use_mm_prefix}
        return support.reason(head_size=head_size, dtype=dtype, kv_cache_dtype=kv_cache_dtype,
                              features=[name for name, on in asked.items() if on])

    @classmethod
    def supported_kv_cache_layouts(cls) -> tuple[KVCacheLayout, ...]:
        # The kernels read K and V through strides, so every layout works.  The ROCm
        # backends' own (LHBNC, LBHNC) come first so a target and a draft on different
        # backends still agree on one worker-wide layout.
        preferred = (KVCacheLayout.LBHNC, KVCacheLayout.LHBNC)
        return preferred + tuple(layout for layout in KVCacheLayout if layout not in preferred)
