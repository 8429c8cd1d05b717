"""Say so when a platform plugin overrides ``--attention-backend rocm_dflash``.

vLLM asks the current platform which backend class a layer gets
(``Platform.get_attn_backend_cls(selected_backend, ...)``).  vLLM's own ROCm platform returns the
selected backend once its validation passes; an out-of-tree platform (a ``vllm.platform_plugins``
entry such as AMD's ATOM, whose ``RocmPlatform`` subclass routed attention to its own AITER
backend) may return something else, and the user's choice would then be dropped without a word.
So the selection step is watched: when a layer asked for ``rocm_dflash`` and the platform answered
another class, one warning per process names the platform (and the plugin distribution it comes
from) and what to do.  The selection itself is never changed.
"""

from __future__ import annotations

import functools
import logging

from dflash_rocm_plugin import switches
from dflash_rocm_plugin.vllm.names import BACKEND_PATH, is_plugin_backend

logger = logging.getLogger("dflash_rocm_plugin.vllm")

_MARK = "_dflash_rocm_selection_check"
PLATFORM_PLUGINS_GROUP = "vllm.platform_plugins"
# Platform plugins known to take over backend selection, and their own off switch.
OFF_SWITCHES = {"atom": "ATOM_DISABLE_VLLM_PLUGIN=1"}


def install() -> None:
    """Watch ``vllm.v1.attention.selector._cached_get_attn_backend`` (once per process)."""
    from vllm.v1.attention import selector

    original = selector._cached_get_attn_backend
    if getattr(original, _MARK, False):
        return

    @functools.wraps(original)
    def checked(*args, **kwargs):
        chosen = original(*args, **kwargs)
        requested = kwargs["backend"] if "backend" in kwargs else (args[0] if args else None)
        if is_plugin_backend(requested):
            message = takeover_message(chosen)
            if message:
                switches.log_once(logger, "vllm", message)
        return chosen

    for name in ("cache_clear", "cache_info"):  # vLLM's tests reset the selection cache
        if hasattr(original, name):
            setattr(checked, name, getattr(original, name))
    setattr(checked, _MARK, True)
    selector._cached_get_attn_backend = checked


def _path(obj) -> str:
    return f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', obj)}"


def platform_plugin(platform_cls) -> tuple[str, str | None] | None:
    """``(entry-point name, distribution)`` of the platform plugin that provides ``platform_cls``, or
    None for one of vLLM's own platforms."""
    top = platform_cls.__module__.split(".")[0]
    if top == "vllm":
        return None
    from importlib.metadata import entry_points
    for ep in entry_points(group=PLATFORM_PLUGINS_GROUP):
        if ep.value.split(":")[0].split(".")[0] == top:
            return ep.name, ep.dist.name if ep.dist is not None else None
    return top, None


def takeover_message(chosen) -> str | None:
    """The warning for a layer that asked for rocm_dflash and got ``chosen`` instead (None if it got it)."""
    if _path(chosen) == BACKEND_PATH:
        return None
    from vllm.platforms import current_platform

    platform_cls = type(current_platform)
    plugin = platform_plugin(platform_cls)
    head = (f"dflash_rocm_plugin: --attention-backend {switches.ENTRY_POINT} was selected, but the platform "
            f"{_path(platform_cls)}")
    if plugin is None:
        return (f"{head} (vLLM's own) chose {_path(chosen)} for a layer instead: this platform does not honour "
                f"--attention-backend, so {switches.ENTRY_POINT} does not run here")
    name, dist = plugin
    source = f"the {PLATFORM_PLUGINS_GROUP} entry '{name}'" + (f" of the distribution '{dist}'" if dist else "")
    top = platform_cls.__module__.split(".")[0]
    own_switch = f"{OFF_SWITCHES[top]} or " if top in OFF_SWITCHES else ""
    return (f"{head} from {source} took over backend selection and chose {_path(chosen)} for a layer, so "
            f"{switches.ENTRY_POINT} does NOT run. To use {switches.ENTRY_POINT}, turn that platform plugin off "
            f"({own_switch}leave '{name}' out of VLLM_PLUGINS, e.g. VLLM_PLUGINS={switches.ENTRY_POINT}); to keep "
            f"it, drop --attention-backend {switches.ENTRY_POINT}")
