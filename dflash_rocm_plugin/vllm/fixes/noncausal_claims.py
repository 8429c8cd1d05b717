"""ROCm backends that claim non-causal support but always run causally.

During vllm-project/vllm#40176 (non-causal ROCM_ATTN) ROCM_AITER_UNIFIED_ATTN briefly
inherited ``supports_non_causal() -> True`` from ROCM_ATTN while its ``forward`` called the
(causal-only) AITER kernel with ``causal=True``; the PR made it return False.  A backend in
that state is picked for the DFlash draft and runs the draft block causally: tau drops,
outputs stay correct.

Probe: every ROCm attention backend that claims non-causal support has an implementation
whose source consults a causal flag; one that only hard-codes ``causal=True`` is a gap.
Patch: such a backend's ``supports_non_causal`` returns False, so vLLM's selector skips it
for the draft and rejects an explicit choice with its own reason
("non-causal attention not supported").
"""

from __future__ import annotations

from dflash_rocm_plugin import ops
from dflash_rocm_plugin.hostfix import Probe
from dflash_rocm_plugin.hostfix import code as _code
from dflash_rocm_plugin.vllm.fixes import _source

FIX_ID = "vllm-noncausal-claims"
MODULES = (
    "vllm.v1.attention.backends.rocm_attn",
    "vllm.v1.attention.backends.rocm_aiter_unified_attn",
    "vllm.v1.attention.backends.rocm_aiter_fa",
    "vllm.v1.attention.backends.rocm_segmented_attn",
    "vllm.v1.attention.backends.rocm_octave_attn",
)


def false_claim(backend) -> str | None:
    """Why ``backend`` claims non-causal support without honouring it, or None."""
    try:
        if not backend.supports_non_causal():
            return None
        impl = backend.get_impl_cls()
    except Exception:  # noqa: BLE001 - not a complete backend
        return None
    if _code.is_marked(backend.supports_non_causal):
        return None
    src = _code.source_of(impl)
    if src is None:
        return None
    if _source.reads_causal_flag(src):
        return None
    if not _source.hardcoded_causal_calls(src, "unified_attention") and "causal=True" not in src:
        return None
    return f"{backend.__name__} claims non-causal support but {impl.__name__} only runs causal=True"


def probe_backends(backends) -> Probe:
    gaps = [(b, why) for b in backends if (why := false_claim(b))]
    if not gaps:
        return Probe.not_needed("every ROCm backend claiming non-causal support honours it")
    return Probe.need("; ".join(why for _, why in gaps), [b for b, _ in gaps])


def probe() -> Probe:
    if not ops.on_rocm():
        return Probe.not_needed("ROCm attention backends are only selectable on ROCm builds of torch")
    backends = []
    for name in MODULES:
        module = _code.optional_module(name, broken_is_absent=True)
        if module is None:
            continue
        backends += [v for v in vars(module).values()
                     if isinstance(v, type) and v.__module__ == module.__name__
                     and "supports_non_causal" in dir(v) and hasattr(v, "get_impl_cls")]
    if not backends:
        return Probe.not_needed("no ROCm attention backend importable here")
    return probe_backends(backends)


def _no_non_causal(cls) -> bool:
    return False


_code.mark(_no_non_causal, FIX_ID)


def patch(backends) -> str:
    for backend in backends:
        backend.supports_non_causal = classmethod(_no_non_causal)
    return "supports_non_causal() -> False on " + ", ".join(b.__name__ for b in backends)
