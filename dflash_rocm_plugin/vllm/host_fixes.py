"""The vLLM fixes this adapter applies at registration (``patches/vllm/`` holds their diffs)."""

from __future__ import annotations

from dflash_rocm_plugin import hostfix
from dflash_rocm_plugin.vllm.fixes import aiter_fa_extend, noncausal_claims

FIXES = (
    hostfix.Fix(
        aiter_fa_extend.FIX_ID, "vllm",
        "ROCM_AITER_FA extend path honours non-causal metadata (was hard-coded causal=True)",
        "vllm-project/vllm#39703 (non-causal ROCM_AITER_FA; extend path left causal)",
        aiter_fa_extend.probe, aiter_fa_extend.patch,
        tuple(f"patches/vllm/{v}/0001-rocm-aiter-fa-extend-honours-causal.diff"
              for v in ("0.20.0", "0.25.0", "0.32.0", "0.33.0", "0.34.0"))),
    hostfix.Fix(
        noncausal_claims.FIX_ID, "vllm",
        "ROCm backends that claim non-causal support but hard-code causal=True stop claiming it",
        "vllm-project/vllm#40176 (ROCM_AITER_UNIFIED_ATTN must not inherit supports_non_causal)",
        noncausal_claims.probe, noncausal_claims.patch),
)


def apply(patch: bool = True) -> list[hostfix.FixStatus]:
    """Probe every fix and patch what this vLLM needs (``patch=False``: only report).  Never raises."""
    return hostfix.run(FIXES, apply=patch)
