"""DeepSeek-V4 HIP radix backend: target-verify metadata built eagerly, not deferred into the graph.

The CUDA DeepSeek-V4 backend's ``init_forward_metadata_target_verify`` returns raw metadata under
``SGLANG_PREP_IN_CUDA_GRAPH`` and upgrades it inside the captured graph.  On ROCm that lazy
upgrade broke the sparse-attention planner's invariants at graph capture for DSV4 + EAGLE, so the
HIP radix backend (0.5.13.post1+) always builds the metadata eagerly through
``init_forward_metadata_target_verify_old`` (0.5.23 defers only DSpark's uniform draft block, and
not under that variable).

Probe: the HIP backend's ``init_forward_metadata_target_verify`` reads ``SGLANG_PREP_IN_CUDA_GRAPH``.
Patch: the method calls the class's eager builder with the arguments it accepts
(``seq_lens_cpu`` from ``seq_lens`` when the caller gave none), as upstream does.  Refused when
the class has no eager builder.
"""

from __future__ import annotations

import functools
import inspect

from dflash_rocm_plugin.hostfix import Probe
from dflash_rocm_plugin.hostfix import code as _code
from dflash_rocm_plugin.sglang.fixes import dsv4_hip

FIX_ID = "sglang-dsv4-hip-eager-verify-metadata"
METHOD = "init_forward_metadata_target_verify"
EAGER = "init_forward_metadata_target_verify_old"
LAZY_GATE = "SGLANG_PREP_IN_CUDA_GRAPH"


def probe_class(cls) -> Probe:
    fn = getattr(cls, METHOD, None)
    if fn is None:
        return Probe.refuse(f"{cls.__name__} has no {METHOD}")
    if _code.is_marked(fn):
        return Probe.not_needed("already patched")
    names = dsv4_hip.names_in(fn)
    if names is None:
        return Probe.refuse(f"{cls.__name__}.{METHOD} has no source to inspect")
    if LAZY_GATE not in names:
        return Probe.not_needed(f"{cls.__name__}.{METHOD} builds target-verify metadata eagerly "
                                f"(no lazy upgrade under {LAZY_GATE})")
    if not callable(getattr(cls, EAGER, None)):
        return Probe.refuse(f"{cls.__name__}.{METHOD} defers under {LAZY_GATE} and the class has no "
                            f"{EAGER} to build eagerly; left alone")
    return Probe.need(f"{cls.__name__}.{METHOD} defers target-verify metadata into the graph under "
                      f"{LAZY_GATE} (breaks the planner's invariants at graph capture on ROCm)", cls)


def probe() -> Probe:
    cls, verdict = dsv4_hip.hip_backend_class()
    return verdict if cls is None else probe_class(cls)


def patch(cls) -> str:
    if not _code.is_marked(getattr(cls, METHOD)):
        setattr(cls, METHOD, _eager(getattr(cls, METHOD), getattr(cls, EAGER)))
    return f"{cls.__name__}.{METHOD} always builds through {EAGER}"


def _eager(original, eager):
    signature = inspect.signature(original)
    accepted = list(inspect.signature(eager).parameters)[1:]

    @functools.wraps(original)
    def init_forward_metadata_target_verify(self, *args, **kwargs):
        bound = signature.bind(self, *args, **kwargs)
        bound.apply_defaults()
        call = {k: v for k, v in bound.arguments.items() if k in accepted}
        seq_lens = bound.arguments.get("seq_lens")
        if "seq_lens_cpu" in accepted and call.get("seq_lens_cpu") is None and seq_lens is not None:
            call["seq_lens_cpu"] = seq_lens.tolist()
        return getattr(self, EAGER)(**call)

    return _code.mark(init_forward_metadata_target_verify, FIX_ID)
