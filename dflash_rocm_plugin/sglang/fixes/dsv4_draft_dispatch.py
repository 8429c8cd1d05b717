"""DeepSeek-V4 draft attention on ROCm: the HIP radix backends, not the CUDA ones.

The MTP/DSpark draft of DeepSeek-V4 gets its attention from
``DraftBackendFactory._create_dsv4_decode_backend`` (multi-step decode) and
``_create_dsv4_prefill_backend`` (draft extend).  From 0.5.13.post1 they build
``DeepseekV4MultiStepBackend`` / ``DeepseekV4HipRadixBackend`` from
``deepseek_v4_backend_hip_radix`` when ``is_hip()``; 0.5.12 builds the CUDA backends everywhere and
has no HIP module (refused: see ``dsv4_hip.no_hip_backend``).

Probe: each factory method's code imports the HIP module under an ``is_hip()`` test.  Patch (an
image with the HIP module whose factory lacks that test): on ROCm the method builds the HIP
backend from the factory's own ``draft_model_runner``, ``topk`` and ``speculative_num_steps``,
returning it in the shape the method returns (a bare backend, or ``("dsv4", backend)`` as in
0.5.18+); elsewhere the host's method runs unchanged.
"""

from __future__ import annotations

import functools

from dflash_rocm_plugin import ops
from dflash_rocm_plugin.hostfix import Probe
from dflash_rocm_plugin.hostfix import code as _code
from dflash_rocm_plugin.sglang.fixes import dsv4_hip

FIX_ID = "sglang-dsv4-hip-draft-dispatch"
DRAFT_MODULE = "sglang.srt.speculative.draft_utils"
METHODS = {"_create_dsv4_decode_backend": dsv4_hip.HIP_MULTI_STEP,
           "_create_dsv4_prefill_backend": dsv4_hip.HIP_BACKEND}
_HIP_TESTS = {"is_hip", "_is_hip"}


def dispatches_to_hip(names: set[str]) -> bool:
    return dsv4_hip.HIP_MODULE in names and bool(names & _HIP_TESTS)


def probe_factory(factory, hip_module) -> Probe:
    """``factory``: the DraftBackendFactory class; ``hip_module``: the HIP radix module or None."""
    present = [m for m in METHODS if hasattr(factory, m)]
    if not present:
        return Probe.not_needed(f"{factory.__name__} builds no DeepSeek-V4 draft backend")
    if hip_module is None:
        return dsv4_hip.no_hip_backend()
    missing = sorted({METHODS[m] for m in present} - set(dir(hip_module)))
    if missing:
        return Probe.refuse(f"the HIP radix module has no {', '.join(missing)}")
    gaps, patched = [], 0
    for name in present:
        fn = getattr(factory, name)
        if _code.is_marked(fn):
            patched += 1
            continue
        names = dsv4_hip.names_in(fn)
        if names is None:
            return Probe.refuse(f"{factory.__name__}.{name} has no source to inspect")
        if dispatches_to_hip(names):
            continue
        if "draft_model_runner" not in names:
            return Probe.refuse(f"{factory.__name__}.{name} does not build from self.draft_model_runner; "
                                "left alone")
        gaps.append((factory, name, dsv4_hip.returns_pair(fn)))
    if not gaps:
        if patched:
            return Probe.not_needed("already patched")
        return Probe.not_needed(f"{factory.__name__} builds the HIP radix draft backends when is_hip()")
    where = ", ".join(f"{factory.__name__}.{g[1]}" for g in gaps)
    return Probe.need(f"{where}: the CUDA DeepSeek-V4 backend is built on ROCm too (no is_hip() dispatch)",
                      (hip_module, gaps))


def probe() -> Probe:
    draft = _code.optional_module(DRAFT_MODULE)
    factory = getattr(draft, "DraftBackendFactory", None)
    if factory is None:
        return Probe.not_needed("this sglang has no draft backend factory")
    if not any(hasattr(factory, m) for m in METHODS):
        return Probe.not_needed("this sglang has no DeepSeek-V4")
    return probe_factory(factory, _code.optional_module(dsv4_hip.HIP_MODULE))


def patch(state) -> str:
    hip_module, gaps = state
    for factory, name, pair in gaps:
        if not _code.is_marked(getattr(factory, name)):
            setattr(factory, name, _dispatching(getattr(factory, name), hip_module, name, pair))
    return "on ROCm the DeepSeek-V4 draft backends are built from " + dsv4_hip.HIP_MODULE.rsplit(".", 1)[1]


def _dispatching(original, hip_module, name: str, pair: bool):
    multi_step = METHODS[name] == dsv4_hip.HIP_MULTI_STEP

    @functools.wraps(original)
    def wrapper(self, *args, **kwargs):
        if not ops.on_rocm():
            return original(self, *args, **kwargs)
        if multi_step:
            backend = hip_module.DeepseekV4MultiStepBackend(
                self.draft_model_runner, self.topk, self.speculative_num_steps)
        else:
            backend = hip_module.DeepseekV4HipRadixBackend(self.draft_model_runner, skip_prefill=False)
        return ("dsv4", backend) if pair else backend

    return _code.mark(wrapper, FIX_ID)
