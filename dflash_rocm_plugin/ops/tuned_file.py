"""The tuned-launch file: one JSON document per GPU architecture, written by ``dflash-rocm tune``.

    {"format": 1, "plugin": "0.1.0", "arch": "gfx942", "device": "...", "created": "...",
     "entries": [{"heads": [32, 8, 128], "dtype": "bfloat16", "kv_cache_dtype": "bfloat16",
                  "causal": false, "q": 16, "batch": 32, "context": 16384, "page": 16,
                  "launch": {"block_n": 64, "num_warps": 4, "num_stages": 2, "num_splits": 1,
                             "page_ids_asm": false, "overlap_qk": false},
                  "backend": "triton", "measured": {...}}]}

An entry is a shape bucket (``bucket``: query rows, sequences, keys and page size, each rounded
up to a power of two, pages capped at 16) of one head layout, dtype, cache dtype and causality.
``launch`` replaces every tunable field of the Triton launch (``block_q``, the queries of a tile,
only in entries of calls whose queries span several tiles: prefill, chunked prefill); ``backend``
says which kernel the ``auto`` policy runs there; ``dense`` (prefill buckets) decides the whole prompts
of calls that pass their own K/V rows: ``false`` keeps them on the pages, an object of ``DENSE_FIELDS``
runs them in the dense-K/V kernel at those tiles (``ops/extend_launch.py``; calls without a sliding
window).  Everything is checked on reading: a file made by another plugin version or format, for
another architecture, or holding a field or value this version does not know is rejected whole
(``ValueError`` with the reason), never half-applied.
"""

from __future__ import annotations

import dataclasses
import math

import torch

from dflash_rocm_plugin.ops.workspace import MAX_SPLITS

FORMAT = 1
# The AttentionLaunch fields a tuned entry sets; the rest (padding, offsets, merge warps) stay the
# chooser's, so the workspace bound and the grid keep their shape rules.  ``block_q`` may be set
# too, and applies only where no call of the bucket may split its keys (``launch_config.may_split``).
LAUNCH_FIELDS = ("block_n", "num_warps", "num_stages", "num_splits", "page_ids_asm", "overlap_qk")
OPTIONAL_LAUNCH_FIELDS = ("block_q", "fp8_dots")
# fp8_dots values a tuned entry may choose: which dots over an fp8 cache take fp8 operands, applied only to
# calls that may run it (ops/launch_config.fp8_dots_allowed: "qk_pv_split" on gfx94x, "qk" where
# DFLASH_ROCM_FP8_QK names them).
TUNED_FP8_DOTS = ("none", "qk_split", "qk_pv_split", "qk")
# The ExtendLaunch fields a tuned ``dense`` object sets; how K/V tiles are loaded (TMA or pointers) and which
# chunks go dense stay the chooser's.
DENSE_FIELDS = ("block_m", "block_n", "num_warps", "num_stages")
BACKENDS = ("triton", "aiter")
DTYPES = ("float16", "bfloat16", "float32")
KV_CACHE_DTYPES = DTYPES + ("float8_e4m3fn", "float8_e4m3fnuz")
MAX_PAGE_BUCKET = 16  # the chooser tells page sizes apart below 16 only
_DOC_KEYS = {"format", "plugin", "arch", "device", "created", "torch", "triton", "aiter", "tool", "entries"}
_ENTRY_KEYS = {"heads", "dtype", "kv_cache_dtype", "causal", "q", "batch", "context", "page", "launch",
               "backend", "dense", "measured"}
_BUCKET_KEYS = ("q", "batch", "context", "page")


@dataclasses.dataclass(frozen=True)
class Entry:
    launch: dict | None   # LAUNCH_FIELDS -> value, or None (only the backend is tuned)
    backend: str | None   # "triton" / "aiter" for the auto policy, or None (the default)
    dense: dict | bool | None = None  # False: whole prompts stay paged; DENSE_FIELDS -> value; None: the rule


def _p2(n: int) -> int:
    return 1 if n <= 1 else 1 << (int(n) - 1).bit_length()


def bucket(*, num_tokens: int, num_seqs: int, max_query_len: int | None, kv_keys: int,
           page_size: int | None) -> tuple[int, int, int, int]:
    """(q, batch, context, page) of a call: query rows per sequence (the host's bound, else the
    mean), sequences, keys a sequence can address (after a window), page size (None: 16)."""
    rows = max_query_len if max_query_len is not None else -(-num_tokens // max(1, num_seqs))
    page = MAX_PAGE_BUCKET if page_size is None else min(MAX_PAGE_BUCKET, _p2(page_size))
    return _p2(max(1, rows)), _p2(max(1, num_seqs)), _p2(max(1, kv_keys)), page


def key(heads, dtype, kv_cache_dtype, causal: bool, buckets: tuple[int, int, int, int]) -> tuple:
    """The lookup key: (q heads, kv heads, head_dim, dtype, cache dtype, causal, *bucket)."""
    return (*heads, dtype, kv_cache_dtype, bool(causal), *buckets)


def dtype_name(dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _is_int(x, lo: int, hi: float = math.inf) -> bool:
    return type(x) is int and lo <= x <= hi


def _is_p2(x, hi: float = math.inf) -> bool:
    return _is_int(x, 1, hi) and x & (x - 1) == 0


def _launch_problem(launch) -> str | None:
    if not isinstance(launch, dict):
        return "launch is not an object"
    known = set(LAUNCH_FIELDS) | set(OPTIONAL_LAUNCH_FIELDS)
    if not set(LAUNCH_FIELDS) <= set(launch) <= known:
        unknown, missing = sorted(set(launch) - known), sorted(set(LAUNCH_FIELDS) - set(launch))
        return f"launch fields: unknown {unknown}, missing {missing}"
    checks = {"block_n": _is_p2(launch["block_n"], 256) and launch["block_n"] >= 16,
              "num_warps": launch["num_warps"] in (1, 2, 4, 8, 16) and type(launch["num_warps"]) is int,
              "num_stages": _is_int(launch["num_stages"], 1, 8),
              "num_splits": _is_int(launch["num_splits"], 1, MAX_SPLITS),
              "page_ids_asm": type(launch["page_ids_asm"]) is bool,
              "overlap_qk": type(launch["overlap_qk"]) is bool,
              **({"block_q": _is_p2(launch["block_q"], 256)} if "block_q" in launch else {}),
              **({"fp8_dots": launch["fp8_dots"] in TUNED_FP8_DOTS} if "fp8_dots" in launch else {})}
    bad = [f"{k}={launch[k]!r}" for k, ok in checks.items() if not ok]
    return f"launch values out of range: {', '.join(bad)}" if bad else None


def _dense_problem(dense) -> str | None:
    if dense is False:
        return None
    if not isinstance(dense, dict) or set(dense) != set(DENSE_FIELDS):
        return f"dense is neither false nor an object of exactly {list(DENSE_FIELDS)}"
    checks = {"block_m": _is_p2(dense["block_m"], 256) and dense["block_m"] >= 16,
              "block_n": _is_p2(dense["block_n"], 256) and dense["block_n"] >= 16,
              "num_warps": dense["num_warps"] in (1, 2, 4, 8, 16) and type(dense["num_warps"]) is int,
              "num_stages": _is_int(dense["num_stages"], 1, 8)}
    bad = [f"{k}={dense[k]!r}" for k, ok in checks.items() if not ok]
    if bad:
        return f"dense values out of range: {', '.join(bad)}"
    if dense["block_n"] > dense["block_m"]:  # the kernel's diagonal starts at a multiple of both
        return f"dense block_n {dense['block_n']} exceeds block_m {dense['block_m']}"
    return None


def _entry_problem(e) -> str | None:
    if not isinstance(e, dict):
        return "an entry is not an object"
    if set(e) - _ENTRY_KEYS:
        return f"unknown entry fields {sorted(set(e) - _ENTRY_KEYS)}"
    missing = sorted((_ENTRY_KEYS - {"launch", "backend", "dense", "measured"}) - set(e))
    if missing:
        return f"entry without {missing}"
    heads = e["heads"]
    if not (isinstance(heads, list) and len(heads) == 3 and all(_is_int(h, 1) for h in heads)
            and heads[0] % heads[1] == 0):
        return f"heads {heads!r} is not [q heads, kv heads, head_dim] with q a multiple of kv"
    if e["dtype"] not in DTYPES or e["kv_cache_dtype"] not in KV_CACHE_DTYPES:
        return f"dtype {e['dtype']!r} / kv_cache_dtype {e['kv_cache_dtype']!r} unknown"
    if type(e["causal"]) is not bool:
        return f"causal {e['causal']!r} is not a bool"
    for name in _BUCKET_KEYS:
        if not _is_p2(e[name], MAX_PAGE_BUCKET if name == "page" else math.inf):
            return f"{name} {e[name]!r} is not a bucket (a power of two{', <= 16' if name == 'page' else ''})"
    if e.get("launch") is None and e.get("backend") is None and e.get("dense") is None:
        return "an entry sets none of launch, backend and dense"
    if e.get("launch") is not None and (why := _launch_problem(e["launch"])):
        return why
    if e.get("dense") is not None and (why := _dense_problem(e["dense"])):
        return why
    if e.get("backend") is not None and e["backend"] not in BACKENDS:
        return f"backend {e['backend']!r} is not one of {BACKENDS}"
    if "measured" in e and not isinstance(e["measured"], dict):
        return "measured is not an object"
    return None


def parse(doc, arch: str, version: str) -> dict[tuple, Entry]:
    """Lookup key -> Entry of a loaded document; ``ValueError`` saying why it cannot be used."""
    if not isinstance(doc, dict):
        raise ValueError("not a JSON object")
    if doc.get("format") != FORMAT:
        raise ValueError(f"format {doc.get('format')!r}, this plugin reads format {FORMAT}")
    if doc.get("plugin") != version:
        raise ValueError(f"made by dflash-rocm-plugin {doc.get('plugin')!r}, this is {version}; "
                         "re-run `dflash-rocm tune`")
    if doc.get("arch") != arch:
        raise ValueError(f"made for {doc.get('arch')!r}, this GPU is {arch}")
    if set(doc) - _DOC_KEYS:
        raise ValueError(f"unknown fields {sorted(set(doc) - _DOC_KEYS)}")
    if not isinstance(doc.get("entries"), list):
        raise ValueError("entries is not a list")
    table: dict[tuple, Entry] = {}
    for i, e in enumerate(doc["entries"]):
        why = _entry_problem(e)
        if why:
            raise ValueError(f"entry {i}: {why}")
        k = key(tuple(e["heads"]), getattr(torch, e["dtype"]), getattr(torch, e["kv_cache_dtype"]), e["causal"],
                tuple(e[b] for b in _BUCKET_KEYS))
        if k in table:
            raise ValueError(f"entry {i}: a second entry for the same bucket")
        launch = None if e.get("launch") is None else dict(e["launch"])
        dense = e.get("dense")
        table[k] = Entry(launch, e.get("backend"), dict(dense) if isinstance(dense, dict) else dense)
    return table


def document(arch: str, version: str, entries: list[dict], **meta) -> dict:
    """A document ``parse`` accepts (``ValueError`` if an entry is not one)."""
    doc = {"format": FORMAT, "plugin": version, "arch": arch, **meta, "entries": list(entries)}
    parse(doc, arch, version)
    return doc
