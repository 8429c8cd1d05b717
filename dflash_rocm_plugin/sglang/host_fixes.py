"""The SGLang fixes this adapter applies at registration (``patches/sglang/`` holds their diffs)."""

from __future__ import annotations

from dflash_rocm_plugin import hostfix
from dflash_rocm_plugin.sglang.fixes import draft_backend, k_rope, qwen3_capture, triton_custom_mask

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
)


def apply(patch: bool = True) -> list[hostfix.FixStatus]:
    """Probe every fix and patch what this SGLang needs (``patch=False``: only report).  Never raises."""
    return hostfix.run(FIXES, apply=patch)
