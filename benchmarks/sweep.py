"""Launch-config sweep for ops.paged_attention on a GPU: tile shapes, warps, stages, KV splits.

    python benchmarks/sweep.py --out sweep.json [--deadline-s 300] [--part variants,tiles,splits]

Part 1 times every (BLOCK_N, num_warps, num_stages) on the large-batch target shapes; part 2
times KV-split counts on the small-batch shapes.  Results feed ops.forced_launch / ops.AttentionLaunch; the numbers
and the reasoning are in benchmarks/NOTES.md.  Each config is checked against a float32 device
reference before it is timed; a config that fails to compile or launch is recorded, not fatal.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time

import torch

from dflash_rocm_plugin import ops
from dflash_rocm_plugin.bench import inputs, timing
from dflash_rocm_plugin.bench.shapes import Shape


def measure(case, **forced):
    s = case.shape
    outs = [torch.full_like(case.q, float("nan")) for _ in case.block_tables]
    calls = case.plugin_calls(outs)
    with ops.forced_launch(**forced):
        try:
            calls[0]()
            torch.cuda.synchronize()
        except Exception as exc:
            return {"error": f"{type(exc).__name__}: {str(exc)[:120]}"}
        err = inputs.rel_error(outs[0], case.ref)
        if err > 2e-2:
            return {"error": f"wrong output, rel err {err:.2e}"}
        us = timing.graph_us(calls, target_ms=3.0, reps=10)
        eager = timing.eager_us(calls, reps=15)
    return {"us": us, "eager_us": eager, "tbs": s.kv_bytes() / (us * 1e-6) / 1e12, "rel_err": err}


def time_grid(rows: list, shapes, configs, stop_at: float, save) -> None:
    """Time every config on every shape into ``rows``; a config is (fields to record, launch fields,
    label).  Each shape's case is built once, checked configs share its float32 reference."""
    for shape in shapes:
        case = inputs.build(shape, torch.device("cuda"))
        case.ref = inputs.reference(case)
        for record, fields, label in configs:
            if time.time() > stop_at:
                break
            r = measure(case, **fields)
            r.update(shape=shape.label, **record)
            rows.append(r)
            print(f"{shape.label:<32} {label:<34} "
                  + (f"{r['us']:8.1f} us {r['tbs']:5.2f} TB/s (eager {r['eager_us']:.1f})" if "us" in r
                     else r["error"]), flush=True)
        save()
        del case
        torch.cuda.empty_cache()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="sweep.json")
    ap.add_argument("--deadline-s", type=float, default=300)
    ap.add_argument("--part", default="tiles,splits")
    ap.add_argument("--quick", action="store_true", help="re-time the 64/4/{2,3,4} tiles only")
    ap.add_argument("--layout", action="store_true",
                    help="shuffled vs sequential pages at the default launch, against dense SDPA")
    ap.add_argument("--split-cells", default=None, help="batch x context x page list, e.g. 8x4096x16,1x32768x1")
    ap.add_argument("--splits", default="1,2,4,8,12,16,24,32")
    ap.add_argument("--variant-cells", default=None, help="e.g. 32x16384x1xdraft,64x8192x16xverify")
    ap.add_argument("--variants", default=None, help="comma list of variant names (default: all)")
    ap.add_argument("--model", default="qwen3-8b", help="head layout of every timed shape (bench/shapes.py)")
    ap.add_argument("--kv", default="bf16", help="cache element type of the variant cells: bf16 or fp8")
    args = ap.parse_args()
    t0 = time.time()
    dev = torch.device("cuda")
    ceiling = timing.copy_ceiling_tbs(dev)
    result = {"gpu": torch.cuda.get_device_name(), "copy_ceiling_tbs": ceiling, "tiles": [], "splits": []}
    print(f"copy ceiling {ceiling:.2f} TB/s", flush=True)

    def save():
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)

    if args.layout:
        # Is page 1's gap the kernel or the memory system?  The same page-1 kernel over pages in
        # random order, in order, and in random runs of 16 (the page-16 layout read as page 1).
        from dflash_rocm_plugin.bench import peers
        sdpa = peers.torch_sdpa(None)
        result["layout"] = []
        page1_variants = [("default", {}), ("v3 p1 (asm ids; 3 stages; 64-bit)",
                                            dict(page_ids_asm=True, num_stages=3, offsets_32=False))]
        for (b, c), mode in itertools.product([(32, 16384)], ["draft", "verify"]):
            for page, layout in ((16, "shuffled"), (16, "sequential"), (1, "shuffled"), (1, "sequential"),
                                 (1, "runs of 16")):
                if time.time() - t0 > args.deadline_s * 0.5:
                    break
                shape = Shape("qwen3-8b", mode, b, c, page)
                if layout == "runs of 16":
                    case = inputs.as_page1(inputs.build(Shape("qwen3-8b", mode, b, c, 16), dev))
                else:
                    case = inputs.build(shape, dev, shuffle=layout == "shuffled")
                case.ref = inputs.reference(case)
                for name, fields in (page1_variants if page == 1 else page1_variants[:1]):
                    r = measure(case, **fields)
                    r.update(shape=shape.label, layout=layout, variant=name)
                    if name == "default":
                        calls, _ = sdpa(case)
                        r["sdpa_tbs"] = shape.kv_bytes() / (timing.graph_us(calls) * 1e-6) / 1e12
                        del calls
                    result["layout"].append(r)
                    print(f"{shape.label:<32} {layout:<11} {name:<22} plugin {r.get('tbs', 0):5.2f} TB/s"
                          + (f"  dense SDPA {r['sdpa_tbs']:5.2f} TB/s" if "sdpa_tbs" in r else ""), flush=True)
                del case
                torch.cuda.empty_cache()
        save()
    if "variants" in args.part:
        # v4: the page ids pipelined with tl.load at 4-6 stages against v3's inline ids at 3
        # stages (64-bit offsets were v3's page-1 default).  NOTES.md, "v3 -> v4".  The "g8"
        # variants are for GQA groups of 8 (--model qwen3-32b): 128-row tiles of 8 warps (one
        # program per SM) against two 64-row programs per 16-token block (K/V read twice).  With
        # one program per SM, deeper stages (S=6/7, asm S=4/5) are free in occupancy.
        variants = [
            ("v3 p1 (asm ids; 3 stages; 64-bit)", dict(page_ids_asm=True, num_stages=3, offsets_32=False)),
            ("v3 p16 (asm ids; 3 stages)", dict(page_ids_asm=True, num_stages=3)),
            ("tl ids S=5 32-bit", dict(page_ids_asm=False, num_stages=5)),
            ("tl ids S=5 64-bit", dict(page_ids_asm=False, offsets_32=False, num_stages=5)),
            ("tl ids S=4 32-bit", dict(page_ids_asm=False, num_stages=4)),
            ("tl ids S=6 32-bit", dict(page_ids_asm=False, num_stages=6)),
            ("tl ids S=7 32-bit", dict(page_ids_asm=False, num_stages=7)),
            ("asm ids S=4", dict(page_ids_asm=True, num_stages=4)),
            ("asm ids S=5", dict(page_ids_asm=True, num_stages=5)),
            # AMD (ci/rocm_validate.sh): the unmeasured gfx942/gfx950 choices and their neighbours
            ("amd S=1", dict(page_ids_asm=False, num_stages=1)),
            ("amd S=2", dict(page_ids_asm=False, num_stages=2)),
            ("amd BN32 S=2", dict(page_ids_asm=False, num_stages=2, block_n=32)),
            ("amd W8 S=1", dict(page_ids_asm=False, num_stages=1, num_warps=8)),
            ("amd ovl S=2", dict(page_ids_asm=False, num_stages=2, overlap_qk=True)),
            # Triton's own 32x32 MFMAs against the chosen 16x16 (launch_config._mfma_nonkdim)
            ("amd M32 S=1", dict(page_ids_asm=False, num_stages=1, mfma_nonkdim=32)),
            ("amd M32 S=2", dict(page_ids_asm=False, num_stages=2, mfma_nonkdim=32)),
            ("amd M16 S=1", dict(page_ids_asm=False, num_stages=1, mfma_nonkdim=16)),
            # Q K^T of tile t+1 issued before tile t's softmax (overlap_qk)
            ("ovl S=5", dict(overlap_qk=True, page_ids_asm=False, num_stages=5)),
            ("ovl S=4", dict(overlap_qk=True, page_ids_asm=False, num_stages=4)),
            ("ovl asm S=3", dict(overlap_qk=True, page_ids_asm=True, num_stages=3)),
            ("g8 rows128 BN32 S=5", dict(page_ids_asm=False, num_stages=5, block_n=32)),
            ("g8 rows128 BN32 asm S=4", dict(page_ids_asm=True, num_stages=4, block_n=32)),
            ("g8 rows64 S=5", dict(block_q=8, block_m=64, num_warps=4, page_ids_asm=False, num_stages=5)),
            ("g8 rows64 asm S=3", dict(block_q=8, block_m=64, num_warps=4, page_ids_asm=True, num_stages=3)),
            # fp8 caches (--kv fp8): twice the keys per byte, so the loop is bound by the tile chain.
            ("fp8 BN128 W4 S=3", dict(block_n=128, num_warps=4, num_stages=3)),
            ("fp8 BN128 W8 S=3", dict(block_n=128, num_warps=8, num_stages=3)),
            ("fp8 BN64 W8 S=4", dict(block_n=64, num_warps=8, num_stages=4)),
            ("fp8 BN64 W4 S=4", dict(block_n=64, num_warps=4, num_stages=4)),
            ("fp8 BN32 W4 S=5", dict(block_n=32, num_warps=4, num_stages=5)),
            ("fp8 ovl BN64 W4 S=4", dict(block_n=64, num_warps=4, num_stages=4, overlap_qk=True)),
            # 512-wide heads (--model gemma-4-global, GQA 8): the rules' tile against 16-row tiles of
            # 4 warps (v7's; 2 queries, so each K/V tile is read by 8 programs of a q16 block) and others.
            ("d512 default", {}),
            ("d512 rows32 W4", dict(block_q=4, block_m=32, num_warps=4)),
            ("d512 rows32 W8", dict(block_q=4, block_m=32, num_warps=8)),
            ("d512 rows64 W8", dict(block_q=8, block_m=64, num_warps=8)),
            ("d512 rows64 W8 BN16 S=3", dict(block_q=8, block_m=64, num_warps=8, block_n=16, num_stages=3)),
            ("d512 rows128 W8 BN16", dict(block_q=16, block_m=128, num_warps=8, block_n=16)),
            ("d512 splits32", dict(num_splits=32)),
            ("d512 rows32 W8 splits32", dict(block_q=4, block_m=32, num_warps=8, num_splits=32)),
            ("d512 rows64 W8 splits32", dict(block_q=8, block_m=64, num_warps=8, num_splits=32)),
        ]
        if args.variants:
            variants = [v for v in variants if v[0] in args.variants.split(",")]
        result["variants"] = []
        cells = [(32, 16384, 1, "draft"), (32, 16384, 1, "verify"), (64, 8192, 1, "draft"),
                 (64, 8192, 1, "verify"), (32, 16384, 16, "draft"), (64, 8192, 16, "verify"),
                 (8, 4096, 1, "verify"), (1, 32768, 1, "draft"), (8, 4096, 16, "draft")]
        if args.variant_cells:
            cells = [(int(b), int(c), int(p), m) for b, c, p, m in
                     (cell.split("x") for cell in args.variant_cells.split(","))]
        time_grid(result["variants"], [Shape(args.model, m, b, c, p, kv=args.kv) for b, c, p, m in cells],
                  [(dict(variant=name), fields, name) for name, fields in variants],
                  t0 + args.deadline_s * 0.75, save)
    if "tiles" in args.part:
        configs = list(itertools.product([64, 32, 128], [4, 8], [3, 2, 4]))
        cells = [(32, 16384, 16, "draft"), (32, 16384, 16, "verify"), (32, 16384, 1, "draft"),
                 (32, 16384, 1, "verify"), (64, 8192, 16, "draft")]
        if args.quick:
            configs = [(64, 4, 2), (64, 4, 3), (64, 4, 4)]
            cells = [(32, 16384, 16, "verify"), (32, 16384, 16, "draft"), (64, 8192, 16, "verify"),
                     (64, 8192, 1, "verify")]
        time_grid(result["tiles"], [Shape(args.model, m, b, c, p) for b, c, p, m in cells],
                  [(dict(block_n=bn, num_warps=nw, num_stages=ns), dict(block_n=bn, num_warps=nw, num_stages=ns),
                    f"BN={bn} W={nw} S={ns}") for bn, nw, ns in configs],
                  t0 + args.deadline_s * 0.7, save)
    if "splits" in args.part:
        cells = [(1, 32768, 16), (8, 4096, 16), (1, 32768, 1), (8, 4096, 1), (1, 4096, 16), (8, 16384, 16),
                 (4, 8192, 16), (16, 4096, 16)]
        if args.split_cells:
            cells = [tuple(int(x) for x in cell.split("x")) for cell in args.split_cells.split(",")]
        time_grid(result["splits"], [Shape(args.model, "draft", b, c, p) for b, c, p in cells],
                  [(dict(num_splits=n), dict(num_splits=n), f"splits={n}")
                   for n in (int(x) for x in args.splits.split(","))],
                  t0 + args.deadline_s, save)
    save()
    print(f"sweep done in {time.time() - t0:.0f} s; best per shape:", flush=True)
    for part, keys in (("tiles", ("block_n", "num_warps", "num_stages")), ("splits", ("num_splits",)),
                       ("variants", ("variant",))):
        by_shape: dict = {}
        for r in result.get(part, []):
            if "us" in r:
                by_shape.setdefault(r["shape"], []).append(r)
        for shape, rs in by_shape.items():
            rs.sort(key=lambda r: r["us"])
            top = ", ".join(f"{'/'.join(str(r[k]) for k in keys)}: {r['tbs']:.2f}" for r in rs[:4])
            print(f"  {shape:<32} {top}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
