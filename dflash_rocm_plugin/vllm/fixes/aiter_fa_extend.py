"""ROCM_AITER_FA: the extend path must honour non-causal metadata.

vllm-project/vllm#39703 taught ROCM_AITER_FA the DFlash draft's non-causal attention
(``supports_non_causal() -> True``; pure prefills pass ``causal=attn_metadata.causal``,
multi-token decodes take a non-causal kvcache kernel) but ``extend_forward`` still calls
``flash_attn_varlen_func(..., causal=True)`` for the new tokens of a request with cached
context (releases 0.20 through 0.34 at least).  A non-causal batch that the builder
classifies as extend (query longer than the decode threshold) is then silently run
causally: draft quality - tau - drops, outputs stay correct, no test notices.

Probe: ROCM_AITER_FA imports, claims non-causal support, and the source of
``extend_forward`` hard-codes ``causal=True`` in its ``flash_attn_varlen_func`` call.
Patch: while ``extend_forward`` runs for non-causal metadata (full attention; the sliding
window path is left alone), the module's ``rocm_aiter_ops`` is seen through a proxy whose
``flash_attn_varlen_func`` gets ``causal=False`` - the same call the diff in
``patches/vllm/<version>/`` writes.  Causal batches and every other caller are unchanged.
"""

from __future__ import annotations

import contextvars
import functools

from dflash_rocm_plugin import ops
from dflash_rocm_plugin.hostfix import Probe
from dflash_rocm_plugin.hostfix import code as _code
from dflash_rocm_plugin.vllm.fixes import _source

FIX_ID = "vllm-aiter-fa-extend-noncausal"
MODULE = "vllm.v1.attention.backends.rocm_aiter_fa"
CALLEE = "flash_attn_varlen_func"
OPS_NAME = "rocm_aiter_ops"

_non_causal = contextvars.ContextVar("dflash_rocm_aiter_fa_non_causal", default=False)


def find_classes(module):
    backend = impl = None
    for value in vars(module).values():
        if not isinstance(value, type) or value.__module__ != module.__name__:
            continue
        if "extend_forward" in vars(value):
            impl = value
        if "supports_non_causal" in vars(value) and hasattr(value, "get_impl_cls"):
            backend = value
    return backend, impl


def probe_module(module) -> Probe:
    backend, impl = find_classes(module)
    if impl is None:
        return Probe.not_needed("ROCM_AITER_FA has no separate extend path")
    if backend is not None and not backend.supports_non_causal():
        return Probe.not_needed("ROCM_AITER_FA does not claim non-causal support")
    if _code.is_marked(impl.extend_forward):
        return Probe.not_needed("already patched")
    src = _code.source_of(impl.extend_forward)
    if src is None:
        return Probe.refuse("ROCM_AITER_FA extend_forward has no source to inspect")
    lines = _source.hardcoded_causal_calls(src, CALLEE)
    if not lines:
        return Probe.not_needed("ROCM_AITER_FA extend path passes the metadata's causal flag")
    if f"{OPS_NAME}.{CALLEE}" not in src or not hasattr(module, OPS_NAME):
        return Probe.refuse(f"extend_forward hard-codes causal=True but not through {OPS_NAME}; left alone")
    return Probe.need(f"ROCM_AITER_FA extend_forward hard-codes causal=True ({CALLEE})", (module, impl))


def probe() -> Probe:
    if not ops.on_rocm():
        return Probe.not_needed("ROCM_AITER_FA only runs on ROCm builds of torch")
    module = _code.optional_module(MODULE, broken_is_absent=True)
    if module is None:
        return Probe.not_needed("ROCM_AITER_FA is not importable here (no ROCm/AITER)")
    return probe_module(module)


class _OpsProxy:
    """``rocm_aiter_ops`` as ``extend_forward`` sees it: non-causal inside a non-causal extend."""

    def __init__(self, ops):
        self._ops = ops

    def __getattr__(self, name):
        return getattr(self._ops, name)

    def flash_attn_varlen_func(self, *args, **kwargs):
        if _non_causal.get():
            kwargs["causal"] = False
        return self._ops.flash_attn_varlen_func(*args, **kwargs)


def _full_attention(impl_self) -> bool:
    window = getattr(impl_self, "sliding_window", None)
    if window is None:
        return True
    first = window[0] if isinstance(window, (tuple, list)) else window
    return first in (-1, None)


def patch(state) -> str:
    module, impl = state
    ops = getattr(module, OPS_NAME)
    if not isinstance(ops, _OpsProxy):
        setattr(module, OPS_NAME, _OpsProxy(ops))
    original = impl.extend_forward

    @functools.wraps(original)
    def extend_forward(self, attn_metadata, *args, **kwargs):
        non_causal = getattr(attn_metadata, "causal", True) is False and _full_attention(self)
        token = _non_causal.set(non_causal)
        try:
            return original(self, attn_metadata, *args, **kwargs)
        finally:
            _non_causal.reset(token)

    impl.extend_forward = _code.mark(extend_forward, FIX_ID)
    return f"{impl.__name__}.extend_forward passes causal=False for non-causal metadata"
