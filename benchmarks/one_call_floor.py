"""What one call after the bench's cache flush can reach at all: the floor under the one-call figures.

    python benchmarks/one_call_floor.py [--json floor.json] [--reps 25]

The bench's one-call timing (``bench.timing.flushed_us``) overwrites 1 GB before each call, which
leaves the L2 full of dirty lines: the call's first reads evict them, and their write-back shares
HBM with the call's own reads.  For the byte counts the q16 one-call goals are read against
(Qwen3-8B KV of 8 x 4K and 1 x 4K: 134 MB and 17 MB), this times in one process

* two plain streaming reads of as many bytes: ``torch.sum`` over a bf16 tensor, and a Triton kernel
  whose programs (four per multiprocessor) each sum strided 16 KB chunks,
* the plugin's q16 verify and draft of that shape (page 16, shuffled pages), and a batch-1 decode
  (q1 1 x 4K); each batch-1 call also with the split counts of ``--splits-1x4k`` forced, and with
  its split merge in 4 warps,

each three ways: back-to-back (CUDA-graph replay, the bench's main figure), one call after the
bench's flush (dirty L2), and one call after the flush and a 1 GB read of another buffer, which
writes the dirty lines back before the call (clean, cold L2).  TB/s count the KV bytes (the reads
are sized to them), so the plugin's one-call figure can be read against the reads'.  For the
plugin's rows the profiler also divides the dirty one-call time between its two kernels (the
attention and, with split KV, the merge); the rest is the gap between them.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys

import torch
import triton
import triton.language as tl

from dflash_rocm_plugin.bench import timing
from host_cost import eager_call  # this folder: the scripts run as ``python benchmarks/<name>.py``


@triton.jit
def _stream_read(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    step = tl.num_programs(0) * BLOCK
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(pid * BLOCK, n, step):
        offs = start + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + offs, mask=offs < n, other=0.0).to(tl.float32)
    tl.store(out_ptr + pid, tl.sum(acc, axis=0))


def stream_read(x: torch.Tensor, partial: torch.Tensor) -> None:
    _stream_read[(partial.numel(),)](x, partial, x.numel(), BLOCK=8192, num_warps=8)


def clean_one_call_us(fn, reps: int) -> float:
    """``flushed_us`` with the flush's dirty lines written back before the call: a cold, clean L2."""
    dirty = torch.empty(timing.FLUSH_BYTES // 4, dtype=torch.float32, device="cuda")
    other = torch.ones(timing.FLUSH_BYTES // 4, dtype=torch.float32, device="cuda")
    fn()
    times = []
    for _ in range(reps):
        dirty.zero_()
        other.sum()  # reads evict the dirty lines: they are written back now, not during the call
        torch.cuda._sleep(timing.HOLD_CYCLES)
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e3)
    return statistics.median(times)


def kernel_us(fn, reps: int) -> dict:
    """Mean GPU time of each of the plugin's kernels in one call after the (dirty) flush, from the
    profiler: how the one-call time divides between the attention and the split merge."""
    from torch.profiler import ProfilerActivity, profile

    dirty = torch.empty(timing.FLUSH_BYTES // 4, dtype=torch.float32, device="cuda")
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            dirty.zero_()
            torch.cuda._sleep(timing.HOLD_CYCLES)
            fn()
        torch.cuda.synchronize()
    found = {}
    for event in prof.key_averages():
        for name in ("paged_attention_kernel", "merge_splits_kernel"):
            if name in event.key:
                total = getattr(event, "device_time_total", None) or event.cuda_time_total
                found[name] = total / max(1, event.count)
    return found


def rows(reps: int, extra_splits: tuple[int, ...]) -> list[dict]:
    from dflash_rocm_plugin import ops

    device = torch.device("cuda")
    found = []
    for batch, context, mode, q_len in ((8, 4096, "verify", 16), (8, 4096, "draft", 16), (1, 4096, "verify", 16),
                                        (1, 4096, "draft", 16), (1, 4096, "verify", 1)):
        shape, case, tensors, kw = eager_call(mode, batch, context, q_len, device)
        kv_bytes = shape.kv_bytes()
        read = torch.ones(kv_bytes // 2, dtype=torch.bfloat16, device=device)
        partial = torch.empty(4 * torch.cuda.get_device_properties(device).multi_processor_count,
                              dtype=torch.float32, device=device)
        timed = [(f"plugin q{q_len} {mode if q_len > 1 else 'decode'} {batch}x{context // 1024}K",
                  lambda: ops.paged_attention(*tensors, **kw))]
        if mode == "verify" and q_len > 1:
            timed[:0] = [(f"read {kv_bytes / 1e6:.0f} MB (torch.sum)", lambda: read.sum()),
                         (f"read {kv_bytes / 1e6:.0f} MB (Triton stream)", lambda: stream_read(read, partial))]
        for splits in (extra_splits if batch == 1 else ()):
            forced = dict(kw, num_kv_splits=splits)
            timed.append((f"  ... {splits} splits", lambda forced=forced: ops.paged_attention(*tensors, **forced)))
        if batch == 1:
            def merge_in_four_warps():
                with ops.forced_launch(merge_warps=4):
                    ops.paged_attention(*tensors, **kw)
            timed.append(("  ... merge in 4 warps", merge_in_four_warps))
        for label, fn in timed:
            us = {"back_to_back": timing.graph_us([fn]),
                  "one_call_dirty_l2": timing.flushed_us([fn], reps),
                  "one_call_clean_l2": clean_one_call_us(fn, reps)}
            try:
                kernels = kernel_us(fn, reps) if not label.startswith("read") else {}
            except Exception as exc:  # noqa: BLE001 - a profiler that fails leaves the timings
                print(f"profiler: {type(exc).__name__}: {exc}", file=sys.stderr)
                kernels = {}
            found.append({"what": label, "kv_bytes": kv_bytes, "us": us, "kernel_us_one_call_dirty": kernels,
                          "tbs": {k: kv_bytes / (v * 1e-6) / 1e12 for k, v in us.items()}})
            t = found[-1]["tbs"]
            split = "".join(f"  {k.split('_')[0]} {v:5.1f} us" for k, v in kernels.items())
            print(f"{label:34} TB/s  back-to-back {t['back_to_back']:5.2f}  one call, dirty L2 "
                  f"{t['one_call_dirty_l2']:5.2f} ({us['one_call_dirty_l2']:5.1f} us{split})  clean L2 "
                  f"{t['one_call_clean_l2']:5.2f}", flush=True)
        del case, tensors, kw, read, partial
        torch.cuda.empty_cache()
    return found


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--json", default=None)
    p.add_argument("--reps", type=int, default=25)
    p.add_argument("--splits-1x4k", default="8,16", help="split counts forced on the 1 x 4K block besides its own")
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("one_call_floor.py needs a GPU", file=sys.stderr)
        return 2
    found = rows(args.reps, tuple(int(x) for x in args.splits_1x4k.split(",") if x))
    if args.json:
        meta = dict(device=torch.cuda.get_device_name(), torch=torch.__version__, triton=triton.__version__,
                    reps=args.reps, flush_bytes=timing.FLUSH_BYTES)
        with open(args.json, "w") as f:
            json.dump(dict(meta=meta, rows=found), f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
