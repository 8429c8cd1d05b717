"""AMD AITER, loaded lazily, at most once per process, behind a graph-safety version gate.

AITER is never a dependency: ROCm images build it from source, PyPI's ``amd-aiter`` is
stale, and ``import aiter`` raises on machines without ROCm.  So the import is tried only
when a ROCm call first wants an AITER kernel, its outcome (module or failure) is cached,
and each failure is reported once.

Version gate: AITER ``>= 0.1.16`` (release; ``0.1.16.devN``/``rc`` builds count as older).
  * ``mha_batch_prefill_func(..., block_table=, seqlen_k=)`` (vLLM-style 2-D block table)
    arrived with aiter PR #1754 (2026-01-13; first release v0.1.12).
  * The Triton ``flash_attn_with_kvcache`` paged path lost its ``.item()`` host syncs in
    PR #2096 (2026-03-02; first release v0.1.12) and its ``cache_seqlens.max().item()`` in
    PR #2764 (2026-06-02; first release v0.1.16).  Releases before v0.1.16 break CUDA/HIP
    graph capture, which every serving host uses, so v0.1.16 is the first trusted release.
The version comes from ``aiter.__version__`` or the ``amd-aiter`` distribution metadata;
a build that reports neither (or setuptools-scm's fallback ``0.1.0``) is treated as too old.

A kernel that raises disables only its own path (``KernelPath.disable``) for the process.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import logging
import re
import threading

logger = logging.getLogger("dflash_rocm_plugin.aiter")

MIN_VERSION = (0, 1, 16)
MIN_VERSION_TEXT = ".".join(map(str, MIN_VERSION))
DISTRIBUTION = "amd-aiter"

_lock = threading.Lock()
_load_result: tuple[object | None, str | None, str | None] | None = None  # module, version, reason
_warned: set[str] = set()


class AiterUnavailable(RuntimeError):
    """AITER was requested explicitly (``DFLASH_ROCM_*_IMPL=aiter``) but cannot run here."""


def warn_once(key: str, message: str) -> None:
    with _lock:
        if key in _warned:
            return
        _warned.add(key)
    logger.warning(message)


def parse_version(text: str) -> tuple[tuple[int, ...], bool] | None:
    """``(release, is_prerelease)`` of a PEP 440 version, or None when unparsable.

    ``0.1.16.post2+gabc`` -> ((0, 1, 16), False); ``0.1.16.dev5`` / ``0.1.16rc1`` -> ((0, 1, 16), True).
    """
    m = re.match(r"^\s*v?(\d+(?:\.\d+)*)(.*)$", str(text))
    if m is None:
        return None
    release = tuple(int(p) for p in m.group(1).split("."))
    rest = m.group(2).split("+", 1)[0].lower().lstrip(".-_")
    pre = (re.search(r"(a|alpha|b|beta|c|rc|pre|preview|dev)\d*", rest) is not None
           and not rest.startswith("post"))  # 0.1.16.post1.dev3 comes after 0.1.16
    return release, pre


def version_ok(text: str | None) -> bool:
    parsed = parse_version(text) if text else None
    if parsed is None:
        return False
    release, pre = parsed
    release = release + (0,) * (len(MIN_VERSION) - len(release))
    n = len(MIN_VERSION)
    if release[:n] != MIN_VERSION:
        return release[:n] > MIN_VERSION
    return not pre or any(release[n:])  # 0.1.16.dev5 precedes 0.1.16; 0.1.16.1.dev0 follows it


def _version_of(module) -> str | None:
    v = getattr(module, "__version__", None)
    if isinstance(v, str):
        return v
    try:
        return importlib.metadata.version(DISTRIBUTION)
    except Exception:  # noqa: BLE001 - metadata lookups fail in many ways; absence is the answer
        return None


def load() -> tuple[object | None, str | None, str | None]:
    """``(module, version, reason)``: module is None and reason says why when AITER is unusable.

    The import is attempted once per process; later calls return the cached outcome.
    """
    global _load_result
    with _lock:
        if _load_result is not None:
            return _load_result
    try:
        module = importlib.import_module("aiter")
    except Exception as exc:  # noqa: BLE001 - aiter raises RuntimeError, OSError, ... off ROCm
        result = (None, None, f"`import aiter` failed: {type(exc).__name__}: {exc}")
    else:
        version = _version_of(module)
        if not version_ok(version):
            result = (None, version, (
                f"AITER {version or '(version unknown)'} is older than {MIN_VERSION_TEXT}, the first "
                f"release whose kernels are CUDA/HIP-graph safe (aiter PRs #2096, #2764); upgrade AITER"))
        else:
            result = (module, version, None)
    with _lock:
        if _load_result is None:
            _load_result = result
        return _load_result


class KernelPath:
    """One AITER entry point (e.g. ``mha_batch_prefill_func``) and whether it may still be used."""

    def __init__(self, name: str, attr: str, env: str, fallback: str):
        self.name, self.attr, self.env, self.fallback = name, attr, env, fallback
        self.disabled_reason: str | None = None

    def resolve(self, *, forced: bool):
        """The AITER callable, or None (auto: one warning per cause).  Forced: raise instead."""
        if self.disabled_reason is not None:
            return None  # a run-time failure already fell back; its warning was given
        module, version, reason = load()
        if module is not None:
            fn = getattr(module, self.attr, None)
            if not callable(fn):
                reason = (f"AITER {version} has no `aiter.{self.attr}` (was it imported with "
                          f"AITER_TRITON_ONLY=1, or built without the CK kernels?)")
            else:
                return fn
        if forced:
            raise AiterUnavailable(
                f"{self.env}=aiter, but the AITER {self.name} kernel cannot run: {reason}. "
                f"Unset {self.env} (auto) to use {self.fallback}")
        warn_once(f"unavailable:{reason}", f"AITER {self.name} path unavailable, using {self.fallback}: {reason}")
        return None

    def disable(self, exc: BaseException) -> None:
        with _lock:
            first = self.disabled_reason is None
            if first:
                self.disabled_reason = f"raised {type(exc).__name__}: {exc}"
        if first:
            logger.warning("AITER %s (aiter.%s) raised %s: %s; disabled for this process, using %s "
                           "instead", self.name, self.attr, type(exc).__name__, exc, self.fallback)

    def status(self) -> str | None:
        """Why this path cannot be used now (None when it can), without raising or warning."""
        if self.disabled_reason is not None:
            return f"disabled after aiter.{self.attr} {self.disabled_reason}"
        module, version, reason = load()
        if module is None:
            return reason
        if not callable(getattr(module, self.attr, None)):
            return f"AITER {version} has no `aiter.{self.attr}`"
        return None
