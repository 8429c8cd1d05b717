"""What the attention ops support, and why not: every support fact of the plugin, once.

Both host adapters describe a layer as an :class:`AttentionSpec` and ask :func:`supports`; they
translate the answer into their host's refusal (vLLM's backend validation, SGLang's start-up
check) and never restate a limit.  ``paged_attention``'s argument checks read the same facts, so
a configuration a host accepted cannot fail later for a reason the host was not told.
"""

from __future__ import annotations

import dataclasses
import functools
import os

import torch

from dflash_rocm_plugin.ops import _runtime

# Up to 512: Gemma-4's global layers (its sliding layers use 256).
MIN_HEAD_DIM, MAX_HEAD_DIM, HEAD_DIM_MULTIPLE = 16, 512, 8
HEAD_DIMS = tuple(range(MIN_HEAD_DIM, MAX_HEAD_DIM + 1, HEAD_DIM_MULTIPLE))
MAX_GQA_GROUP = 64
# Query/output dtypes.  float32 is for tests (exact under the interpreter).
DTYPES = (torch.float16, torch.bfloat16, torch.float32)
# fp8 caches: e4m3fn (OCP: MI355X/gfx950, NVIDIA) and e4m3fnuz (MI300X/gfx942), each with its own
# largest finite value.  A cached value means ``cache.float() * scale``.  Reading one format's
# bytes as the other is silently wrong (NaN codes, a factor of 2), so the dtype is the format.
FP8_MAX = {torch.float8_e4m3fn: 448.0, torch.float8_e4m3fnuz: 240.0}
FP8_KV_CACHE_DTYPES = tuple(FP8_MAX)
# Queries that may join an fp8 cache's format for an fp8 Q K^T dot (ops/launch_config.fp8_dots_rule);
# float32 queries (tests) keep exact dots.
FP8_DOT_QUERY_DTYPES = (torch.float16, torch.bfloat16)
# Which calls over an fp8 cache may run Q K^T as an fp8 dot (q rounded into the cache's format; its
# speed and cost at ops/launch_config.fp8_dots_rule): "off" (default) none; "draft" the non-causal
# calls, a DFlash draft's block, whose attention error only lowers acceptance; "all" the target's
# causal calls too.
FP8_QK_ENV = "DFLASH_ROCM_FP8_QK"
FP8_QK_CHOICES = ("off", "draft", "all")
# Cache element types: the model dtype itself, or an fp8 format with any model dtype.
KV_CACHE_DTYPES = DTYPES + FP8_KV_CACHE_DTYPES
# KV scales: per tensor (1 element) or per KV head, float32, on the device.
KV_SCALE_DTYPE = torch.float32
# Sinks: one logit per query head, in the units of the scaled scores.
SINK_DTYPES = DTYPES

# Features a host may ask for that no kernel path here implements: name -> what it is.
UNSUPPORTED_FEATURES = {
    "alibi": "ALiBi position biases",
    "mla": "multi-head latent attention (MLA)",
    "sparse": "sparse attention",
    "cross_attention": "encoder-decoder (cross) attention",
    "encoder": "encoder attention (no paged KV cache)",
    "bidirectional_decoder": "bidirectional decoder attention over the whole sequence",
    "mm_prefix": "multimodal prefix-LM (partial full-attention) ranges",
    "chunked_local": "chunked local attention",
    "output_quant": "fused output quantization",
    "return_lse": "returning the softmax log-sum-exp",
    "score_mod": "score modifiers",
    "non_tanh_softcap": "logit capping other than tanh",
    "per_request_causal": "per-request causal masks (causal must hold for the whole batch)",
    "tree_mask": "tree-shaped (custom) attention masks",
}


class Unsupported(ValueError):
    """A configuration the plugin cannot serve; the message says what and what is supported."""


def native_fp8_dtype(arch: str) -> torch.dtype:
    """The fp8 format a GPU converts in hardware, the one its hosts keep caches in: e4m3fnuz on
    CDNA3 (gfx94x: MI300X, MI325X), e4m3fn elsewhere (CDNA4 gfx950, NVIDIA).  The other format is
    still served, decoded from its bytes (slower); so is every format under the interpreter."""
    return torch.float8_e4m3fnuz if arch.startswith("gfx94") else torch.float8_e4m3fn


def is_native_fp8(kv_cache_dtype, arch: str) -> bool:
    """Whether ``kv_cache_dtype`` is the fp8 format ``arch`` converts in hardware (None: the model dtype)."""
    return kv_cache_dtype is not None and kv_cache_dtype == native_fp8_dtype(arch)


def has_fp8_dots(arch: str) -> bool:
    """Whether ``arch``'s matrix units multiply fp8 operands: CDNA3 and CDNA4 (gfx94x, gfx950), NVIDIA from
    Ada (sm_89).  Elsewhere an fp8 cache's tiles are converted for 16-bit dots."""
    if arch.startswith(("gfx94", "gfx95")):
        return True
    return arch.startswith("sm_") and arch[3:].isdigit() and int(arch[3:]) >= 89


def multiplies_fp8(kv_cache_dtype, arch: str) -> bool:
    """Whether ``arch``'s matrix units can take this cache's tiles as fp8 operands: its own format
    (``is_native_fp8``) on a GPU with fp8 dots (``has_fp8_dots``)."""
    return is_native_fp8(kv_cache_dtype, arch) and has_fp8_dots(arch)


# ``fp8_dots`` modes whose P V takes P as the sum of two fp8 parts (ops/launch_config.py reads it).
P_SPLIT_FP8_DOTS = frozenset({"qk_pv_split"})


def splits_p_for_fp8_dots(arch: str) -> bool:
    """Whether P V over a cache in ``arch``'s own fp8 format may run on fp8 matrix units too, with P as the
    sum of two fp8 parts (``fp8_dots="qk_pv_split"``, a choice ``dflash-rocm tune`` may make): gfx94x, whose
    key loop is bound by the VALU work of converting V (compiled offline, Qwen3-8B q16 tile in 16x16 MFMAs:
    instructions -25 %, LDS operations -55 %, registers 247 -> 166-184; benchmarks/NOTES.md).  Not gfx950
    (its fp16 MFMAs leave the split level there) nor NVIDIA (Hopper's fp8 B operand must be K-major, V is
    not, and Triton 3.6's wgmma code for it computes non-finite rows)."""
    return arch.startswith("gfx94")


def fp8_dots_problem(fp8_dots: str, arch: str) -> str | None:
    """Why an ``fp8_dots`` mode, forced or tuned, cannot run on ``arch`` (None where it can).  P as two fp8
    parts is refused on NVIDIA: on an H100 (Triton 3.6) Hopper's wgmma code for it leaves a third of the rows
    non-finite at every stage count, while the same source through mma.sync (``DISABLE_MMA_V3=1``) is within
    the default launch's error (benchmarks/NOTES.md, "v18 on 2026-12-07"): a code-generation fault, and
    mma.sync is slower than the fp16 wgmma dots the default runs.  gfx950 may still force it
    (``ci/rocm_validate.sh`` checks it there against the reference)."""
    if fp8_dots in P_SPLIT_FP8_DOTS and arch.startswith("sm_"):
        return (f"fp8_dots={fp8_dots!r} is not supported on NVIDIA GPUs ({arch}): Triton's Hopper code for P as "
                "two fp8 parts computes non-finite rows")
    return None


def _names(dtypes) -> str:
    return ", ".join(str(d).replace("torch.", "") for d in dtypes)


def head_dim_problem(head_dim) -> str | None:
    if isinstance(head_dim, int) and head_dim in HEAD_DIMS:
        return None
    return (f"head_dim {head_dim} is not supported (multiples of {HEAD_DIM_MULTIPLE} from {MIN_HEAD_DIM} "
            f"to {MAX_HEAD_DIM}, e.g. 64, 80, 96, 128, 192, 256, 512)")


def dtype_problem(dtype) -> str | None:
    if dtype is None or dtype in DTYPES:  # None: not known to the caller (checked per call)
        return None
    return f"dtype {dtype} is not supported (supported: {_names(DTYPES)})"


def kv_cache_dtype_problem(kv_cache_dtype, dtype) -> str | None:
    """``kv_cache_dtype`` None means the model dtype; ``dtype`` None, a model dtype not known yet."""
    if kv_cache_dtype is None or kv_cache_dtype == dtype or kv_cache_dtype in FP8_KV_CACHE_DTYPES:
        return None
    if kv_cache_dtype in DTYPES:
        if dtype is None:
            return None
        return (f"KV cache dtype {kv_cache_dtype} differs from the model dtype {dtype}; an unquantized cache "
                "must hold the model dtype")
    return (f"KV cache dtype {kv_cache_dtype} is not supported (supported: the model dtype, or fp8 "
            f"{_names(FP8_KV_CACHE_DTYPES)} with per-tensor or per-KV-head float32 scales)")


def kv_scale_problem(scale, kv_cache_dtype, num_kv_heads) -> str | None:
    """A K or V scale: None (1.0), or float32 with 1 or ``num_kv_heads`` elements, for fp8 caches only."""
    if scale is None:
        return None
    if kv_cache_dtype not in FP8_KV_CACHE_DTYPES:
        return f"a scale only applies to an fp8 cache (the cache holds {kv_cache_dtype})"
    if not isinstance(scale, torch.Tensor) or scale.dtype != KV_SCALE_DTYPE:
        got = scale.dtype if isinstance(scale, torch.Tensor) else type(scale).__name__
        return f"must be a float32 tensor (got {got}); pass a 1-element tensor for a per-tensor scale"
    if scale.numel() not in (1, num_kv_heads):
        return (f"has {scale.numel()} elements; expected 1 (per tensor) or num_kv_heads = {num_kv_heads} "
                "(per KV head)")
    return None


def heads_problem(num_q_heads, num_kv_heads) -> str | None:
    if num_q_heads is None or num_kv_heads is None:
        return None
    if num_kv_heads < 1 or num_q_heads % num_kv_heads:
        return f"num_q_heads ({num_q_heads}) must be a multiple of num_kv_heads ({num_kv_heads})"
    if num_q_heads // num_kv_heads > MAX_GQA_GROUP:
        return f"GQA group {num_q_heads // num_kv_heads} is above the supported maximum {MAX_GQA_GROUP}"
    return None


def v_head_dim_problem(head_dim, v_head_dim) -> str | None:
    if v_head_dim is None or v_head_dim == head_dim:
        return None
    return f"v_head_dim {v_head_dim} differs from head_dim {head_dim} (K and V must share one head size)"


def features_problem(features) -> str | None:
    unknown = set(features) - set(UNSUPPORTED_FEATURES)
    if unknown:
        raise ValueError(f"unknown attention features {sorted(unknown)}; known: {sorted(UNSUPPORTED_FEATURES)}")
    asked = [UNSUPPORTED_FEATURES[f] for f in sorted(features)]
    return f"{', '.join(asked)} {'is' if len(asked) == 1 else 'are'} not supported" if asked else None


@functools.lru_cache(maxsize=None)
def fp8_qk_policy() -> str:
    """``DFLASH_ROCM_FP8_QK`` (one of FP8_QK_CHOICES), read once per process; ``ValueError`` naming the
    variable and its values for anything else."""
    value = os.environ.get(FP8_QK_ENV, "").strip().lower() or "off"
    if value not in FP8_QK_CHOICES:
        raise ValueError(f"{FP8_QK_ENV}={os.environ.get(FP8_QK_ENV)!r} is not one of: {', '.join(FP8_QK_CHOICES)}")
    return value


def fp8_qk_covers(causal: bool) -> bool:
    """Whether ``DFLASH_ROCM_FP8_QK`` names calls of this causality (draft: the non-causal ones)."""
    policy = fp8_qk_policy()
    return policy == "all" or (policy == "draft" and not causal)


def fp8_qk_problem(kv_cache_dtype) -> str | None:
    """A ``DFLASH_ROCM_FP8_QK`` value that is not understood, for layers over an fp8 cache: said at the
    host's validation, not first at a layer's call."""
    if kv_cache_dtype not in FP8_KV_CACHE_DTYPES:
        return None
    try:
        fp8_qk_policy()
    except ValueError as exc:
        return str(exc)
    return None


@dataclasses.dataclass(frozen=True)
class AttentionSpec:
    """One attention layer as a host would configure it for the plugin.

    ``kv_cache_dtype`` None means the model dtype.  ``features`` names anything beyond plain
    causal/non-causal paged self-attention with optional window and softcap (see
    ``UNSUPPORTED_FEATURES``).
    """

    head_dim: int
    dtype: torch.dtype | None        # None: not known yet (checked again per call)
    kv_cache_dtype: torch.dtype | None = None
    num_q_heads: int | None = None
    num_kv_heads: int | None = None
    v_head_dim: int | None = None
    sliding_window: int | None = None
    softcap: float | None = None
    features: frozenset = frozenset()


def supports(spec: AttentionSpec) -> str | None:
    """None when the plugin serves ``spec``; otherwise every reason it does not, in one string."""
    reasons = [r for r in (
        _runtime.triton_problem(),
        head_dim_problem(spec.head_dim),
        v_head_dim_problem(spec.head_dim, spec.v_head_dim),
        dtype_problem(spec.dtype),
        kv_cache_dtype_problem(spec.kv_cache_dtype, spec.dtype),
        heads_problem(spec.num_q_heads, spec.num_kv_heads),
        None if spec.sliding_window is None or spec.sliding_window > 0
        else f"sliding_window {spec.sliding_window} must be positive",
        None if spec.softcap is None or spec.softcap > 0 else f"softcap {spec.softcap} must be positive",
        features_problem(spec.features),
        fp8_qk_problem(spec.kv_cache_dtype),
    ) if r]
    return "; ".join(reasons) or None


def require(spec: AttentionSpec) -> None:
    """Raise :class:`Unsupported` with the reasons when ``spec`` is not served."""
    reason = supports(spec)
    if reason is not None:
        raise Unsupported(f"rocm_dflash: {reason}")


# Calls whose whole causal prompts read their keys from the host's dense new K/V
# (``paged_attention(new_keys=, new_values=)``, kernels/extend_attention.py) instead of the cache.
# Everything else (and every chunk over a prefix, every prompt under the launch's length) runs the paged
# kernel, whose result these match: the new K/V are the rows the cache holds, so the cache must hold
# them as given, or as ``write_kv_cache`` stores them in an fp8 cache (the dense launch rounds them the
# same way first).
EXTEND_HEAD_DIMS = (32, 64, 128, 256)  # 256: Qwen3-Next / Qwen3.5 / Qwen3.6 full-attention layers


def extend_problem(*, causal: bool, softcap: float, dtype, kv_cache_dtype, head_dim: int) -> str | None:
    """Why a call's whole prompts cannot read their keys from the dense new K/V, or None (sliding windows
    and sinks are served there: gpt-oss, Gemma-4's sliding layers)."""
    if not causal:
        return "non-causal attention (a DFlash draft block reads its context from the pages)"
    if softcap:
        # No target of this round caps its attention scores; the tanh overflows gfx942's 256 registers
        # in the dense tile (tests/core/test_offline_compile.py).
        return "a softcap"
    if kv_cache_dtype != dtype and kv_cache_dtype not in FP8_KV_CACHE_DTYPES:
        return f"a {kv_cache_dtype} cache under {dtype} queries (the cache holds other values than the new rows)"
    if head_dim not in EXTEND_HEAD_DIMS:
        return f"head_dim {head_dim} (the dense path takes {', '.join(map(str, EXTEND_HEAD_DIMS))})"
    return None


def extend_layout_problem(q: torch.Tensor, out: torch.Tensor, new_keys: torch.Tensor, new_values: torch.Tensor,
                          k_cache: torch.Tensor, v_cache: torch.Tensor) -> str | None:
    """Strides the dense path reads with: unit-stride head dimensions, and each token's KV heads side by
    side in ``new_keys`` / ``new_values`` (a row of ``num_kv_heads * head_dim`` elements)."""
    for name, t in (("q", q), ("out", out), ("k_cache", k_cache), ("v_cache", v_cache)):
        if t.stride(-1) != 1:
            return f"{name}'s head dimension is not unit-stride"
    for name, t in (("new_keys", new_keys), ("new_values", new_values)):
        if t.stride(2) != 1 or t.stride(1) != t.shape[2]:
            return f"{name} does not hold each token's KV heads side by side"
    return None
