"""Tools every runtime host fix uses: marking what was patched, reading a host's code."""

from __future__ import annotations

import importlib
import inspect
import textwrap

MARK = "__dflash_rocm_fix__"


def is_marked(obj) -> bool:
    return bool(getattr(obj, MARK, False))


def mark(obj, fix_id: str):
    setattr(obj, MARK, fix_id)
    return obj


def source_of(obj) -> str | None:
    """Dedented source of a host function or class, or None when it is not available."""
    try:
        return textwrap.dedent(inspect.getsource(obj))
    except (OSError, TypeError):
        return None


def optional_module(name: str, *, broken_is_absent: bool = False):
    """The module, or None when this release does not have it.

    A module that exists but fails to import raises, unless ``broken_is_absent`` (ROCm-only
    modules fail in many ways on other machines; there they cannot run, so they need no fix).
    """
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name and (name == exc.name or name.startswith(exc.name + ".")):
            return None
        if broken_is_absent:
            return None
        raise
    except Exception:  # noqa: BLE001
        if broken_is_absent:
            return None
        raise
