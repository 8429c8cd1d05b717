"""DeepSeek-V4 HIP radix backend: each multi-step draft step bakes its own ``out_cache_loc`` slice.

An EAGLE/MTP draft of ``speculative_num_steps`` steps allocates one ``out_cache_loc`` buffer of
``batch * topk * steps`` slots for all steps.  DeepSeek-V4 bakes the KV write target (the c4/c128
compressors, the SWA store) into its metadata, so each per-step backend must take its step's
slice, ``eagle_utils.per_step_draft_out_cache_loc(...)[speculative_step_id]``, both in
``init_forward_metadata`` (decode) and in ``init_forward_metadata_in_graph`` (recorded into the
graph).  Without it the step's metadata covers every step's slots: the shape assertion of the
decode builder fails, or wrong KV slots are written.  0.5.13.post1+ slice in both.

Probe: each entry point's code, with the class's methods it calls on ``self``, reads
``out_cache_loc`` without calling ``per_step_draft_out_cache_loc``.  Patch: for a multi-step draft
decode batch whose ``out_cache_loc`` still holds every step's slots, the entry point runs with
``forward_batch.out_cache_loc`` set to this step's slice (the caller's tensor is put back
afterwards).  Refused when one entry point slices and the other does not (the patched one would
hand an already sliced buffer to the other), when the class has no per-step backends, or when
the host has no ``per_step_draft_out_cache_loc`` (the draft worker's slot layout).
"""

from __future__ import annotations

import functools
import inspect

from dflash_rocm_plugin.hostfix import Probe
from dflash_rocm_plugin.hostfix import code as _code
from dflash_rocm_plugin.sglang.fixes import dsv4_hip

FIX_ID = "sglang-dsv4-hip-draft-step-cache-loc"
ENTRIES = ("init_forward_metadata", "init_forward_metadata_in_graph")
HELPER_MODULE = "sglang.srt.speculative.eagle_utils"
HELPER = "per_step_draft_out_cache_loc"


def reach(cls, entry: str) -> set[str] | None:
    """The names ``entry`` reads, with those of the methods it calls on ``self`` (not the other entry)."""
    names, seen, todo = set(), set(), [entry]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        fn = getattr(cls, name, None)
        if not inspect.isfunction(fn):
            continue
        found = dsv4_hip.names_in(fn)
        if found is None:
            if name == entry:
                return None
            continue
        names |= found
        todo.extend(c for c in dsv4_hip.self_calls(fn) if c not in ENTRIES)
    return names


def entry_state(cls, entry: str) -> str | None:
    """'slices', 'bakes' (reads out_cache_loc unsliced), 'patched', 'absent', or None (no source)."""
    fn = getattr(cls, entry, None)
    if fn is None:
        return "absent"
    if _code.is_marked(fn):
        return "patched"
    names = reach(cls, entry)
    if names is None:
        return None
    if HELPER in names:
        return "slices"
    return "bakes" if "out_cache_loc" in names else "absent"


def probe_class(cls, helper) -> Probe:
    """``cls``: the HIP radix backend; ``helper``: the host's per_step_draft_out_cache_loc or None."""
    states = {e: entry_state(cls, e) for e in ENTRIES}
    unread = [e for e, s in states.items() if s is None]
    if unread:
        return Probe.refuse(f"{cls.__name__}.{unread[0]} has no source to inspect")
    gaps = [e for e, s in states.items() if s == "bakes"]
    if not gaps:
        if "patched" in states.values():
            return Probe.not_needed("already patched")
        return Probe.not_needed(f"{cls.__name__} gives each draft step its out_cache_loc slice ({HELPER})")
    where = ", ".join(f"{cls.__name__}.{e}" for e in gaps)
    gap = f"{where}: the whole multi-step draft out_cache_loc is baked in, not this step's slice"
    if "slices" in states.values():
        return Probe.refuse(f"{gap}, while the other entry point slices it; left alone")
    if "speculative_step_id" not in inspect.signature(cls.__init__).parameters:
        return Probe.refuse(f"{gap}, and {cls.__name__} has no per-step draft backends (speculative_step_id)")
    if helper is None:
        return Probe.refuse(f"{gap}, and this sglang has no {HELPER} (the draft worker's slot layout)")
    return Probe.need(gap, (cls, gaps, helper))


def probe() -> Probe:
    cls, verdict = dsv4_hip.hip_backend_class()
    if cls is None:
        return verdict
    utils = _code.optional_module(HELPER_MODULE)
    return probe_class(cls, getattr(utils, HELPER, None))


def patch(state) -> str:
    cls, gaps, helper = state
    for entry in gaps:
        if not _code.is_marked(getattr(cls, entry)):
            setattr(cls, entry, _per_step(getattr(cls, entry), helper))
    return f"{', '.join(gaps)} see this draft step's out_cache_loc slice"


def step_slice(backend, forward_batch, helper):
    """This step's slice of a multi-step draft decode's shared out_cache_loc, or None to leave it."""
    loc = getattr(forward_batch, "out_cache_loc", None)
    topk = getattr(backend, "topk", 0) or 0
    steps = getattr(backend, "speculative_num_steps", 0) or 0
    if loc is None or topk <= 0 or steps <= 1 or not forward_batch.forward_mode.is_decode_or_idle():
        return None
    batch = forward_batch.batch_size
    if loc.shape[0] != batch * topk * steps:
        return None  # already one step's slots
    return helper(loc, batch, topk, steps)[backend.speculative_step_id]


def _per_step(original, helper):
    @functools.wraps(original)
    def wrapper(self, forward_batch, *args, **kwargs):
        step = step_slice(self, forward_batch, helper)
        if step is None:
            return original(self, forward_batch, *args, **kwargs)
        shared = forward_batch.out_cache_loc
        forward_batch.out_cache_loc = step
        try:
            return original(self, forward_batch, *args, **kwargs)
        finally:
            forward_batch.out_cache_loc = shared

    return _code.mark(wrapper, FIX_ID)
