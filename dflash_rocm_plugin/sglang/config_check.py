"""Which SGLang model-runner configurations the ``rocm_dflash`` backend serves.

Checked once, when SGLang builds the backend, so a misconfiguration stops start-up
with a reason instead of computing wrong attention later.
"""

from __future__ import annotations

from dflash_rocm_plugin import BACKEND_NAME, ops
from dflash_rocm_plugin.sglang import compat, pools


class UnsupportedConfig(ops.Unsupported):
    """A server configuration the backend cannot serve, refused while SGLang builds it."""


def _reject(reason: str) -> None:
    raise UnsupportedConfig(f"--attention-backend {BACKEND_NAME}: {reason}")


def check_runner(runner) -> pools.PoolLayout:
    """Raise ``UnsupportedConfig`` naming every unsupported feature of ``runner``; return
    how its KV pool is read."""
    from sglang.srt.configs.model_config import AttentionArch

    mc = runner.model_config
    features = set()
    if mc.attention_arch != AttentionArch.MHA:
        features.add("mla")
    if getattr(mc, "is_encoder_decoder", False):
        features.add("cross_attention")
    algo = getattr(runner, "spec_algorithm", None)
    if algo is not None and not (algo.is_none() or compat.is_dflash(algo)):
        topk = compat.spec_config(runner).speculative_eagle_topk or 1
        if not ((algo.is_eagle() or algo.is_standalone()) and topk == 1):
            features.add("tree_mask")  # NGRAM, and EAGLE/STANDALONE trees (--speculative-eagle-topk > 1)
    pool = runner.token_to_kv_pool
    layout = pools.describe(pool)
    # A hybrid sliding-window model's window layers may use their own head size.
    head_dims = {(mc.head_dim, getattr(mc, "v_head_dim", mc.head_dim))}
    if not isinstance(layout, str) and layout.swa_layers:
        swa_dim = getattr(mc, "swa_head_dim", None) or mc.head_dim
        head_dims.add((swa_dim, getattr(mc, "swa_v_head_dim", None) or swa_dim))
    dtype, cache_dtype = getattr(runner, "dtype", None), getattr(pool, "dtype", None)
    for head_dim, v_head_dim in sorted(head_dims):
        why = ops.supports(ops.AttentionSpec(head_dim=head_dim, v_head_dim=v_head_dim, dtype=dtype,
                                             kv_cache_dtype=cache_dtype, features=frozenset(features)))
        if why is not None:
            if "tree_mask" in features:
                why += (f" (speculative algorithm {algo.name}; served: DFLASH, or EAGLE/STANDALONE with "
                        "--speculative-eagle-topk 1)")
            cache_refused = ops.kv_cache_dtype_problem(cache_dtype, dtype) is not None
            _reject(why + ("; use --kv-cache-dtype auto" if cache_refused else ""))

    if isinstance(layout, str):
        _reject(layout)
    if compat.translates_kv_ids(runner):
        _reject("unified (virtual-to-physical translated) KV pools are not supported")
    for layer_id in layout.probe_layers:  # global ids: never a linear-attention layer's
        k_buffer = pool.get_key_buffer(layer_id)
        if k_buffer.dim() != 3:
            _reject(f"KV cache layout {tuple(k_buffer.shape)} is not supported; token-major "
                    "[slots, heads, head_dim] only (unset SGLANG_USE_HND_KVCACHE and the AITER 5-D layout)")
    if compat.attn_dcp_size() > 1:
        _reject("decode context parallelism (attn_dcp_size > 1) is not supported")
    if compat.dllm_algorithm(runner) is not None:
        _reject("diffusion LLM decoding is not supported")
    return layout
