"""Tuned launches in force: the user's file over the one shipped for this architecture.

Sources, per GPU architecture (``ops.gpu_arch()``: gfx942, gfx950, sm_90, ...):

``user``     ``$DFLASH_ROCM_TUNED_CONFIGS`` when set (a ``.json`` file, or a directory holding
             ``<arch>.json``), else ``$XDG_CACHE_HOME/dflash-rocm-plugin/tuned/<arch>.json``
             (``~/.cache`` without XDG), where ``dflash-rocm tune`` writes;
``shipped``  ``dflash_rocm_plugin/ops/tuned/<arch>.json`` in the package.

A user entry replaces the shipped entry of its bucket; buckets no file names keep the chooser's
own rules.  ``DFLASH_ROCM_TUNED_CONFIGS=off`` turns every tuned file off.  Each file is read once
per process; one that cannot be used (malformed JSON, another plugin version or format, another
architecture, an unknown field) is ignored with one warning.  Lookups are a dict access on
shapes only, so graph capture and replay run the same kernels.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
from pathlib import Path

import torch

from dflash_rocm_plugin import __version__
from dflash_rocm_plugin.ops import _runtime, tuned_file

ENV = "DFLASH_ROCM_TUNED_CONFIGS"
OFF = ("off", "none", "0")
SOURCES = ("user", "shipped")  # precedence: first wins
SHIPPED_DIR = Path(__file__).with_name("tuned")

logger = logging.getLogger("dflash_rocm_plugin.launches")
# The sources consulted now (``only``); a tuple, so the cached tables below are keyed by it.
_sources: tuple[str, ...] = SOURCES


def user_path(arch: str) -> Path:
    """Where ``dflash-rocm tune`` writes, and the ``user`` source reads, unless ``$ENV`` says otherwise."""
    value = os.environ.get(ENV, "").strip()
    if value and value.lower() not in OFF:
        path = Path(value).expanduser()
        return path if path.suffix == ".json" else path / f"{arch}.json"
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")  # never raises, unlike Path.home()
    return Path(cache) / "dflash-rocm-plugin" / "tuned" / f"{arch}.json"


def _path(source: str, arch: str) -> Path:
    return user_path(arch) if source == "user" else SHIPPED_DIR / f"{arch}.json"


@functools.lru_cache(maxsize=None)
def _load(source: str, arch: str) -> tuple[str, dict, str | None]:
    """(path, table, why it is not used): read once per process; one warning when unusable."""
    path = _path(source, arch)
    if not path.is_file():
        return str(path), {}, "absent"
    try:
        table = tuned_file.parse(json.loads(path.read_text()), arch, __version__)
    except Exception as exc:  # noqa: BLE001 - whatever is in the file, a call must never fail on it
        logger.warning("ignoring the tuned launch file %s: %s", path, exc)
        return str(path), {}, f"ignored: {exc}"
    return str(path), table, None


def _off() -> bool:
    return os.environ.get(ENV, "").strip().lower() in OFF


@functools.lru_cache(maxsize=None)
def table(arch: str, sources: tuple[str, ...]) -> dict:
    """Lookup key -> Entry in force for ``arch`` from ``sources`` (the later ones overridden)."""
    if _off():
        return {}
    merged: dict = {}
    for source in reversed(sources):
        merged.update(_load(source, arch)[1])
    return merged


def current(arch: str) -> dict:
    """The table in force for ``arch`` now: a new object whenever the files or sources change."""
    return table(arch, _sources)


def lookup(arch: str, *, heads, dtype, kv_cache_dtype, causal: bool, num_tokens: int, num_seqs: int,
           max_query_len: int | None, kv_keys: int, page_size: int | None):
    """The tuned Entry for a call of these shapes, or None (the chooser's rules apply)."""
    found = current(arch)
    if not found:
        return None
    bucket = tuned_file.bucket(num_tokens=num_tokens, num_seqs=num_seqs, max_query_len=max_query_len,
                               kv_keys=kv_keys, page_size=page_size)
    return found.get(tuned_file.key(heads, dtype, kv_cache_dtype or dtype, causal, bucket))


def split_keys(arch: str) -> list[tuple]:
    """The keys in force for ``arch`` whose launch splits the keys (the workspace bound walks them)."""
    return [k for k, e in table(arch, _sources).items() if e.launch is not None and e.launch["num_splits"] > 1]


@contextlib.contextmanager
def only(*sources: str):
    """Within the block, consult only these sources (none: the chooser's own rules).  The tuner
    measures the default a new user entry would replace with ``only("shipped")``."""
    global _sources
    unknown = set(sources) - set(SOURCES)
    if unknown:
        raise ValueError(f"unknown tuned-launch sources {sorted(unknown)}; known: {SOURCES}")
    saved, _sources = _sources, tuple(s for s in SOURCES if s in sources)
    try:
        yield
    finally:
        _sources = saved


def read(path, arch: str) -> list[dict]:
    """The entries of a tuned file for ``arch``, checked as the chooser checks them (``ValueError``)."""
    doc = json.loads(Path(path).read_text())
    tuned_file.parse(doc, arch, __version__)
    return doc["entries"]


def document(arch: str, entries: list[dict], **meta) -> dict:
    """A tuned file for ``arch`` made by this plugin version (``ValueError`` on a bad entry)."""
    return tuned_file.document(arch, __version__, entries, **meta)


def status(arch: str) -> dict:
    """Which tuned files are in force for ``arch``, as facts (for doctor); never raises."""
    info = {"arch": arch, "env": ENV, "env_value": os.environ.get(ENV), "files": [], "buckets": 0}
    try:
        if _off():
            info["off"] = True
            return info
        for source in SOURCES:
            path, found, why = _load(source, arch)
            info["files"].append({"source": source, "path": path, "state": "in force" if why is None else why,
                                  "buckets": len(found)})
        info["buckets"] = len(table(arch, SOURCES))
    except Exception as exc:  # noqa: BLE001 - a report, not a failure
        info["error"] = repr(exc)
    return info


def in_force(device=None) -> dict:
    """``status`` for the architecture of ``device`` (default: the current GPU, or "cpu")."""
    try:
        arch = _runtime.gpu_arch(None if device is None else torch.device(device).index)
    except Exception as exc:  # noqa: BLE001 - a report, not a failure
        return {"arch": None, "error": repr(exc), "files": [], "buckets": 0}
    return status(arch)
