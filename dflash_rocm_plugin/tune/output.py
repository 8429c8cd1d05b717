"""The tuner's products: the merged config file, the default-vs-tuned table, the JSON record."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from dflash_rocm_plugin import ops

_KEY = ("heads", "dtype", "kv_cache_dtype", "causal", "q", "batch", "context", "page")


def entry_key(entry: dict) -> tuple:
    return tuple(tuple(entry[k]) if k == "heads" else entry[k] for k in _KEY)


def config_path(out: str | None, arch: str) -> Path:
    """``--out``: a ``.json`` file, or a directory that gets ``<arch>.json``; default the user file."""
    if out is None:
        return ops.tuned_user_path(arch)
    path = Path(out).expanduser()
    return path if path.suffix == ".json" else path / f"{arch}.json"


def previous_entries(path: Path, arch: str) -> tuple[list[dict], str | None]:
    """The entries already in ``path`` (kept unless this run replaces or beats them), and why none."""
    if not path.is_file():
        return [], None
    try:
        return ops.read_tuned_file(path, arch), None
    except (OSError, ValueError) as exc:
        return [], f"{path} is not a usable tuned file for {arch} ({exc}); it will be replaced"


def merge(previous: list[dict], outcomes) -> list[dict]:
    """Previous entries, with each tuned bucket's new entry, and without those the default beat."""
    by_key = {entry_key(e): e for e in previous}
    for o in outcomes:
        k = entry_key(o.bucket)
        if o.entry is not None:
            by_key[k] = o.entry
        elif o.prior_dropped:
            by_key.pop(k, None)
    return [by_key[k] for k in sorted(by_key, key=str)]


def write(path: Path, arch: str, entries: list[dict], meta: dict) -> None:
    """Atomically: a reader never sees half a file."""
    doc = ops.tuned_document(arch, entries, **meta)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    os.replace(tmp, path)


def _us(m) -> str:
    return f"{m.timing.graph_us:9.1f} us" if m is not None and m.ok else f"{'-':>12}"


def _what(m) -> str:
    return "" if m is None else m.ran


def _prompts_kept(timed) -> str:
    """What a bucket's prompts timed where the chooser's path for them won: that path, the pages, and the
    fastest other dense tile (on a GPU whose rules were measured elsewhere, the comparison itself is news)."""
    default, others = timed[0], [m for m in timed[1:] if m.ok]
    if not default.ok:
        return ""
    text = f"; prompts kept: {default.ran.rpartition('; prompts ')[2]} {default.timing.graph_us:.1f} us"
    pages = next((m for m in others if m.candidate.pages), None)
    if pages is not None:
        text += f", pages {pages.timing.graph_us:.1f} us"
    dense = [m for m in others if not m.candidate.pages and m.ran != default.ran]
    if dense:
        best = min(dense, key=lambda m: m.timing.graph_us)
        text += f", best other {best.candidate.label} {best.timing.graph_us:.1f} us"
    return text


def table(outcomes) -> str:
    """Default vs tuned per bucket (graph-replay medians; the tuned column only where an entry is written)."""
    lines = [f"{'bucket':<28} {'default':>12} {'tuned':>12} {'gain':>7}  decision / default launch -> tuned"]
    for o in outcomes:
        m = (o.entry or {}).get("measured") or {}
        # against the launch it replaces
        gain = f"{m['default_us'] / m['tuned_us']:6.2f}x" if "default_us" in m else " " * 7
        tail = o.decision
        if o.default is not None:
            tail += f"; {_what(o.default)}"
        if o.tuned is not None:
            tail += f" -> {_what(o.tuned)}"
        if "prompts" in m:  # the prompts' own rows: dense kernel or pages
            p = m["prompts"]
            tail += (f"; with the prompts' rows {p['default_us']:.1f} us -> {p['tuned_us']:.1f} us "
                     f"({p['default']} -> {p['tuned']})")
        elif o.prompts:
            tail += _prompts_kept(o.prompts)
        tuned = _us(o.tuned) if o.tuned is not None else " " * 12
        lines.append(f"{o.label:<28} {_us(o.default)} {tuned} {gain}  {tail}")
    return "\n".join(lines)


def record(outcomes, meta: dict) -> dict:
    def measured(m):
        if m is None:
            return None
        return {"label": m.candidate.label, "backend": m.candidate.backend, "launch": m.candidate.launch,
                "dense": dict(m.candidate.dense) or None, "pages": m.candidate.pages,
                "ran": m.ran, "graph_us": m.timing.graph_us if m.ok else None,
                "flushed_us": m.timing.flushed_us if m.ok else None, "rel_err": m.rel_err, "error": m.error}
    return {**meta, "buckets": [{"label": o.label, "bucket": o.bucket, "decision": o.decision,
                                 "default": measured(o.default), "tuned": measured(o.tuned), "entry": o.entry,
                                 "tried": [measured(m) for m in o.tried]} for o in outcomes]}


class Progress:
    """A one-line bar on stderr: candidates timed of those expected, and the time left."""

    def __init__(self, total: int, enabled: bool):
        self.total, self.enabled, self.done, self.t0 = max(1, total), enabled, 0, time.monotonic()

    def __call__(self, text: str) -> None:
        self.done += 1
        if not self.enabled:
            return
        frac = min(1.0, self.done / self.total)
        left = (time.monotonic() - self.t0) / max(frac, 1e-9) * (1 - frac)
        bar = "#" * int(30 * frac)
        sys.stderr.write(f"\r[{bar:<30}] {self.done}/{self.total} ~{left / 60:4.1f} min left  {text[:56]:<56}")
        sys.stderr.flush()

    def close(self) -> None:
        if self.enabled:
            sys.stderr.write("\n")
