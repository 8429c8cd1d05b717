"""``dflash-rocm bench``: time ops.paged_attention on DFlash draft/verify shapes (and peers).

Bandwidth counts unique K/V bytes (every key of every sequence read once) over the median time,
and is compared with a device-to-device copy measured in the same run.  Every timed kernel's
output is first checked against a float32 device reference; a peer that disagrees is not timed.

    dflash-rocm bench                                 # default grid, plugin only
    dflash-rocm bench --peers benchmarks/.peers --save  # + peers, JSON and PNG in benchmarks/results
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import gc
import platform
import subprocess
import sys

from dflash_rocm_plugin.bench import shapes as shapes_mod

DEFAULT_MODELS = "qwen3-8b,qwen3-4b"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="dflash-rocm bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default=None,
                   help=f"comma list of {sorted(shapes_mod.MODELS)}; identical head layouts run once (default: "
                        f"{DEFAULT_MODELS} for q16, a workload's own model for the others)")
    p.add_argument("--modes", default="draft,verify", help="draft (non-causal) and/or verify (causal)")
    p.add_argument("--shapes", default=None, help="batch x context list, e.g. 32x16K,1x32K (default: grid)")
    p.add_argument("--targets-only", action="store_true", help="only the issue's target shapes")
    p.add_argument("--workload", default="q16", choices=["q16", *shapes_mod.WORKLOADS],
                   help="q16: the DFlash block (the grid above); else the target's other calls with their "
                        "goals: " + "; ".join(f"{n}: {w.about}" for n, w in shapes_mod.WORKLOADS.items()))
    p.add_argument("--pages", default=None, help="page sizes (default: 16,1 for q16, else 16)")
    p.add_argument("--peers", nargs="?", const="benchmarks/.peers", default=None, metavar="DIR",
                   help="also time peer kernels loaded from DIR (benchmarks/get_peers.sh)")
    p.add_argument("--peer-names", default=None, help="comma list of peers (default: all)")
    p.add_argument("--peer-shapes", default=None,
                   help="batch x context list the peers run on (default: the target shapes)")
    p.add_argument("--json", default=None, metavar="PATH", help="write the full record here")
    p.add_argument("--png", default=None, metavar="PATH", help="write the plot here")
    p.add_argument("--save", action="store_true",
                   help="write dated JSON and PNG into benchmarks/results/")
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16"])
    p.add_argument("--kv", default="bf16", choices=sorted(shapes_mod.KV_BYTES),
                   help="cache element type: the query dtype, or fp8 (the GPU's own format: e4m3fnuz on "
                        "gfx94x, e4m3fn elsewhere; per-tensor scales)")
    p.add_argument("--window", type=int, default=None, help="sliding window of every shape (keys)")
    p.add_argument("--sinks", action="store_true", help="attention sinks (one logit per query head)")
    p.add_argument("--q-len", type=int, default=16, help="query rows per sequence (DFlash2 blocks: 8; decode: 1)")
    p.add_argument("--pool-context", default=None, metavar="KEYS",
                   help="cache pages per sequence for this many keys (e.g. 16K), of which each call "
                        "reads its context: a short context over a long context's pool")
    p.add_argument("--force", action="append", default=[], metavar="FIELD=VALUE",
                   help="override one launch field of every plugin call (A/B of a launch choice), "
                        "e.g. --force num_stages=3 --force page_ids_asm=false")
    p.add_argument("--force-dense", action="append", default=[], metavar="FIELD=VALUE",
                   help="override one field of every dense-K/V prefill launch (ops.ExtendLaunch), "
                        "e.g. --force-dense block_n=64 --force-dense num_warps=4")
    p.add_argument("--tolerance", type=float, default=None,
                   help="largest relative error against the reference that is still timed (default: "
                        "2e-2, and 6e-2 for a launch with fp8 tensor-core dots, e.g. under DFLASH_ROCM_FP8_QK)")
    p.add_argument("--paged-only", action="store_true",
                   help="prefill and chunked prefill without their own K/V (new_keys / new_values): every "
                        "row reads the pages, as a host that does not pass them")
    p.add_argument("--no-progress", action="store_true")
    return p


def parse_forced(items: list[str], launch=None, flag: str = "--force") -> dict:
    """'--force num_stages=3 --force overlap_qk=false' -> {'num_stages': 3, 'overlap_qk': False}:
    each VALUE read as its field's type in ``launch`` (default ops.AttentionLaunch; ValueError naming a
    bad item)."""
    import dataclasses
    from dflash_rocm_plugin import ops
    types = {f.name: f.type if isinstance(f.type, str) else f.type.__name__
             for f in dataclasses.fields(launch or ops.AttentionLaunch)}
    fields = {}
    for item in items:
        name, sep, value = item.partition("=")
        name, v = name.strip(), value.strip()
        if not sep or name not in types:
            raise ValueError(f"{flag} {item!r}: expected FIELD=VALUE with FIELD one of {sorted(types)}")
        kind = types[name]
        if kind == "bool" and v.lower() in ("true", "false"):
            fields[name] = v.lower() == "true"
        elif kind == "int" and v.lstrip("-").isdigit():
            fields[name] = int(v)
        elif kind == "str" and v:
            fields[name] = v
        else:
            want = {"bool": "true or false", "int": "an integer"}.get(kind, "a name")
            raise ValueError(f"{flag} {item!r}: {name} takes {want}")
    return fields


def _progress(i: int, n: int, text: str, enabled: bool) -> None:
    if not enabled:
        return
    width = 30
    done = int(width * i / max(n, 1))
    sys.stderr.write(f"\r[{'#' * done}{'.' * (width - done)}] {i}/{n} {text[:60]:<60}")
    if i == n:
        sys.stderr.write("\n")
    sys.stderr.flush()


def _meta(torch, triton, ceiling: float) -> dict:
    props = torch.cuda.get_device_properties(0)
    try:
        driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                capture_output=True, text=True, timeout=20).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        driver = getattr(torch.version, "hip", None) or "unknown"
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "gpu": props.name, "multiprocessors": props.multi_processor_count, "driver": driver,
        "cuda": torch.version.cuda, "hip": getattr(torch.version, "hip", None),
        "torch": torch.__version__, "triton": triton.__version__, "python": platform.python_version(),
        "copy_ceiling_tbs": ceiling,
    }


def _unique_layouts(models: list[str]) -> dict:
    """Head layout -> model names sharing it (Qwen3-8B and -4B are both 32q/8kv/d128)."""
    out: dict = {}
    for m in models:
        out.setdefault(shapes_mod.MODELS[m], []).append(m)
    return out


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    from dflash_rocm_plugin import ops
    try:
        forced = args.forced = parse_forced(args.force)
        dense = args.forced_dense = parse_forced(args.force_dense, ops.ExtendLaunch, "--force-dense")
    except ValueError as exc:
        print(exc, file=sys.stderr)
        return 2
    if args.workload != "q16" and (args.shapes or args.targets_only or args.q_len != 16):
        print(f"--workload {args.workload} runs its own shapes and query lengths; --shapes, --targets-only and "
              "--q-len go with --workload q16", file=sys.stderr)
        return 2
    import torch
    if not torch.cuda.is_available():
        print("dflash-rocm bench needs a CUDA or HIP GPU; none is visible", file=sys.stderr)
        return 2
    with ops.forced_launch(**forced), ops.forced_extend(**dense):
        return run(args, torch.device("cuda", torch.cuda.current_device()))


def run(args, device) -> int:
    import torch
    import triton

    from dflash_rocm_plugin import ops
    from dflash_rocm_plugin.bench import inputs, peers as peers_mod, report, timing

    models = [m.strip() for m in (args.models or DEFAULT_MODELS).split(",") if m.strip()]
    for m in models:
        if m not in shapes_mod.MODELS:
            print(f"--models: unknown model {m!r}; supported: {sorted(shapes_mod.MODELS)}", file=sys.stderr)
            return 2
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    pages = [int(p) for p in (args.pages or ("16,1" if args.workload == "q16" else "16")).split(",")]
    layouts = _unique_layouts(models)
    if args.workload != "q16":
        work = shapes_mod.WORKLOADS[args.workload]
        layouts = _unique_layouts(models if args.models else [work.model])
        grid = [s for names in layouts.values()
                for s in work.shapes(pages, kv=args.kv, window=args.window, sinks=args.sinks, model=names[0])]
        peer_pairs = {(s.batch, s.context) for s in grid}
    else:
        if args.shapes:
            pairs = shapes_mod.parse_pairs(args.shapes)
        else:
            pairs = shapes_mod.TARGET_SHAPES if args.targets_only else shapes_mod.DEFAULT_SHAPES
        grid = []
        for names in layouts.values():
            grid += shapes_mod.grid([names[0]], modes, pairs, pages, q_len=args.q_len, kv=args.kv,
                                    window=args.window, sinks=args.sinks)
        peer_pairs = set(shapes_mod.TARGET_SHAPES)
    if args.peer_shapes:
        peer_pairs = set(shapes_mod.parse_pairs(args.peer_shapes))
    show_progress = not args.no_progress
    pool_context = None
    if args.pool_context:
        pool_context = shapes_mod.parse_pairs(f"1x{args.pool_context}")[0][1]

    ceiling = timing.copy_ceiling_tbs(device)
    meta = _meta(torch, triton, ceiling)
    meta["dtype"] = args.dtype
    if args.forced:
        meta["forced_launch"] = args.forced
    if getattr(args, "forced_dense", None):
        meta["forced_dense_launch"] = args.forced_dense
    loaded = {}
    if args.peers:
        names = args.peer_names.split(",") if args.peer_names else None
        loaded = peers_mod.load(args.peers, names)
        meta["peers"] = {n: {"what": d, "source": peers_mod.version_of(args.peers, n),
                             "loaded": not isinstance(p, str), **({"error": p} if isinstance(p, str) else {})}
                         for n, (d, p) in loaded.items()}

    rows: list[dict] = []
    jobs = len(grid) * (1 + len(loaded))
    done = 0
    for shape in grid:
        hq, hkv, d = shape.heads
        base = {"label": shape.label, "model": "/".join(layouts[shape.heads]), "mode": shape.mode,
                "causal": shape.causal, "batch": shape.batch, "context": shape.context,
                "page": shape.page, "q_len": shape.q_len, "heads": [hq, hkv, d],
                "workload": shape.workload, "kv_bytes": shape.kv_bytes(), "flop": shape.flop()}
        case = inputs.build(shape, device, dtype=getattr(torch, args.dtype), pool_context=pool_context,
                            new_kv=not args.paged_only)
        ref = inputs.reference(case, 0)
        _progress(done, jobs, f"{shape.label} plugin", show_progress)
        outs = [torch.full_like(case.q, float("nan")) for _ in case.block_tables]
        plan = ops.describe_launch(
            num_tokens=case.q.shape[0], num_seqs=shape.batch, num_q_heads=hq, num_kv_heads=hkv, head_dim=d,
            page_size=shape.page, kv_capacity=case.block_tables[0].shape[1] * shape.page, causal=shape.causal,
            dtype=case.q.dtype, max_query_len=shape.q_len, sliding_window=shape.window, sinks=shape.sinks,
            kv_cache_dtype=case.k_cache.dtype, device=device, new_kv=case.new_kv is not None)
        # Owned by the caller, as a host owns it: graph capture below never allocates.
        ws = torch.empty(plan.workspace_floats, dtype=torch.float32, device=device) if plan.workspace_floats else None

        calls = case.plugin_calls(outs, workspace=ws)
        calls[0]()
        row = dict(base, impl="plugin", copies=case.copies, rel_err=inputs.rel_error(outs[0], ref))
        row["launch"] = ({"backend": plan.backend, **{k: getattr(plan.launch, k) for k in plan.launch.__dataclass_fields__}}
                         if plan.launch is not None else {"backend": plan.backend, "reason": plan.reason})
        if plan.dense_launch is not None:
            row["launch"]["dense"] = dataclasses.asdict(plan.dense_launch)
        allowed = args.tolerance if args.tolerance is not None else inputs.tolerance(plan.launch)
        if row["rel_err"] > allowed:
            row["status"] = "WRONG (not timed)"
        else:
            row["eager_us"] = timing.eager_us(calls)
            row["flushed_us"] = timing.flushed_us(calls)
            row["time_us"] = timing.graph_us(calls)
            row["method"] = "cuda-graph"
        rows.append(row)
        done += 1
        for name, (desc, prepare) in loaded.items():
            _progress(done, jobs, f"{shape.label} {name}", show_progress)
            done += 1
            if (shape.batch, shape.context) not in peer_pairs:
                continue
            if not shape.plain and name not in peers_mod.FEATURE_PEERS:
                continue  # this peer takes no fp8 cache, window or sinks here
            prow = dict(base, impl=name)
            pcalls = pout = None
            if isinstance(prepare, str):
                prow["status"] = f"not loaded: {prepare[:160]}"
                rows.append(prow)
                continue
            try:
                pcalls, pout = prepare(case)
                pcalls[0]()
                torch.cuda.synchronize()
                pout = pout.get() if hasattr(pout, "outs") else pout
                prow["rel_err"] = inputs.rel_error(pout, ref)
                if prow["rel_err"] > (args.tolerance if args.tolerance is not None else inputs.TOLERANCE):
                    prow["status"] = "WRONG output (not timed)"
                else:
                    prow["eager_us"] = timing.eager_us(pcalls)
                    prow["flushed_us"] = timing.flushed_us(pcalls)
                    try:
                        prow["time_us"] = timing.graph_us(pcalls)
                        prow["method"] = "cuda-graph"
                    except Exception as exc:  # not capturable: its eager median stands
                        torch.cuda.synchronize()
                        prow["time_us"] = prow["eager_us"]
                        prow["method"] = f"eager (graph capture failed: {type(exc).__name__})"
            except Exception as exc:
                prow["status"] = f"failed: {type(exc).__name__}: {str(exc)[:160]}"
            rows.append(prow)
            del pcalls, pout
        del case, ref, outs, calls, ws
        gc.collect()
        torch.cuda.empty_cache()
    _progress(jobs, jobs, "done", show_progress)

    for r in rows:
        if r.get("time_us"):
            r["tbs"] = r["kv_bytes"] / (r["time_us"] * 1e-6) / 1e12
            r["tflops"] = r["flop"] / (r["time_us"] * 1e-6) / 1e12
            r["frac_ceiling"] = r["tbs"] / ceiling
        if r.get("flushed_us"):
            r["flushed_tbs"] = r["kv_bytes"] / (r["flushed_us"] * 1e-6) / 1e12
    report.speedups(rows)
    verdicts = report.targets(rows, ceiling, peers_mod.TRITON_PEERS)
    print(f"{meta['gpu']} ({meta['multiprocessors']} SMs), driver {meta['driver']}, torch {meta['torch']}, "
          f"triton {meta['triton']}, {meta['date']}")
    print(report.table(rows, ceiling))
    print(report.verdict_text(verdicts))

    json_path, png_path = args.json, args.png
    if args.save:
        stem = f"benchmarks/results/{meta['date'][:10]}-{meta['gpu'].replace(' ', '_')}"
        json_path = json_path or stem + ".json"
        png_path = png_path or stem + ".png"
    if json_path:
        report.write_json(json_path, meta, rows, verdicts)
        print(f"wrote {json_path}")
    if png_path:
        try:
            report.plot(png_path, meta, rows)
            print(f"wrote {png_path}")
        except ImportError as exc:
            print(f"no plot ({exc}); pip install matplotlib", file=sys.stderr)
    return 0
