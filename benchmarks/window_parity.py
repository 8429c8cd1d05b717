"""A sliding-window draft against the same number of keys without a window, interleaved in one process.

    python benchmarks/window_parity.py [--json window_parity.json] [--rounds 5]

The bench times the two in separate invocations, whose run-to-run spread (1-2 % at large batch) is
as large as the gap being asked about.  Here each pair is built once over pools of the same size
(``inputs.build(..., pool_context=)``) and timed alternately, round by round (CUDA-graph replay of
back-to-back calls, ``timing.graph_us``): DFlash2-style drafts, Qwen3-8B heads, window 2048,
q 8 and 16, against 2064 keys per sequence with no window.  Each side's TB/s counts the keys it
reads (the window's W + q - 1, or 2064).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys

import torch

from dflash_rocm_plugin.bench import inputs, timing
from dflash_rocm_plugin.bench.shapes import Shape

WINDOW = 2048
SAME_KEYS = 2064  # W + 15 rounded up to a page of 16


def _calls(case):
    return case.plugin_calls([torch.empty_like(case.q) for _ in case.block_tables])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--json", default=None)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--model", default="qwen3-8b")
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("window_parity.py needs a GPU", file=sys.stderr)
        return 2
    dev = torch.device("cuda")
    rows = []
    for q_len in (8, 16):
        for batch, context in ((32, 16384), (64, 8192), (8, 4096)):
            windowed = inputs.build(Shape(args.model, "draft", batch, context, 16, q_len=q_len, window=WINDOW), dev)
            plain = inputs.build(Shape(args.model, "draft", batch, SAME_KEYS, 16, q_len=q_len), dev,
                                 pool_context=context)
            sides = {"window": (windowed, _calls(windowed)), "same keys": (plain, _calls(plain))}
            times = {name: [] for name in sides}
            for _ in range(args.rounds):
                for name, (_, calls) in sides.items():
                    times[name].append(timing.graph_us(calls, target_ms=3.0, reps=10))
            row = dict(q_len=q_len, batch=batch, context=context)
            for name, (case, _) in sides.items():
                us = statistics.median(times[name])
                row[name] = dict(us=us, tbs=case.shape.kv_bytes() / (us * 1e-6) / 1e12, rounds_us=times[name])
            row["window / same keys (TB/s)"] = row["window"]["tbs"] / row["same keys"]["tbs"]
            rows.append(row)
            print(f"q{q_len:<2} {batch}x{context:<6} window {row['window']['tbs']:.3f} TB/s  same keys "
                  f"{row['same keys']['tbs']:.3f} TB/s  ratio {row['window / same keys (TB/s)']:.3f}  "
                  f"(spread {min(times['window']):.1f}-{max(times['window']):.1f} / "
                  f"{min(times['same keys']):.1f}-{max(times['same keys']):.1f} us)", flush=True)
            del windowed, plain, sides
            torch.cuda.empty_cache()
    if args.json:
        import triton
        meta = dict(device=torch.cuda.get_device_name(), torch=torch.__version__, triton=triton.__version__)
        with open(args.json, "w") as f:
            json.dump(dict(meta=meta, rows=rows), f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
