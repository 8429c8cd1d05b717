"""Launching an already-compiled Triton kernel again without ``JITFunction.run``'s binding.

On every call ``JITFunction.run`` binds each argument, computes its specialization (pointer
alignment, integer classes), builds the compile key and looks the kernel up: tens of
microseconds for the ~70 arguments of the attention kernel, paid per layer when hosts run
attention eagerly.  A prepared launch (``ops/call_cache.py``) already fixes every dtype, integer
and constexpr argument, so the only specialization left to a repeat call is that of its pointers.
This module keys the ``CompiledKernel`` that ``JITFunction.run`` returned by what that can still
change -- each pointer's 16-byte alignment, on ROCm whether its storage fits 2 GB and whether
buffer ops are on, the current device, Triton's debug and instrumentation settings -- and launches it with the
arguments ``JITFunction.run`` passes its launcher, each tensor as its address.  A key finer than
Triton's own only means more normal launches, never another kernel.  The launches of one call
(attention and split merge) are relaunched together: one reading of the device, stream, hooks and
settings (``begin``), of the pointers' addresses, one key and one lookup.  A launch whose kernel takes
host TMA descriptors (``triton.tools.tensor_descriptor.TensorDescriptor``, built per call around the
tensors' addresses) passes them to the launcher as they are: it encodes them, and Triton's compile key
holds only their dtype and block shape, which the prepared launch fixes.

Used only on the Triton releases whose launch convention was read from their source (3.2-3.9),
never under the interpreter, and only while Triton's pre-run hooks, launch hooks and (3.7+) pass
pipeline hook are unset and the kernel's globals are unchanged; anything else, or any error, takes
the normal launch (an error also ends direct launches for the process, with one warning).
``DFLASH_ROCM_DIRECT_LAUNCH=0`` switches it off.
"""

from __future__ import annotations

import collections
import functools
import logging
import operator
import os
import re

import torch

from dflash_rocm_plugin.ops import _runtime

SWITCH = "DFLASH_ROCM_DIRECT_LAUNCH"
# The oldest and newest Triton releases whose launch path was read from their source.
READ_RELEASES = ((3, 2), (3, 9))
# Compiled variants kept per prepared launch (alignments x devices seen).
MAX_VARIANTS = 8
_INT32_MAX = 2**31 - 1
_MISSING = object()
_data_ptr = torch.Tensor.data_ptr
_Tensor = torch.Tensor
logger = logging.getLogger("dflash_rocm_plugin.launches")

# One kernel of a kept launch: the launcher (``run``), the grid, what the launcher passes the kernel, which
# pointers it takes, its other arguments, and the compiled kernel itself (from Triton 3.8 on, a collected
# one unloads its module, and with it ``function``).
Kept = collections.namedtuple("Kept", "run gx gy gz function metadata take fixed compiled")

# None: not decided yet; False: off; else the Triton facts the launches need.
_facts = None
# Why direct launches are off (None while on or undecided).
_off_reason = None


class _Facts:
    """What differs between the Triton releases: which arguments the launcher takes, where the
    launch hooks and the debug setting live."""

    def __init__(self, version: tuple[int, int]):
        from triton.runtime.driver import driver
        self.driver = driver
        # 3.2 passes only the non-constexpr arguments; 3.3-3.9 every parameter in order.
        self.all_params = version >= (3, 3)
        # 3.7+ key a kernel on the hook that adds passes to its pipeline (knobs.runtime).
        self.stages_hook = version >= (3, 7)
        # 3.9 adds the float sanitizer's cast setting to the compile options.
        self.fpsan_casts = version >= (3, 9)
        self.hook_chain = None
        if version >= (3, 4):
            from triton import knobs
            self.knobs = knobs
            self.hook_chain = getattr(knobs, "HookChain", None)
        else:
            from triton.compiler.compiler import CompiledKernel
            self.knobs = None
            self.compiled_kernel = CompiledKernel
        self.instrumentation = version >= (3, 6)
        self.rocm = _runtime.is_rocm()

    def hooks_unset(self) -> bool:
        if self.knobs is None:
            enter, leave = self.compiled_kernel.launch_enter_hook, self.compiled_kernel.launch_exit_hook
        else:
            enter, leave = self.knobs.runtime.launch_enter_hook, self.knobs.runtime.launch_exit_hook
        # 3.5+: chains of hooks, called only when they hold some.
        chain = self.hook_chain
        return ((enter is None or (type(enter) is chain and not enter.calls))
                and (leave is None or (type(leave) is chain and not leave.calls))
                and not (self.stages_hook and self.knobs.runtime.add_stages_inspection_hook is not None))

    def options(self) -> tuple:
        """The process-wide run-time settings ``JITFunction.run`` adds to the compile options (each
        kernel's own ``debug`` joins them in the key)."""
        if self.knobs is None:
            return (os.environ.get("TRITON_DEBUG", "0") == "1",)
        compilation = self.knobs.compilation
        mode = compilation.instrumentation_mode if self.instrumentation else None
        casts = compilation.fpsan_homomorphic_casts if self.fpsan_casts else None
        if self.rocm:  # ROCm specializes a pointer on its storage's size only while buffer ops are on
            return (self.knobs.runtime.debug, mode, casts,
                    getattr(getattr(self.knobs, "amd", None), "use_buffer_ops", None))
        return (self.knobs.runtime.debug, mode, casts)


def triton_release() -> tuple[str, tuple[int, int] | None]:
    """The installed Triton's version text and its (major, minor), None when unreadable."""
    import triton
    text = str(getattr(triton, "__version__", ""))
    m = re.match(r"(\d+)\.(\d+)", text)
    return text, ((int(m.group(1)), int(m.group(2))) if m else None)


def _load():
    global _facts, _off_reason
    _facts = False
    if os.environ.get(SWITCH, "1").strip().lower() in ("0", "off", "false", "no"):
        _off_reason = f"{SWITCH}={os.environ[SWITCH]}"
        return
    if _runtime.interpreting():
        _off_reason = "the Triton interpreter runs the kernels"
        return
    try:
        text, version = triton_release()
        oldest, newest = READ_RELEASES
        if version is not None and oldest <= version <= newest:
            _facts = _Facts(version)
            _off_reason = None
        else:
            known = "-".join(".".join(map(str, v)) for v in READ_RELEASES)
            _off_reason = f"Triton {text or '(unknown version)'}: its launch convention is known for {known} only"
    except Exception as exc:  # noqa: BLE001 - an unexpected Triton: the normal launch
        _off_reason = f"{type(exc).__name__}: {exc}"
        logger.info("direct Triton launches off: %s", exc)


def _stop(exc: Exception) -> None:
    global _facts, _off_reason
    _facts = False
    _off_reason = f"switched off after {type(exc).__name__}: {exc}"
    logger.warning("dflash_rocm_plugin: direct Triton launches switched off for this process after %s: %s "
                   "(every launch now goes through JITFunction.run)", type(exc).__name__, exc)


def begin():
    """What the launches of one call share: ``(facts, device, stream, options)``, or None while
    direct launches are off or Triton's launch hooks are set (then every launch is a normal one)."""
    if _facts is None:
        _load()
    facts = _facts
    if not facts:
        return None
    try:
        if not facts.hooks_unset():
            return None
        active = facts.driver.active
        device = active.get_current_device()
        return facts, device, active.get_current_stream(device), facts.options()
    except Exception as exc:  # noqa: BLE001 - whatever differs, the normal launch is right
        _stop(exc)
        return None


def _take(take, items):
    return items if take is None else take(items)


class Relauncher:
    """The prepared launches of one call -- the attention kernel, then the split merge when there is
    one -- relaunched together: one reading of the pointers' addresses, one key, one lookup."""

    __slots__ = ("variants", "descriptors")

    def __init__(self, descriptors: bool = False):
        # key -> each launch's (launcher, grid x, y, z, function, metadata, take, the arguments after
        # its pointers as the launcher takes them, the compiled kernel)
        self.variants: dict = {}
        # Whether some of the pointers are TMA descriptors (passed on as they are).
        self.descriptors = descriptors

    def __call__(self, launches: tuple, pointers: tuple) -> None:
        """Run ``launches`` in order, each ``(jit, grid, take, ints, constexprs)``: ``grid`` has three
        sizes and ``take`` (an ``operator.itemgetter`` of several indices, or None for all)
        selects the kernel's pointers from ``pointers`` (tensors)."""
        context = begin()
        key = None
        if context is not None:
            facts, device, stream, options = context
            try:
                # The launcher takes addresses as they are; given tensors it would ask each for its
                # address again and have the driver check that the GPU can reach it -- one driver
                # call per pointer and launch.  The call's validation made those checks when its key
                # was new, and every tensor's device is in that key.
                if self.descriptors:
                    addresses = tuple(_data_ptr(p) if type(p) is _Tensor else p for p in pointers)
                else:
                    addresses = tuple(map(_data_ptr, pointers))
                key = self._key(facts, device, options, launches, pointers, addresses, self.descriptors)
                kept = self.variants.get(key) if key is not None else None
                if kept is not None:
                    for run, gx, gy, gz, function, metadata, take, fixed, _ in kept:
                        run(gx, gy, gz, stream, function, metadata, None, None, None,
                            *(addresses if take is None else take(addresses)), *fixed)
                    return
            except Exception as exc:  # noqa: BLE001 - whatever differs, the normal launch is right
                _stop(exc)
                key = None
        # After a direct launch that failed part way the normal one runs every kernel again, which
        # is safe: no kernel of a call writes what an earlier one reads.
        compiled = tuple(jit[grid](*_take(take, pointers), *ints, **constexprs)
                         for jit, grid, take, ints, constexprs in launches)
        if key is not None and len(self.variants) < MAX_VARIANTS:
            try:
                self._keep(facts, launches, pointers, key, compiled)
            except Exception as exc:  # noqa: BLE001
                _stop(exc)

    @staticmethod
    def _key(facts: _Facts, device, options: tuple, launches: tuple, pointers: tuple, addresses: tuple,
             descriptors: bool = False):
        debug = ()
        for launch in launches:
            jit = launch[0]
            if jit.pre_run_hooks:
                return None
            for (name, _), (value, globals_dict) in jit.used_global_vals.items():
                now = globals_dict.get(name, _MISSING)
                if now is not value and now != value:
                    return None  # JITFunction.run raises for this
            debug += (getattr(jit, "debug", None),)
        if descriptors:  # a descriptor's base is 16-byte aligned (TensorDescriptor checks it)
            pointers = tuple(p for p in pointers if type(p) is _Tensor)
            addresses = tuple(a for a in addresses if type(a) is int)
        # Triton specializes each pointer on 16-byte alignment; all aligned is the common case.
        if functools.reduce(operator.or_, addresses, 0) & 15 == 0:
            aligned = True
        else:
            aligned = tuple(a & 15 == 0 for a in addresses)
        if facts.rocm:
            aligned = (aligned, tuple(p.untyped_storage().size() <= _INT32_MAX for p in pointers))
        return device, options, debug, aligned

    def _keep(self, facts: _Facts, launches: tuple, pointers: tuple, key, compiled: tuple) -> None:
        if not all(c is not None and not hasattr(c, "result") and hasattr(c, "packed_metadata") for c in compiled):
            return  # not a CompiledKernel (a future, a hook's answer): keep launching normally
        fixed = tuple(_fixed_arguments(jit, facts.all_params, len(_take(take, pointers)), ints, constexprs)
                      for jit, _, take, ints, constexprs in launches)
        if any(f is None for f in fixed):
            return
        # ``run`` is read now, once: the compiled kernel built its launcher at its first launch.
        self.variants[key] = tuple(Kept(c.run, *launch[1], c.function, c.packed_metadata, launch[2], f, c)
                                   for c, launch, f in zip(compiled, launches, fixed))


def _fixed_arguments(jit, all_params: bool, num_pointers: int, ints: tuple, constexprs: dict):
    """The launcher's arguments after the pointers, as ``JITFunction.run`` builds them, or None
    when the kernel's parameters are not laid out as the call passes them (positional non-constexpr
    parameters first, every constexpr by keyword)."""
    params = jit.params
    positional = num_pointers + len(ints)
    if any(p.is_constexpr for p in params[:positional]) or not all(p.is_constexpr for p in params[positional:]):
        return None
    if not all_params:
        return tuple(ints)
    signature = jit.signature.parameters
    tail = []
    for p in params[positional:]:
        if p.name in constexprs:
            tail.append(constexprs[p.name])
        else:
            default = signature[p.name].default
            if default is signature[p.name].empty:
                return None
            tail.append(default)
    return (*ints, *tail)


def enabled() -> bool:
    if _facts is None:
        _load()
    return bool(_facts)


def state() -> dict:
    """Whether repeat launches go straight to the compiled kernel, and if not why (doctor)."""
    on = enabled()
    return {"direct": on, "switch": SWITCH,
            "reason": "repeat calls launch the compiled kernel directly" if on else _off_reason}
