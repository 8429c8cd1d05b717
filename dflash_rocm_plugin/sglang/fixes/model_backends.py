"""gpt-oss and Gemma-4 server-argument checks: accept ``rocm_dflash``.

SGLang asserts a fixed attention-backend list for some model families while it resolves the
server arguments: ``GptOssForCausalLM`` in every release from 0.5.11 and the Gemma-4
architectures from 0.5.13.post1 (``ServerArgs._handle_model_specific_adjustments`` up to
0.5.18, ``arg_groups.model_hook.handle_model_specific_adjustments`` in 0.5.23).  Neither list
can be extended by a plugin, so ``--attention-backend rocm_dflash`` fails that assert for a
gpt-oss or Gemma-4 server although the backend serves their layers (sinks, sliding windows),
and refuses at start-up, with a reason, what it cannot serve.

Probe: in those functions' code, the backend-name tuple constant loaded last before the
constant that opens the family's assert message.  Patch: that constant gains ``rocm_dflash``
in the function's code object, in place (the pipeline of 0.5.23 holds the function itself, and
no source files are needed); the other families' lists are left as they are.
"""

from __future__ import annotations

import dis

from dflash_rocm_plugin import BACKEND_NAME
from dflash_rocm_plugin.hostfix import Probe
from dflash_rocm_plugin.hostfix import code as _code

FIX_ID = "sglang-model-attention-backends"

# (module, attribute path) of the functions holding the asserts
FUNCTION_TARGETS = (
    ("sglang.srt.server_args", "ServerArgs._handle_model_specific_adjustments"),
    ("sglang.srt.arg_groups.model_hook", "handle_model_specific_adjustments"),
)
# family -> how its assert message starts
FAMILIES = {
    "GptOssForCausalLM": "GptOssForCausalLM requires one of",
    "Gemma4": "Gemma4 only supports",
}


def _is_backend_names(value) -> bool:
    return (isinstance(value, tuple) and bool(value) and all(isinstance(v, str) for v in value)
            and "triton" in value)


def family_allow_lists(code) -> dict[str, tuple]:
    """Family -> the backend tuple its assert checks, for the families this code asserts on."""
    found, last = {}, None
    for ins in dis.get_instructions(code):
        if ins.opname != "LOAD_CONST":
            continue
        value = ins.argval
        if _is_backend_names(value):
            last = value
        elif isinstance(value, str):
            for family, opening in FAMILIES.items():
                if value.startswith(opening) and family not in found:
                    found[family], last = last, None  # a list serves one assert
    return found


def _resolve(module, path: str):
    owner = module
    for part in path.split("."):
        owner = getattr(owner, part)
    return owner


def probe_functions(functions) -> Probe:
    """``functions``: [(label, fn)] that may hold the asserts."""
    gaps, unreadable = [], []
    for label, fn in functions:
        lists = family_allow_lists(getattr(fn, "__wrapped__", fn).__code__)
        for family, allowed in lists.items():
            if allowed is None:
                unreadable.append(f"{family} in {label}")
            elif BACKEND_NAME not in allowed:
                gaps.append((label, fn, family, allowed))
    if unreadable:
        return Probe.refuse(
            f"the attention-backend check for {', '.join(unreadable)} keeps its list where this "
            f"fix cannot widen it; --attention-backend {BACKEND_NAME} fails that check")
    if not gaps:
        return Probe.not_needed("no gpt-oss / Gemma-4 attention-backend list without rocm_dflash")
    where = ", ".join(f"{family} in {label}" for label, _, family, _ in gaps)
    return Probe.need(f"fixed attention-backend list for {where}", gaps)


def probe() -> Probe:
    functions = []
    for module_name, path in FUNCTION_TARGETS:
        module = _code.optional_module(module_name)
        if module is None:
            continue
        try:
            functions.append((f"{module_name}.{path}", _resolve(module, path)))
        except AttributeError:
            continue
    if not functions:
        return Probe.not_needed("this sglang has no model-specific server-argument checks")
    return probe_functions(functions)


def widen(fn, allowed: tuple) -> None:
    """Replace the constant ``allowed`` in ``fn``'s code by itself plus rocm_dflash (in place)."""
    target = getattr(fn, "__wrapped__", fn)
    code = target.__code__
    consts = tuple(c + (BACKEND_NAME,) if c == allowed and type(c) is tuple else c
                   for c in code.co_consts)
    if consts != code.co_consts:
        target.__code__ = code.replace(co_consts=consts)


def patch(gaps) -> str:
    done = []
    for label, fn, family, allowed in gaps:
        widen(fn, allowed)
        done.append(f"{family} check in {label} accepts {BACKEND_NAME}")
    return "; ".join(done)
