"""``register()``: make ``rocm_dflash`` a vLLM attention backend name, in every process.

vLLM runs ``vllm.general_plugins`` entry points in the front-end, engine-core and every
worker process, possibly many times, so this must be cheap, idempotent and never raise.

Why the CUSTOM slot: vLLM pickles ``VllmConfig`` into spawned / Ray processes *before*
plugins load there, and enum members pickle by value.  A member added at runtime
(``AttentionBackendEnum.register``) cannot be unpickled in such a process; the built-in
``CUSTOM`` member (value ``None``) always can.  So the plugin class is registered as the
``CUSTOM`` override and ``ROCM_DFLASH`` is added as a *name alias* of ``CUSTOM``: every
parser upper-cases the user's string and looks it up by name, so ``rocm_dflash`` (any case)
resolves to ``CUSTOM``; each process's own ``register()`` points ``CUSTOM`` at the class
again before any model is built.
"""

from __future__ import annotations

import logging

from dflash_rocm_plugin import switches
from dflash_rocm_plugin.vllm.names import BACKEND_ENUM_NAME, BACKEND_PATH

logger = logging.getLogger("dflash_rocm_plugin.vllm")
# (major, minor) releases whose internals this adapter is written and tested against.
SUPPORTED_VERSIONS = ((0, 32), (0, 33), (0, 34))
SUPPORTED_RANGE = ">=0.32,<0.35"

_registered = False


def host_version() -> str:
    """The installed vLLM's version string (a separate function so tests can fake it)."""
    from vllm import __version__
    return __version__


def version_supported(version: str) -> bool:
    from packaging.version import InvalidVersion, Version
    try:
        return Version(version).release[:2] in SUPPORTED_VERSIONS
    except InvalidVersion:
        return False


def register() -> None:
    """Entry point ``vllm.general_plugins: rocm_dflash``.  Never raises."""
    global _registered
    if _registered:
        return
    try:
        switches.warn_misread(logger, "vllm")
        if switches.disabled():
            switches.log_once(logger, "vllm", switches.disabled_message("vllm"))
            _registered = True
            return
        version = host_version()
        if not version_supported(version):
            if not switches.untested_host_allowed():
                switches.log_once(logger, "vllm", switches.refused_host_message("vllm", version, SUPPORTED_RANGE))
                _registered = True
                # The host fixes repair vLLM's own ROCm backends, which older releases need most.
                _run_optional("host_fixes", "apply")
                return
            switches.log_once(logger, "vllm", switches.untested_host_message("vllm", version, SUPPORTED_RANGE))
        _register_backend()
        from dflash_rocm_plugin.vllm import draft_backend, selection_check
        draft_backend.install()
        selection_check.install()
    except Exception as exc:  # vLLM does not catch exceptions raised by general plugins
        logger.warning("dflash_rocm_plugin: registering rocm_dflash with vLLM failed: %r", exc)
        return
    _registered = True
    _warn_if_kernels_cannot_run()
    _run_optional("host_fixes", "apply")


def _warn_if_kernels_cannot_run() -> None:
    # Registered anyway: selecting the backend then fails at vLLM's validation with this reason.
    try:
        from dflash_rocm_plugin import ops
        problem = ops.platform_problem()
    except Exception as exc:  # noqa: BLE001
        problem = repr(exc)
    if problem:
        logger.warning("dflash_rocm_plugin: rocm_dflash is registered but its kernels cannot run here: %s", problem)


def _run_optional(module: str, func: str) -> None:
    try:
        import importlib
        getattr(importlib.import_module(f"dflash_rocm_plugin.vllm.{module}"), func)()
    except Exception as exc:
        logger.warning("dflash_rocm_plugin: %s.%s() failed: %r", module, func, exc)


def _register_backend() -> None:
    from vllm.v1.attention.backends.registry import AttentionBackendEnum, register_backend

    members = AttentionBackendEnum._member_map_
    existing = members.get(BACKEND_ENUM_NAME)
    if existing is not None and existing.is_overridden() and existing.get_path() == BACKEND_PATH:
        return  # this process already did it (e.g. a forked child)
    custom = AttentionBackendEnum.CUSTOM
    custom_free = not custom.is_overridden() or custom.get_path() == BACKEND_PATH
    if custom_free and existing in (None, custom):
        register_backend(custom, BACKEND_PATH)
        members[BACKEND_ENUM_NAME] = custom
        logger.info("dflash_rocm_plugin: attention backend rocm_dflash registered (vLLM CUSTOM slot)")
        return
    if existing is None and hasattr(AttentionBackendEnum, "register"):
        # Another plugin holds CUSTOM: a runtime member works with fork, not with spawn/Ray.
        register_backend(BACKEND_ENUM_NAME, BACKEND_PATH)
        logger.warning(
            "dflash_rocm_plugin: vLLM's CUSTOM attention slot is taken by %s; rocm_dflash was "
            "registered as a new backend name, which does not survive spawned workers: set "
            "VLLM_WORKER_MULTIPROC_METHOD=fork", custom.get_path())
        return
    raise RuntimeError(
        f"cannot register rocm_dflash: the name {BACKEND_ENUM_NAME} is taken by {existing!r} and the "
        f"CUSTOM slot by {custom.get_path() if custom.is_overridden() else None!r}")



def allow_list() -> list[str] | None:
    """``VLLM_PLUGINS`` as vLLM's plugin loader reads it: the names it loads, None when unset (all)."""
    import vllm.envs as envs
    return envs.VLLM_PLUGINS


def check_registered() -> tuple[bool, str]:
    """(registered, detail) after vLLM's own plugin loading, for ``dflash-rocm doctor``."""
    from vllm.plugins import load_general_plugins
    load_general_plugins()
    from vllm.v1.attention.backends.registry import AttentionBackendEnum
    member = AttentionBackendEnum._member_map_.get(BACKEND_ENUM_NAME)
    if member is None:
        return False, f"{BACKEND_ENUM_NAME} is not an AttentionBackendEnum name after plugin loading"
    path = member.get_path() if hasattr(member, "get_path") else member.value
    if path != BACKEND_PATH:
        return False, f"{BACKEND_ENUM_NAME} resolves to {path!r}, not the plugin"
    return True, f"--attention-backend rocm_dflash -> {member.name} -> {path}"
