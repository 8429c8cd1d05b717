"""One launch field forced against the chosen launch, or another version of the attention kernel
against this one, interleaved in one process.

    python benchmarks/launch_ab.py --workload prefill --force heavy_first=false [--model qwen3-32b]
        [--kv fp8] [--rounds 5] [--json ab.json]
    git show REV:dflash_rocm_plugin/kernels/paged_attention.py > /tmp/other.py
    python benchmarks/launch_ab.py --workload gqa8 --other-kernel /tmp/other.py
    python benchmarks/launch_ab.py --workload prefill --force-dense block_n=64 [--force-dense num_stages=2]

With ``--force-dense`` (ops.ExtendLaunch fields) the prompts carry their own K/V rows, as the hosts pass
them, so their work goes to the dense-K/V prefill kernel and its launch is the one compared.
With ``--other-kernel`` both sides take the chosen launch (or the ``--force`` fields); the "forced"
side runs the kernels of that file, which must take the same arguments as this tree's (printed as
"this" and "other"; the JSON keeps the keys "chosen" and "forced" for them).

Separate bench invocations differ by 1-3 % from process to process, as much as many launch
choices are worth.  Here each shape is built once and its plugin calls are timed with the chosen
launch and with the forced fields alternately, round by round (CUDA-graph replay of back-to-back
calls, ``timing.graph_us``); each side is checked against the float32 device reference first.
FLOP/s for workloads with a whole-context query (prefill, chunked), unique-KV TB/s otherwise.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib.util
import json
import statistics
import sys

import torch

from dflash_rocm_plugin import ops
from dflash_rocm_plugin.ops import _runtime
from dflash_rocm_plugin.bench import inputs, timing
from dflash_rocm_plugin.bench.cli import parse_forced
from dflash_rocm_plugin.bench.shapes import WORKLOADS


def _load_kernels(path: str):
    """The kernels module of another version of ``kernels/paged_attention.py`` (its own module name)."""
    spec = importlib.util.spec_from_file_location("dflash_rocm_plugin.kernels._other_paged_attention", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@contextlib.contextmanager
def _forcing(fields: dict, dense_fields: dict):
    """Launch fields forced for the paged kernel and the dense-K/V prefill kernel meanwhile."""
    with ops.forced_launch(**fields), ops.forced_extend(**dense_fields):
        yield


@contextlib.contextmanager
def _kernels_of(module):
    """Calls launch ``module``'s kernels meanwhile (prepared launches notice the kernel objects change)."""
    saved = _runtime.kernels()
    _runtime._kernels = (module, saved[1])
    try:
        yield
    finally:
        _runtime._kernels = saved


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workload", choices=sorted(WORKLOADS), required=True)
    p.add_argument("--force", action="append", default=[], metavar="FIELD=VALUE")
    p.add_argument("--force-dense", action="append", default=[], metavar="FIELD=VALUE",
                   help="an ops.ExtendLaunch field of the dense-K/V prefill kernel (prompts then carry their own K/V)")
    p.add_argument("--other-kernel", default=None, metavar="FILE",
                   help="a paged_attention.py whose kernels the second side runs (same arguments as this tree's)")
    p.add_argument("--model", default=None, help="heads of this bench model instead of the workload's")
    p.add_argument("--kv", choices=("bf16", "fp8"), default="bf16",
                   help="cache element type: the query dtype, or fp8 (the GPU's own format)")
    p.add_argument("--window", type=int, default=None, help="a sliding window over every shape")
    p.add_argument("--sinks", action="store_true", help="attention sinks on every shape")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("launch_ab.py needs a GPU", file=sys.stderr)
        return 2
    if not args.force and not args.force_dense and not args.other_kernel:
        p.error("give --force FIELD=VALUE, --force-dense FIELD=VALUE, --other-kernel FILE, or a mix")
    if args.force_dense and args.other_kernel:
        p.error("--other-kernel swaps the paged kernel only: not with --force-dense")
    forced = parse_forced(args.force) if args.force else {}
    forced_dense = parse_forced(args.force_dense, ops.ExtendLaunch, "--force-dense") if args.force_dense else {}
    this = _runtime.kernels()[0]
    kernels = {"chosen": this, "forced": _load_kernels(args.other_kernel) if args.other_kernel else this}
    workload = WORKLOADS[args.workload]
    shapes = workload.shapes((16,), kv=args.kv, window=args.window, sinks=args.sinks)
    if args.model:
        shapes = [dataclasses.replace(s, model=args.model) for s in shapes]
    dev = torch.device("cuda")
    rows = []
    for shape in shapes:
        # Paged launches are compared unless the dense kernel's are: a prompt's own rows send its work there.
        case = inputs.build(shape, dev, new_kv=bool(forced_dense))
        ref = inputs.reference(case, 0)
        hq, hkv, d = shape.heads
        sides = {"chosen": {} if not args.other_kernel else forced, "forced": forced}
        dense_sides = {"chosen": {}, "forced": forced_dense}
        plans = {}
        for name, fields in sides.items():
            with _forcing(fields, dense_sides[name]):
                plans[name] = ops.describe_launch(
                    num_tokens=case.q.shape[0], num_seqs=shape.batch, num_q_heads=hq, num_kv_heads=hkv, head_dim=d,
                    page_size=shape.page, kv_capacity=case.block_tables[0].shape[1] * shape.page,
                    causal=shape.causal, dtype=case.q.dtype, max_query_len=shape.q_len, sliding_window=shape.window,
                    sinks=shape.sinks, kv_cache_dtype=case.k_cache.dtype, device=dev, new_kv=bool(case.new_kv))
        # Owned by the caller, as a host owns it: graph capture never allocates.
        floats = max(plan.workspace_floats for plan in plans.values())
        ws = torch.empty(floats, dtype=torch.float32, device=dev) if floats else None
        outs = [torch.full_like(case.q, float("nan")) for _ in case.block_tables]
        calls = case.plugin_calls(outs, workspace=ws)
        times, errors = {name: [] for name in sides}, {}
        for name, fields in sides.items():
            with _forcing(fields, dense_sides[name]), _kernels_of(kernels[name]):
                calls[0]()
                torch.cuda.synchronize()
                errors[name] = inputs.rel_error(outs[0], ref)
        for _ in range(args.rounds):
            for name, fields in sides.items():
                with _forcing(fields, dense_sides[name]), _kernels_of(kernels[name]):
                    times[name].append(timing.graph_us(calls, target_ms=3.0, reps=10))
        row = dict(shape=shape.label, forced=forced, forced_dense=forced_dense, other_kernel=args.other_kernel,
                   rel_error=errors,
                   launches={name: dataclasses.asdict(plan.launch) for name, plan in plans.items()},
                   dense_launches={name: plan.dense_launch and dataclasses.asdict(plan.dense_launch)
                                   for name, plan in plans.items()})
        for name in sides:
            us = statistics.median(times[name])
            rate = (shape.flop() / (us * 1e-6) / 1e12 if shape.q_len > 16
                    else shape.kv_bytes() / (us * 1e-6) / 1e12)
            row[name] = dict(us=us, rate=rate, rounds_us=times[name])
        row["forced / chosen"] = row["forced"]["rate"] / row["chosen"]["rate"]
        unit = "TFLOP/s" if shape.q_len > 16 else "TB/s"
        a, b = ("this", "other") if args.other_kernel else ("chosen", "forced")
        print(f"{shape.label:<40} {a} {row['chosen']['rate']:8.2f}  {b} {row['forced']['rate']:8.2f} {unit}"
              f"  ratio {row['forced / chosen']:.3f}  (spread {min(times['chosen']):.1f}-{max(times['chosen']):.1f}"
              f" / {min(times['forced']):.1f}-{max(times['forced']):.1f} us; err {errors['chosen']:.1e} /"
              f" {errors['forced']:.1e})", flush=True)
        rows.append(row)
        del case, ref, outs, calls, ws
        torch.cuda.empty_cache()
    if args.json:
        import triton
        meta = dict(device=torch.cuda.get_device_name(), torch=torch.__version__, triton=triton.__version__,
                    workload=args.workload, model=args.model or workload.model, kv=args.kv)
        with open(args.json, "w") as f:
            json.dump(dict(meta=meta, rows=rows), f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
