"""Which SGLang model-runner configurations the ``rocm_dflash`` backend serves.

Checked once, when SGLang builds the backend, so a misconfiguration stops start-up
with a reason instead of computing wrong attention later.
"""

from __future__ import annotations

import torch

from dflash_rocm_plugin import BACKEND_NAME
from dflash_rocm_plugin.sglang import compat

SUPPORTED_KV_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
MIN_HEAD_DIM, MAX_HEAD_DIM = 16, 256


class UnsupportedConfig(ValueError):
    pass


def _reject(reason: str) -> None:
    raise UnsupportedConfig(f"--attention-backend {BACKEND_NAME}: {reason}")


def check_runner(runner) -> None:
    """Raise ``UnsupportedConfig`` naming the first unsupported feature of ``runner``."""
    from sglang.srt.configs.model_config import AttentionArch
    from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool

    from dflash_rocm_plugin import ops
    problem = ops.platform_problem()
    if problem:
        _reject(f"the kernels cannot run here: {problem}")
    mc = runner.model_config
    if mc.attention_arch != AttentionArch.MHA:
        _reject(f"attention architecture {mc.attention_arch.name} (MLA) is not supported; MHA/GQA only")
    if getattr(mc, "is_encoder_decoder", False):
        _reject("encoder-decoder models (cross-attention) are not supported")
    head_dim, v_head_dim = mc.head_dim, getattr(mc, "v_head_dim", mc.head_dim)
    if v_head_dim != head_dim:
        _reject(f"v_head_dim {v_head_dim} differs from head_dim {head_dim}")
    if not (MIN_HEAD_DIM <= head_dim <= MAX_HEAD_DIM and head_dim % 8 == 0):
        _reject(f"head_dim {head_dim} is not supported (multiples of 8 from {MIN_HEAD_DIM} to {MAX_HEAD_DIM})")

    pool = runner.token_to_kv_pool
    if isinstance(pool, compat.swa_pool_classes()) or not isinstance(pool, MHATokenToKVPool):
        _reject(f"KV pool {type(pool).__name__} is not supported; a plain MHATokenToKVPool only "
                "(no hybrid sliding-window, Mamba or fused-draft pools)")
    if compat.translates_kv_ids(runner):
        _reject("unified (virtual-to-physical translated) KV pools are not supported")
    if pool.dtype not in SUPPORTED_KV_DTYPES or getattr(pool, "store_dtype", pool.dtype) != pool.dtype:
        _reject(f"KV cache dtype {pool.dtype} is not supported (float16, bfloat16, float32; no fp8/fp4)")
    model_dtype = getattr(runner, "dtype", pool.dtype)
    if model_dtype != pool.dtype:
        _reject(f"KV cache dtype {pool.dtype} differs from the model dtype {model_dtype}; "
                "use --kv-cache-dtype auto")
    k_buffer = pool.get_key_buffer(pool.start_layer)
    if k_buffer.dim() != 3:
        _reject(f"KV cache layout {tuple(k_buffer.shape)} is not supported; token-major "
                "[slots, heads, head_dim] only (unset SGLANG_USE_HND_KVCACHE and the AITER 5-D layout)")

    if compat.attn_dcp_size() > 1:
        _reject("decode context parallelism (attn_dcp_size > 1) is not supported")
    if compat.dllm_algorithm(runner) is not None:
        _reject("diffusion LLM decoding is not supported")
    algo = getattr(runner, "spec_algorithm", None)
    if algo is not None and not (algo.is_none() or compat.is_dflash(algo)):
        topk = compat.spec_config(runner).speculative_eagle_topk or 1
        chain = (algo.is_eagle() or algo.is_standalone()) and topk == 1
        if not chain:
            _reject(f"speculative algorithm {algo.name} with tree-shaped verify masks is not supported "
                    "(DFLASH, or EAGLE/STANDALONE with --speculative-eagle-topk 1)")

