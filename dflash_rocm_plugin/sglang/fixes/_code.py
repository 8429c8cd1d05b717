"""Small tools the SGLang fixes share: marking patched objects, reading sources."""

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


def optional_module(name: str):
    """The module, or None when this release does not have it."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name and (name == exc.name or name.startswith(exc.name + ".")):
            return None
        raise


def source_of(obj) -> str | None:
    try:
        return textwrap.dedent(inspect.getsource(obj))
    except (OSError, TypeError):
        return None
