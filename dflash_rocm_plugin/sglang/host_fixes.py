"""The SGLang fixes this adapter declares (``patches/sglang/`` holds their diffs).

Registration applies all but the DeepSeek-V4 ones; those run when a DeepSeek-V4 server starts
with speculative decoding on ROCm (``deepseek_v4.py``), so other servers never hear of them.
"""

from __future__ import annotations

from dflash_rocm_plugin import hostfix
from dflash_rocm_plugin.sglang.fixes import (
    draft_backend,
    dsv4_draft_dispatch,
    dsv4_draft_step_cache_loc,
    dsv4_eager_verify,
    k_rope,
    model_backends,
    qwen3_capture,
    triton_custom_mask,
)

_DSV4_UPSTREAM = "sgl-project/sglang#26383 (DSV4 MTP graph capture on ROCm)"

FIXES = (
    hostfix.Fix(
        draft_backend.FIX_ID, "sglang",
        "DFLASH draft accepts rocm_dflash; on ROCm an unset/unsupported draft backend defaults to it",
        "sgl-project/sglang#22342 (triton on ROCm), #35932 (extensible draft allow-list)",
        draft_backend.probe, draft_backend.patch,
        tuple(f"patches/sglang/{v}/0001-dflash-draft-accepts-rocm_dflash.diff"
              for v in ("0.5.11", "0.5.12", "0.5.13.post1", "0.5.14", "0.5.15.post1", "0.5.16",
                        "0.5.17", "0.5.18"))),
    hostfix.Fix(
        triton_custom_mask.FIX_ID, "sglang",
        "Triton backend CUDA-graph capture/replay tolerates spec_info.custom_mask None",
        "sgl-project/sglang#22342", triton_custom_mask.probe, triton_custom_mask.patch),
    hostfix.Fix(
        k_rope.FIX_ID, "sglang", "DFlash draft apply_k_rope: dummy query shaped like K",
        "sgl-project/sglang#22342", k_rope.probe, k_rope.patch),
    hostfix.Fix(
        qwen3_capture.FIX_ID, "sglang",
        "Qwen3ForCausalLM.set_dflash_layers_to_capture (capture before layer i+1)",
        "sgl-project/sglang#22342", qwen3_capture.probe, qwen3_capture.patch),
    hostfix.Fix(
        dsv4_draft_dispatch.FIX_ID, "sglang",
        "DeepSeek-V4 MTP/DSpark draft backends on ROCm are the HIP radix ones (is_hip() dispatch)",
        _DSV4_UPSTREAM, dsv4_draft_dispatch.probe, dsv4_draft_dispatch.patch),
    hostfix.Fix(
        dsv4_eager_verify.FIX_ID, "sglang",
        "DeepSeek-V4 HIP radix target verify builds its metadata eagerly (no lazy in-graph upgrade)",
        _DSV4_UPSTREAM, dsv4_eager_verify.probe, dsv4_eager_verify.patch),
    hostfix.Fix(
        dsv4_draft_step_cache_loc.FIX_ID, "sglang",
        "DeepSeek-V4 HIP radix multi-step draft: each step bakes its own out_cache_loc slice",
        _DSV4_UPSTREAM, dsv4_draft_step_cache_loc.probe, dsv4_draft_step_cache_loc.patch),
    hostfix.Fix(
        model_backends.FIX_ID, "sglang",
        "gpt-oss and Gemma-4 server-argument checks accept rocm_dflash",
        "not upstream: SGLang's fixed GptOssForCausalLM / Gemma4 attention-backend lists "
        "(0.5.11-0.5.23) take no plugin backend",
        model_backends.probe, model_backends.patch,
        tuple(f"patches/sglang/{v}/0002-gpt-oss-gemma4-accept-rocm_dflash.diff"
              for v in ("0.5.11", "0.5.12", "0.5.13.post1", "0.5.14", "0.5.18", "0.5.23"))),
)
DEEPSEEK_V4_FIXES = tuple(f for f in FIXES if f.id.startswith("sglang-dsv4-"))


def apply(patch: bool = True) -> list[hostfix.FixStatus]:
    """Probe the registration fixes and patch what this SGLang needs (``patch=False``: only report).
    Never raises."""
    return hostfix.run(tuple(f for f in FIXES if f not in DEEPSEEK_V4_FIXES), apply=patch)


def apply_deepseek_v4(patch: bool = True) -> list[hostfix.FixStatus]:
    """Probe the DeepSeek-V4 fixes and patch what this SGLang needs.  Never raises."""
    return hostfix.run(DEEPSEEK_V4_FIXES, apply=patch)
