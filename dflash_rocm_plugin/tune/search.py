"""One bucket's search, and the rule that a tuned entry never loses to the default it replaces.

The default is what runs without the user's file (the ``auto`` policy, the shipped file, the
chooser's rules), measured in the same run on the same inputs.  An entry is written only when its
launch (and, where AITER serves the bucket, its backend) beats that default on graph replay by at
least ``MIN_GAIN`` *and* is no slower on the cache-flushed single call -- twice: once in the
sweep, once more in a confirmation round that re-times both.  A previous entry for the bucket is
one more candidate; if the default beats it now, it is dropped.
"""

from __future__ import annotations

import dataclasses
import time

from dflash_rocm_plugin import ops
from dflash_rocm_plugin.tune import space as space_mod
from dflash_rocm_plugin.tune.measure import BucketBench, Candidate, Measured, fields_of

MIN_GAIN = 0.01  # graph-replay time must drop by 1 % at least: smaller differences are run-to-run noise


@dataclasses.dataclass
class Outcome:
    label: str
    bucket: dict                      # the entry's key fields
    default: Measured | None = None
    tuned: Measured | None = None     # what the entry makes run, when one is written
    entry: dict | None = None
    decision: str = ""                # "tuned", "default kept", "skipped: ...", "failed: ..."
    tried: list = dataclasses.field(default_factory=list)
    prior_dropped: bool = False       # a previous entry for the bucket lost to the default
    prompts: list = dataclasses.field(default_factory=list)  # the prompts' own rows timed (tune_prompts)


def beats(a: Measured, b: Measured) -> bool:
    return (a.ok and b.ok and a.timing.graph_us < b.timing.graph_us * (1 - MIN_GAIN)
            and a.timing.flushed_us <= b.timing.flushed_us)


def _fastest(results) -> Measured | None:
    ok = [r for r in results if r.ok]
    return min(ok, key=lambda r: r.timing.graph_us) if ok else None


class _Sweep:
    def __init__(self, bench: BucketBench, deadline: float, progress):
        self.bench, self.deadline, self.progress = bench, deadline, progress
        self.seen: dict = {}

    def out_of_time(self) -> bool:
        return time.monotonic() > self.deadline

    def run(self, candidate: Candidate) -> Measured | None:
        key = (candidate.backend, candidate.fields)
        if key in self.seen:
            return self.seen[key]
        if self.out_of_time():
            return None
        self.progress(f"{self.bench.shape.label} {candidate.label}")
        self.seen[key] = result = self.bench.run(candidate)
        return result

    def triton(self, label: str, fields: dict) -> Measured | None:
        names = ops.TUNED_LAUNCH_FIELDS + tuple(k for k in ops.TUNED_OPTIONAL_LAUNCH_FIELDS if k in fields)
        return self.run(Candidate(label, "triton", tuple((k, fields[k]) for k in names)))

    def best_fields(self, fallback: dict) -> dict:
        best = _fastest(r for (backend, f), r in self.seen.items() if backend == "triton" and f)
        return dict(best.candidate.fields) if best else fallback


def search(bench: BucketBench, space: space_mod.Space, sweep: _Sweep, start: dict) -> None:
    """Coordinate descent from ``start`` (the default launch's fields); results land in ``sweep.seen``."""
    keys, block_n = bench.kv_keys, start["block_n"]
    counts = space_mod.split_counts(space, keys, block_n) if bench.can_split else []
    for n in counts:
        sweep.triton(f"splits={n}", dict(start, num_splits=n))
    if "block_q" in start:
        hq, hkv, _ = bench.shape.heads
        for block_q, warps in space_mod.row_choices(space, hq // hkv, bench.shape.q_len):
            sweep.triton(f"rows={block_q * hq // hkv} W={warps}", dict(start, block_q=block_q, num_warps=warps))
    best = sweep.best_fields(start)
    for bn, warps, stages in space.tiles:
        sweep.triton(f"BN={bn} W={warps} S={stages}", dict(best, block_n=bn, num_warps=warps, num_stages=stages))
    best = sweep.best_fields(start)
    for asm in space.page_ids_asm:
        for ovl in space.overlap_qk:
            for fp8 in (bench.fp8_dots if "fp8_dots" in start else (None,)):
                label, fields = f"asm={int(asm)} ovl={int(ovl)}", dict(best, page_ids_asm=asm, overlap_qk=ovl)
                if fp8 is not None:
                    label, fields["fp8_dots"] = f"{label} fp8_dots={fp8}", fp8
                sweep.triton(label, fields)
    best = sweep.best_fields(start)
    if bench.can_split:
        for n in (best["num_splits"] // 2, best["num_splits"] * 2):
            if n in counts:
                sweep.triton(f"splits={n} (again)", dict(best, num_splits=n))


def _confirmed(bench: BucketBench, winner: Measured, default: Measured) -> bool:
    """Re-time both; the winner must beat the default again."""
    again_default, again_winner = bench.run(default.candidate), bench.run(winner.candidate)
    return beats(again_winner, again_default)


def bucket_key(bench: BucketBench) -> dict:
    """The key fields of the bench's entry: head layout, dtypes, causality and bucket."""
    q, batch, context, page = bench.bucket
    return dict(heads=list(bench.shape.heads), dtype=dtype_name(bench.case.q.dtype),
                kv_cache_dtype=dtype_name(bench.case.k_cache.dtype), causal=bench.shape.causal, q=q, batch=batch,
                context=context, page=page)


def tune_bucket(bench: BucketBench, space: space_mod.Space, *, deadline: float, prior: dict | None = None,
                progress=lambda text: None) -> Outcome:
    """Search one bucket and decide its entry (``Outcome.entry``: None keeps the default).

    Entry parts: ``launch`` when the fastest forced Triton launch beats Triton's default launch;
    ``backend`` when, under ``auto``, the other backend beats what would run otherwise (AITER's
    default against the tuned Triton launch, or the reverse).
    """
    shape = bench.shape
    out = Outcome(shape.label, bucket_key(bench))
    sweep = _Sweep(bench, deadline, progress)
    with ops.tuned_sources("shipped"):  # the default a user entry replaces
        default_backend = bench.describe(backend="auto").backend
        default = out.default = sweep.run(Candidate("default", "auto"))
        if default is None:
            out.decision = "skipped: out of time"
            return out
        if not default.ok:
            out.decision = f"failed: the default launch: {default.error}"
            return _finish(out, sweep)
        start = fields_of(bench.default, rows=not bench.can_split, fp8_dots=len(bench.fp8_dots) > 1)
        if default_backend == "triton":  # the default launch, forced, is the default itself
            sweep.seen[("triton", start)] = dataclasses.replace(default, candidate=Candidate("default", "triton", start))
        aiter_serves = bench.describe(backend="aiter").backend == "aiter"
        triton_default = default if default_backend == "triton" else sweep.run(Candidate("triton default", "triton"))
        aiter = default if default_backend == "aiter" else (sweep.run(Candidate("aiter", "aiter")) if aiter_serves
                                                            else None)
        if prior and prior.get("launch"):
            sweep.triton("previous entry", prior["launch"])
        search(bench, space, sweep, dict(start))
        entry: dict = {}
        forced = _fastest(r for (b, f), r in sweep.seen.items() if b == "triton" and f)
        triton_eff = triton_default
        if forced is not None and triton_default is not None and beats(forced, triton_default) \
                and _confirmed(bench, forced, triton_default):
            entry["launch"] = dict(forced.candidate.fields)
            triton_eff = forced
        effective = triton_eff if default_backend == "triton" else default
        if default_backend == "aiter" and triton_eff is not None and beats(triton_eff, default) \
                and _confirmed(bench, triton_eff, default):
            entry["backend"], effective = "triton", triton_eff
        elif default_backend == "triton" and aiter is not None and triton_eff is not None \
                and beats(aiter, triton_eff) and _confirmed(bench, aiter, triton_eff):
            entry["backend"], effective = "aiter", aiter
    if entry:
        baseline, out.tuned, out.decision = default, effective, "tuned"
        if effective is default:  # AITER still serves auto; the launch is for Triton's calls here
            baseline, out.tuned, out.decision = triton_default, forced, "tuned (Triton launch; auto keeps AITER)"
        out.entry = dict(out.bucket, **entry, measured=_measured(baseline, out.tuned))
    else:
        out.decision = "default kept"
        out.prior_dropped = bool(prior)
    return _finish(out, sweep)


def tune_prompts(bench: BucketBench, space: space_mod.Space, *, deadline: float, paged: dict | None = None,
                 progress=lambda text: None) -> tuple[dict | None, list]:
    """Where a bucket's calls pass their prompts' own K/V rows (``bench`` built with ``own_rows``): the
    ``dense`` part of its entry, or None, and every result.  Candidates: the prompts read from the pages (at
    ``paged``, the bucket's tuned paged launch, if any) and the dense kernel at each of ``space.dense_tiles``,
    against what runs without the user's file; the winner must beat it twice, as a launch must."""
    results: list = []

    def run(candidate: Candidate) -> Measured | None:
        if time.monotonic() > deadline:
            return None
        progress(f"{bench.shape.label} prompts {candidate.label}")
        results.append(bench.run(candidate))
        return results[-1]

    with ops.tuned_sources("shipped"):
        if bench.case.new_kv is None or bench.describe(own_rows=True).dense_launch is None:
            return None, results  # the chooser keeps these prompts paged whatever the tile
        default = run(Candidate("default", "auto"))
        if default is None or not default.ok:
            return None, results
        fields = tuple(sorted((paged or {}).items()))
        run(Candidate("pages", "auto", fields, pages=True))
        for tile in space.dense_tiles:  # a tile the kernel cannot take fails the reference check, never wins
            run(Candidate("dense Q{} BN{} W{} S{}".format(*tile), "auto",
                          dense=tuple(zip(ops.TUNED_DENSE_FIELDS, tile))))
        best = _fastest(results[1:])
        if best is None or not beats(best, default) or not _confirmed(bench, best, default):
            return None, results
    part = False if best.candidate.pages else dict(best.candidate.dense)
    return {"dense": part, "measured": _measured(default, best)}, results


def with_prompts(out: Outcome, part: dict | None, tried: list) -> Outcome:
    """``out`` with the ``dense`` part of its entry (``tune_prompts``) and what that timed."""
    out.tried += tried
    out.prompts = list(tried)
    if part is None:
        return out
    entry = out.entry or dict(out.bucket)
    entry["dense"] = part["dense"]
    entry["measured"] = dict(entry.get("measured") or {}, prompts=part["measured"])
    out.entry = entry
    out.decision = "tuned (prompts)" if out.decision == "default kept" else f"{out.decision} and prompts"
    return out


def _finish(out: Outcome, sweep: _Sweep) -> Outcome:
    out.tried = list(sweep.seen.values())
    return out


def _measured(default: Measured, tuned: Measured) -> dict:
    return {"default": default.ran, "default_us": round(default.timing.graph_us, 3),
            "default_flushed_us": round(default.timing.flushed_us, 3), "tuned_us": round(tuned.timing.graph_us, 3),
            "tuned_flushed_us": round(tuned.timing.flushed_us, 3), "tuned": tuned.ran}


def dtype_name(dtype) -> str:
    return str(dtype).removeprefix("torch.")
