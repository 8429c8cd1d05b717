"""Triton backend CUDA-graph capture/replay with ``spec_info.custom_mask`` None.

The DFLASH draft (non-causal ENCODER_ONLY layers) and the DFLASH target verify pass a
``spec_info`` without a custom mask.  Before sgl-project/sglang#22342 the Triton backend's
legacy graph API (``init_forward_metadata_capture_cuda_graph`` /
``..._replay_cuda_graph``, the API of sglang <= 0.5.12) copied
``spec_info.custom_mask[: ...shape[0]]`` into its mask buffer unconditionally and crashed on
None.  Released 0.5.11/0.5.12 already carry the guard; builds from source between the DFLASH
merge (#22077) and #22342 do not.  0.5.13+ replaced the legacy API (out_graph/in_graph).

Probe: the source of the legacy methods, when they exist, reads ``custom_mask.shape``
without a None check.  Patch: such a call sees an empty view of the backend's own mask
buffer instead of None (so the copy is a no-op and nothing is allocated), and the resulting
metadata carries ``custom_mask=None`` exactly as the guarded code produces.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import inspect
import re

from dflash_rocm_plugin.hostfix import Probe
from dflash_rocm_plugin.hostfix import code as _code

FIX_ID = "sglang-triton-graph-custom-mask"
LEGACY_METHODS = ("init_forward_metadata_capture_cuda_graph", "init_forward_metadata_replay_cuda_graph")

_GUARD = re.compile(r"custom_mask[\"']?,\s*None\)\s+is\s+not\s+None|custom_mask\s+is\s+not\s+None")


def unguarded(source: str) -> bool:
    """The method dereferences spec_info.custom_mask without checking it for None."""
    return "custom_mask.shape" in source and _GUARD.search(source) is None


def probe_class(cls) -> Probe:
    present = [m for m in LEGACY_METHODS if hasattr(cls, m)]
    if not present:
        return Probe.not_needed("no legacy capture/replay API (graph metadata is built out of graph)")
    gaps = []
    for name in present:
        fn = getattr(cls, name)
        if _code.is_marked(fn):
            continue
        src = _code.source_of(fn)
        if src is None:
            return Probe.refuse(f"{cls.__name__}.{name} has no source to inspect")
        if unguarded(src):
            gaps.append((cls, name))
    if not gaps:
        return Probe.not_needed(f"{cls.__name__} legacy capture/replay already guard custom_mask None")
    return Probe.need(", ".join(f"{c.__name__}.{n} dereferences a None custom_mask" for c, n in gaps), gaps)


def probe() -> Probe:
    module = _code.optional_module("sglang.srt.layers.attention.triton_backend")
    if module is None or not hasattr(module, "TritonAttnBackend"):
        return Probe.not_needed("no Triton attention backend in this sglang")
    return probe_class(module.TritonAttnBackend)


def patch(gaps) -> str:
    for cls, name in gaps:
        setattr(cls, name, _guarded(getattr(cls, name)))
    return "custom_mask None is passed as an empty mask view and dropped from the metadata"


def _guarded(original):
    signature = inspect.signature(original)

    @functools.wraps(original)
    def wrapper(self, *args, **kwargs):
        bound = signature.bind(self, *args, **kwargs)
        spec_info = bound.arguments.get("spec_info")
        buffer = getattr(self, "cuda_graph_custom_mask", None)
        maskless = (spec_info is not None and buffer is not None
                    and getattr(spec_info, "custom_mask", None) is None)
        if maskless:
            stand_in = copy.copy(spec_info)
            stand_in.custom_mask = buffer[:0]  # a view: nothing allocated, nothing copied
            bound.arguments["spec_info"] = stand_in
        result = original(*bound.args, **bound.kwargs)
        if maskless:
            _drop_mask(self)
        return result

    return _code.mark(wrapper, FIX_ID)


def _drop_mask(backend) -> None:
    meta = getattr(backend, "forward_metadata", None)
    if meta is None or not hasattr(meta, "custom_mask"):
        return
    try:
        meta.custom_mask = None
    except (AttributeError, dataclasses.FrozenInstanceError):
        backend.forward_metadata = dataclasses.replace(meta, custom_mask=None)
