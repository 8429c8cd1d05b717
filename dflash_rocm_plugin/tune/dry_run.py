"""``dflash-rocm tune --dry-run``: the buckets, the fields swept and the expected time, without a GPU."""

from __future__ import annotations

import json

import torch

from dflash_rocm_plugin import ops
from dflash_rocm_plugin.tune import driver, output, space as space_mod


def _values(tiles, i: int) -> str:
    return "/".join(str(v) for v in sorted({t[i] for t in tiles}))


def plan(args, shapes, arch: str | None) -> dict:
    note = None
    if arch is None:
        arch, note = "sm_90", "no GPU here: planning for sm_90 (H200); --arch gfx942 / gfx950 for MI300X / MI355X"
    space = space_mod.space_for(arch)
    dtype = getattr(torch, args.dtype)
    counts = driver.expected_candidates(shapes, arch, dtype, space)
    per_candidate = space_mod.SECONDS_PER_CANDIDATE[space_mod.family(arch)]
    seconds = [n * per_candidate + space_mod.SECONDS_PER_BUCKET for n in counts]
    budget = args.budget_min * 60
    fit = next((i for i in range(len(seconds)) if sum(seconds[:i + 1]) > budget), len(seconds))
    return {"dry_run": True, "arch": arch, "note": note, "heads": list(shapes[0].heads), "dtype": args.dtype,
            "kv": args.kv, "out": str(output.config_path(args.out, arch)), "budget_s": budget,
            "expected_s": round(sum(seconds)), "seconds_per_candidate": per_candidate, "buckets_in_budget": fit,
            "space": {"num_splits": list(space.splits), "tiles": [list(t) for t in space.tiles],
                      "page_ids_asm": list(space.page_ids_asm), "overlap_qk": list(space.overlap_qk),
                      "dense_tiles": [list(t) for t in space.dense_tiles]
                      if any(s.klass in space_mod.PREFILL_CLASSES for s in shapes) else [],
                      "backend": any(driver.aiter_may_serve(s, arch, dtype) for s in shapes),
                      "fp8_dots": {kind: list(ops.fp8_dots_choices(kv_cache_dtype=ops.native_fp8_dtype(arch),
                                                                   dtype=dtype, causal=causal, arch=arch))
                                   for kind, causal in (("draft", False), ("verify", True))}},
            "buckets": [{"label": s.label, "candidates": n} for s, n in zip(shapes, counts)]}


def text(record: dict, budget_min: float) -> str:
    sp, (hq, hkv, d) = record["space"], record["heads"]
    lines = [f"dflash-rocm tune --dry-run: {record['arch']}, heads {hq}/{hkv}/{d}, {record['dtype']}, cache "
             f"{record['kv']}" + (f" ({record['note']})" if record["note"] else ""),
             f"would write: {record['out']}",
             f"sweeps: KV splits {'/'.join(map(str, sp['num_splits']))} (blocks that may split); "
             f"{len(sp['tiles'])} tiles of BLOCK_N {_values(sp['tiles'], 0)} x warps {_values(sp['tiles'], 1)} x "
             f"stages {_values(sp['tiles'], 2)}; page_ids_asm {'/'.join(map(str, sp['page_ids_asm']))}; overlap_qk "
             f"{'/'.join(map(str, sp['overlap_qk']))}"
             + (f"; each with fp8_dots {'/'.join(sp['fp8_dots']['draft'])} (draft), "
                f"{'/'.join(sp['fp8_dots']['verify'])} (verify)" if record["kv"] == "fp8" else "")
             + ("; backend triton vs aiter where AITER serves the bucket" if sp["backend"] else "")
             + (f"; prefill prompts with their own rows: the pages vs the dense kernel at {len(sp['dense_tiles'])} "
                "tiles of " + ", ".join("Q{}xBN{} W{} S{}".format(*t) for t in sp["dense_tiles"])
                if sp["dense_tiles"] else ""),
             f"{'bucket':<28} {'candidates':>10}"]
    lines += [f"{b['label']:<28} {b['candidates']:>10}" for b in record["buckets"]]
    n, fit = len(record["buckets"]), record["buckets_in_budget"]
    lines.append(f"{n} buckets, {sum(b['candidates'] for b in record['buckets'])} candidates: about "
                 f"{record['expected_s'] / 60:.0f} min ({record['seconds_per_candidate']:g} s a candidate, "
                 f"{space_mod.SECONDS_PER_BUCKET:g} s a bucket); the budget of {budget_min:g} min covers the first "
                 f"{fit} bucket{'s' if fit != 1 else ''}")
    return "\n".join(lines)


def main(args, shapes, arch: str | None) -> int:
    record = plan(args, shapes, arch)
    if args.json == "-":
        print(json.dumps(record, indent=1))
        return 0
    print(text(record, args.budget_min))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(record, f, indent=1)
    return 0
