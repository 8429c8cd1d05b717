"""``dflash-rocm tune``: measure the launch choices on this GPU and keep the ones that win.

For each shape class the hosts call (draft/verify blocks of 16 and 8 queries, decode; with
--prefill also chunked prefill and prefill), each batch x context pair and page size, it sweeps the
Triton launch (KV splits, BLOCK_N, warps, stages, and the loop flags) and, where AMD AITER serves
the bucket, the backend; every candidate is checked against a float32 reference before it is timed
(graph replay, and one call after a cache flush).  A bucket's entry is written only when it beats
the default measured in the same run, twice.  Entries go to the user's tuned file for this GPU
architecture (or --out), which the launch chooser reads at the next start.

    dflash-rocm tune                               # Qwen3-8B heads, bf16, ~30 min
    dflash-rocm tune --model qwen3-32b --prefill --budget-min 60
    dflash-rocm tune --dry-run --arch gfx942       # what it would sweep, and how long, without a GPU

Exit status: 0; 1 when a bucket's default launch failed its reference check (a bug to report);
2 on a bad argument, or without a GPU (except --dry-run).
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys

from dflash_rocm_plugin.bench import shapes as shapes_mod
from dflash_rocm_plugin.tune import space as space_mod


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="dflash-rocm tune", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="qwen3-8b", help=f"head layout of {sorted(shapes_mod.MODELS)}")
    p.add_argument("--heads", default=None, metavar="Q/KV/D", help="head layout, e.g. 32/8/128 (overrides --model)")
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16"])
    p.add_argument("--kv", default="bf16", choices=sorted(shapes_mod.KV_BYTES),
                   help="cache element type: the model dtype, or fp8 (this GPU's native e4m3 format)")
    p.add_argument("--classes", default=",".join(space_mod.DEFAULT_CLASSES),
                   help=f"comma list of {list(space_mod.CLASSES)}")
    p.add_argument("--prefill", action="store_true", help="also chunked prefill and prefill")
    p.add_argument("--shapes", default=None, help="batch x context list for every class, e.g. 32x16K,1x32K")
    p.add_argument("--pages", default=",".join(map(str, space_mod.DEFAULT_PAGES)), help="page sizes")
    p.add_argument("--budget-min", type=float, default=30.0, help="stop starting buckets after this many minutes")
    p.add_argument("--out", default=None, metavar="PATH",
                   help="config file (.json) or directory for <arch>.json (default: the user's tuned file)")
    p.add_argument("--json", nargs="?", const="-", default=None, metavar="PATH",
                   help="the full record as JSON: on stdout (instead of the table), or into PATH")
    p.add_argument("--dry-run", action="store_true", help="say what would be swept and how long, run nothing")
    p.add_argument("--arch", default=None, help="--dry-run only: the architecture to plan for (default: this GPU's)")
    p.add_argument("--no-progress", action="store_true")
    return p


def _layout(args) -> tuple[int, int, int]:
    if args.heads:
        try:
            hq, hkv, d = (int(x) for x in args.heads.split("/"))
        except ValueError:
            raise ValueError(f"--heads {args.heads!r} is not Q/KV/D, e.g. 32/8/128") from None
        if min(hq, hkv, d) < 1:
            raise ValueError(f"--heads {args.heads!r}: every count must be positive")
        from dflash_rocm_plugin import ops
        why = ops.supports(ops.AttentionSpec(head_dim=d, dtype=None, num_q_heads=hq, num_kv_heads=hkv))
        if why is not None:
            raise ValueError(f"--heads {args.heads!r}: {why}")
        return hq, hkv, d
    if args.model not in shapes_mod.MODELS:
        raise ValueError(f"--model {args.model!r} is not one of {sorted(shapes_mod.MODELS)} (or give --heads Q/KV/D)")
    return shapes_mod.MODELS[args.model]


def plan_shapes(args) -> list:
    """The buckets this invocation tunes, in order (``ValueError`` naming a bad argument)."""
    classes = [c.strip() for c in args.classes.split(",") if c.strip()]
    if args.prefill:
        classes += [c for c in space_mod.PREFILL_CLASSES if c not in classes]
    unknown = [c for c in classes if c not in space_mod.CLASSES]
    if unknown or not classes:
        raise ValueError(f"--classes {unknown or args.classes!r}: choose from {list(space_mod.CLASSES)}")
    try:
        pages = [int(p) for p in args.pages.split(",") if p.strip()]
        pairs = shapes_mod.parse_pairs(args.shapes) if args.shapes else None
    except ValueError:
        raise ValueError(f"--pages {args.pages!r} / --shapes {args.shapes!r}: integers, and BxC pairs") from None
    if not pages or min(pages) < 1:
        raise ValueError(f"--pages {args.pages!r}: page sizes >= 1")
    bad = [f"{b}x{c}" for b, c in pairs or [] if b < 1 or c < 1 or any(c % p for p in pages)]
    if bad:
        raise ValueError(f"--shapes {bad}: each context must be a positive multiple of every page size")
    return space_mod.buckets(classes, _layout(args), pages, pairs, kv=args.kv)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        shapes = plan_shapes(args)
    except ValueError as exc:
        print(f"dflash-rocm tune: {exc}", file=sys.stderr)
        return 2
    import torch

    from dflash_rocm_plugin import ops
    gpu = torch.cuda.is_available()
    if args.dry_run:
        from dflash_rocm_plugin.tune import dry_run
        return dry_run.main(args, shapes, args.arch or (ops.gpu_arch() if gpu else None))
    if args.arch:
        print("dflash-rocm tune: --arch is for --dry-run; a run tunes the GPU it runs on", file=sys.stderr)
        return 2
    if not gpu:
        print("dflash-rocm tune: no CUDA or HIP GPU is visible; it tunes the GPU it runs on "
              "(--dry-run shows what it would sweep)", file=sys.stderr)
        return 2
    return run(args, shapes, torch.device("cuda", torch.cuda.current_device()))


def run(args, shapes, device, *, timer=None, space=None, dtype=None) -> int:
    """Tune on ``device`` (the CPU only under the interpreter, with an injected timer: tests)."""
    import torch
    import triton

    from dflash_rocm_plugin import ops
    from dflash_rocm_plugin.tune import driver, measure, output
    arch = ops.gpu_arch(device.index) if device.type == "cuda" else "cpu"
    dtype = dtype or getattr(torch, args.dtype)
    fp8 = ops.native_fp8_dtype(arch)
    path = output.config_path(args.out, arch)
    name = torch.cuda.get_device_properties(device).name if device.type == "cuda" else "cpu (interpreter)"
    meta = {"device": name, "created": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "torch": torch.__version__, "triton": triton.__version__,
            "aiter": ops.kernel_paths().get("aiter", {}).get("version"),
            "tool": "dflash-rocm tune"}
    result = driver.tune_all(shapes, device=device, arch=arch, dtype=dtype, timer=timer or measure.gpu_timer,
                             out_path=path, budget_s=args.budget_min * 60, space=space, fp8_dtype=fp8, meta=meta,
                             progress_bar=not args.no_progress)
    record = output.record(result.outcomes, {**meta, "arch": arch, "config": str(path), "written": result.written,
                                              "entries": result.entries, "note": result.note})
    if args.json == "-":
        print(json.dumps(record, indent=1))
    else:
        cache = "fp8 " + str(fp8).removeprefix("torch.") if args.kv == "fp8" else "in the model dtype"
        print(f"{name} ({arch}), heads {'/'.join(map(str, shapes[0].heads))}, {str(dtype).removeprefix('torch.')}, "
              f"cache {cache}; graph-replay medians per call")
        print(output.table(result.outcomes))
        if result.note:
            print(result.note)
        print(f"{'wrote' if result.written else 'left unchanged'} {path}: {result.entries} entries")
        if args.json:
            with open(args.json, "w") as f:
                json.dump(record, f, indent=1)
    return 1 if any(o.decision.startswith("failed") for o in result.outcomes) else 0
