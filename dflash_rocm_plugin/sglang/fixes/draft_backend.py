"""DFLASH draft attention backend: accept ``rocm_dflash``; on ROCm, default to it.

SGLang 0.5.11-0.5.18 check the DFLASH draft backend against a tuple literal inside a
function (``DFlashWorker.__init__`` in 0.5.11-0.5.13.post1, ``DFlashWorkerV2.__init__`` in
0.5.14, ``speculative_hook._resolve_dflash_draft_attention_backend`` in 0.5.15-0.5.18, plus
the module tuple ``draft_worker_common._SUPPORTED_DRAFT_BACKENDS`` in 0.5.16-0.5.18).  Any
other name is replaced by ``triton`` (ROCm) or ``flashinfer`` with a warning, so
``--attention-backend rocm_dflash`` would silently leave the draft elsewhere.  0.5.20
made the list extensible (``add_draft_attention_backend_choices``, sgl-project/sglang#35932),
which the adapter uses; there this fix is not needed.

Probe: the allow-list tuple constant in those functions' code, and the module tuple.
Patch: the tuple constant in the function's code object gains ``rocm_dflash`` (the code is
otherwise untouched, so it works without source files); the module tuple is rebound.  On
ROCm, when ``rocm_dflash`` is registered, a draft backend that is unset or that the
allow-list would reject (``trtllm_mha`` cannot run the draft's non-causal attention) is set
to ``rocm_dflash`` before the host resolves it, with one warning naming the reason.
"""

from __future__ import annotations

import functools
import logging

from dflash_rocm_plugin import BACKEND_NAME, ops
from dflash_rocm_plugin.hostfix import Probe
from dflash_rocm_plugin.hostfix import code as _code

logger = logging.getLogger("dflash_rocm_plugin.host_fixes")

FIX_ID = "sglang-dflash-draft-backend"

# (module, attribute path, True when the function's first argument is the worker `self`)
FUNCTION_TARGETS = (
    ("sglang.srt.speculative.dflash_worker", "DFlashWorker.__init__", True),
    ("sglang.srt.speculative.dflash_worker_v2", "DFlashWorkerV2.__init__", True),
    ("sglang.srt.arg_groups.speculative_hook", "_resolve_dflash_draft_attention_backend", False),
)
MODULE_TUPLES = (("sglang.srt.speculative.draft_worker_common", "_SUPPORTED_DRAFT_BACKENDS"),)

_warned: set[str] = set()


def is_allow_list(value) -> bool:
    """A tuple constant that is the draft allow-list (and not some other tuple of names)."""
    return (isinstance(value, tuple) and all(isinstance(v, str) for v in value)
            and "flashinfer" in value and "triton" in value)


def allow_lists(code) -> list[tuple]:
    return [c for c in code.co_consts if is_allow_list(c)]


def _resolve(obj, path: str):
    owner = obj
    parts = path.split(".")
    for part in parts[:-1]:
        owner = getattr(owner, part)
    return owner, parts[-1], getattr(owner, parts[-1])


def probe_objects(functions, module_tuples) -> Probe:
    """``functions``: [(owner, name, fn, takes_self)]; ``module_tuples``: [(module, name)]."""
    gaps = []
    for owner, name, fn, takes_self in functions:
        original = getattr(fn, "__wrapped__", fn)
        lists = allow_lists(original.__code__)
        if any(BACKEND_NAME not in lst for lst in lists):
            gaps.append(("code", owner, name, fn, takes_self))
        elif lists and not _code.is_marked(fn):
            gaps.append(("wrap", owner, name, fn, takes_self))
    for module, name in module_tuples:
        value = getattr(module, name)
        if is_allow_list(value) and BACKEND_NAME not in value:
            gaps.append(("tuple", module, name, value, None))
    if not gaps:
        return Probe.not_needed("no private DFLASH draft allow-list without rocm_dflash")
    where = ", ".join(f"{getattr(g[1], '__name__', g[1])}.{g[2]}" for g in gaps)
    return Probe.need(f"private DFLASH draft allow-list in {where}", gaps)


def probe() -> Probe:
    choices = _code.optional_module("sglang.srt.arg_groups.choices")
    if choices is not None and hasattr(choices, "add_draft_attention_backend_choices"):
        return Probe.not_needed(
            "draft allow-list is extensible (add_draft_attention_backend_choices); "
            "the adapter registers rocm_dflash there")
    functions, module_tuples = [], []
    for module_name, path, takes_self in FUNCTION_TARGETS:
        module = _code.optional_module(module_name)
        if module is None:
            continue
        try:
            owner, name, fn = _resolve(module, path)
        except AttributeError:
            continue
        functions.append((owner, name, fn, takes_self))
    for module_name, name in MODULE_TUPLES:
        module = _code.optional_module(module_name)
        if module is not None and hasattr(module, name):
            module_tuples.append((module, name))
    if not functions and not module_tuples:
        return Probe.not_needed("this sglang has no DFLASH draft worker")
    return probe_objects(functions, module_tuples)


def widen_code(fn) -> None:
    """Add rocm_dflash to every allow-list constant of ``fn``'s code (in place, idempotent)."""
    code = fn.__code__
    consts = tuple(c + (BACKEND_NAME,) if is_allow_list(c) and BACKEND_NAME not in c else c
                   for c in code.co_consts)
    if consts != code.co_consts:
        fn.__code__ = code.replace(co_consts=consts)


def patch(gaps) -> str:
    done = []
    for kind, owner, name, value, takes_self in gaps:
        if kind == "tuple":
            setattr(owner, name, tuple(value) + (BACKEND_NAME,))
            done.append(f"{owner.__name__}.{name} += rocm_dflash")
            continue
        original = getattr(value, "__wrapped__", value)
        widen_code(original)
        if not _code.is_marked(value):
            setattr(owner, name, _with_rocm_default(original, takes_self))
        done.append(f"{getattr(owner, '__name__', owner)}.{name} accepts rocm_dflash")
    return "; ".join(done)


def _with_rocm_default(original, takes_self: bool):
    allowed = next(iter(allow_lists(original.__code__)), (BACKEND_NAME,))

    @functools.wraps(original)
    def wrapper(*args, **kwargs):
        server_args = kwargs.get("server_args")
        if server_args is None:
            index = 1 if takes_self else 0
            server_args = args[index] if len(args) > index else None
        previous = getattr(server_args, "speculative_draft_attention_backend", None)
        changed = server_args is not None and default_on_rocm(server_args, allowed)
        try:
            return original(*args, **kwargs)
        finally:
            # The worker resolves on a deep copy; give the caller's args back unchanged.
            # The 0.5.15+ arg hook stores its own resolution, which must stay.
            if changed and takes_self:
                server_args.speculative_draft_attention_backend = previous

    return _code.mark(wrapper, FIX_ID)


def _backend_registered() -> bool:
    try:
        from sglang.srt.layers.attention.attention_registry import ATTENTION_BACKENDS
    except Exception:  # noqa: BLE001
        return False
    return BACKEND_NAME in ATTENTION_BACKENDS


def draft_default_reason(requested: str | None, inherited: str | None, allowed) -> str | None:
    """Why the draft should move to rocm_dflash on ROCm, or None to leave the host's choice."""
    effective = requested or inherited
    if effective is None:
        return "no draft attention backend is set"
    if effective == "trtllm_mha":
        return "'trtllm_mha' cannot run the DFLASH draft's non-causal attention"
    if effective in allowed or effective == BACKEND_NAME:
        return None
    source = "requested" if requested else "inherited from the target"
    return f"{effective!r} ({source}) cannot run the DFLASH draft (allowed: {', '.join(allowed)})"


def default_on_rocm(server_args, allowed, *, on_rocm=None, registered=None) -> bool:
    """Set the draft backend to rocm_dflash when the host would otherwise fall back."""
    on_rocm = ops.on_rocm() if on_rocm is None else on_rocm
    registered = _backend_registered() if registered is None else registered
    if not (on_rocm and registered):
        return False
    requested = getattr(server_args, "speculative_draft_attention_backend", None)
    inherited = (getattr(server_args, "prefill_attention_backend", None)
                 or getattr(server_args, "attention_backend", None))
    reason = draft_default_reason(requested, inherited, tuple(allowed))
    if reason is None:
        return False
    server_args.speculative_draft_attention_backend = BACKEND_NAME
    if reason not in _warned:
        _warned.add(reason)
        logger.warning("dflash_rocm_plugin: DFLASH draft attention on ROCm: %s; using '%s' "
                       "(non-causal paged attention)", reason, BACKEND_NAME)
    return True
