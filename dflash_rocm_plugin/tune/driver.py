"""Tune a list of buckets within a time budget and write the winners into the config file."""

from __future__ import annotations

import dataclasses
import gc
import time
from pathlib import Path

import torch

from dflash_rocm_plugin import ops
from dflash_rocm_plugin.bench import inputs
from dflash_rocm_plugin.tune import output, search, space as space_mod
from dflash_rocm_plugin.tune.measure import BucketBench, Timer


@dataclasses.dataclass
class Run:
    outcomes: list
    path: Path
    written: bool
    entries: int
    note: str | None = None   # why an existing file was replaced


def aiter_may_serve(shape, arch: str, dtype) -> bool:
    """Whether AITER may serve this bucket's calls on ``arch`` (then the search times it against Triton); an
    fp8 bucket's cache is in the GPU's own format (tune.cli)."""
    return ops.aiter_may_serve(arch, causal=shape.causal, dtype=dtype, head_dim=shape.heads[2],
                               kv_cache_dtype=ops.native_fp8_dtype(arch) if shape.kv == "fp8" else None)


def expected_candidates(shapes, arch: str, dtype, space: space_mod.Space | None = None) -> list[int]:
    """Launches the search will time per bucket (the default and confirmation rounds excluded)."""
    space = space or space_mod.space_for(arch)
    counts = []
    for shape in shapes:
        hq, hkv, d = shape.heads
        plan = ops.describe_launch(num_tokens=shape.batch * shape.q_len, num_seqs=shape.batch, num_q_heads=hq,
                                   num_kv_heads=hkv, head_dim=d, page_size=shape.page, kv_capacity=shape.context,
                                   causal=shape.causal, dtype=dtype, max_query_len=shape.q_len, backend="triton")
        can_split = ops.may_split_keys(shape.batch * shape.q_len, shape.batch, plan.launch.block_q)
        extra = 2 if aiter_may_serve(shape, arch, dtype) else 0  # AITER, and Triton's default beside it
        # An fp8 cache here is in the GPU's own format (tune.cli).
        fp8_dots = 1 if shape.kv != "fp8" else len(ops.fp8_dots_choices(
            kv_cache_dtype=ops.native_fp8_dtype(arch), dtype=dtype, causal=shape.causal, arch=arch))
        if shape.klass in space_mod.PREFILL_CLASSES and shape.q_len >= inputs.NEW_KV_MIN_QUERY:
            extra += space_mod.prompt_candidate_count(space)  # the prompts' own rows (search.tune_prompts)
        counts.append(space_mod.candidate_count(space, can_split, shape.context, plan.launch.block_n,
                                                group=hq // hkv, q_len=shape.q_len, fp8_dots=fp8_dots) + extra)
    return counts


def tune_all(shapes, *, device, arch: str, dtype, timer: Timer, out_path: Path, budget_s: float,
             space: space_mod.Space | None = None, fp8_dtype=torch.float8_e4m3fn, meta: dict | None = None,
             progress_bar: bool = True) -> Run:
    space = space or space_mod.space_for(arch)
    previous, note = output.previous_entries(out_path, arch)
    prior = {output.entry_key(e): e for e in previous}
    deadline = time.monotonic() + budget_s
    bar = output.Progress(sum(expected_candidates(shapes, arch, dtype, space)), progress_bar)
    outcomes = []
    try:
        for shape in shapes:
            if time.monotonic() > deadline:
                outcomes.append(search.Outcome(shape.label, {}, decision="skipped: out of time"))
                continue
            with ops.tuned_sources("shipped"):  # its default launch: what runs without the user's file
                bench = BucketBench(shape, device, dtype, timer, fp8_dtype=fp8_dtype)
            key = output.entry_key(search.bucket_key(bench))
            outcome = search.tune_bucket(bench, space, deadline=deadline, prior=prior.get(key), progress=bar)
            del bench
            if shape.klass in space_mod.PREFILL_CLASSES and space.dense_tiles and outcome.bucket:
                # The same bucket's prompts passed with their own K/V rows, as the hosts pass them.
                with ops.tuned_sources("shipped"):
                    rows = BucketBench(shape, device, dtype, timer, fp8_dtype=fp8_dtype, own_rows=True)
                part, tried = search.tune_prompts(rows, space, deadline=deadline,
                                                  paged=(outcome.entry or {}).get("launch"), progress=bar)
                outcome = search.with_prompts(outcome, part, tried)
                del rows
            outcomes.append(outcome)
            gc.collect()
            if torch.device(device).type == "cuda":
                torch.cuda.empty_cache()
    finally:
        bar.close()
    entries = output.merge(previous, [o for o in outcomes if o.bucket])
    changed = entries != previous or (note is not None and entries)
    if changed:
        output.write(out_path, arch, entries, meta or {})
    return Run(outcomes, out_path, bool(changed), len(entries), note)
