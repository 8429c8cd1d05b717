"""Tools every runtime host fix uses: marking what was patched, reading a host's source."""

from __future__ import annotations

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
