"""Small tools the SGLang fixes share: marking patched objects, reading sources."""

from __future__ import annotations

import importlib

from dflash_rocm_plugin.patching import MARK, is_marked, mark, source_of  # noqa: F401 (re-exported)


def optional_module(name: str):
    """The module, or None when this release does not have it."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name and (name == exc.name or name.startswith(exc.name + ".")):
            return None
        raise

