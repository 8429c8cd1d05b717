"""Acceptance (tau) of the demo's distilled tiny DFlash pair with the draft's attention scores taken from q
rounded into e4m3fn, as the fp8 Q K^T launch rounds it (``DFLASH_ROCM_FP8_QK``), against plain q.

    python benchmarks/draft_q_rounding_tau.py [--seeds 0,1,2] [--json out.json]

Runs on the CPU (the Triton interpreter, float32, caches in q's dtype), so only q's rounding differs
between the two sides: each non-causal call's query rows of one sequence and KV head share one scale
(their largest magnitude over e4m3fn's 448), the kernel's per-program scale for blocks of at most 16
tokens.  Greedy output stays lossless either way (the demo checks it); what the rounding can cost is
the drafts the target accepts.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import platform
import sys

import torch

from dflash_rocm_plugin import ops
from dflash_rocm_plugin.demo import cli as demo

FP8_MAX = 448.0


def round_q_like_the_kernel(q: torch.Tensor, num_kv_heads: int, query_start_loc: torch.Tensor) -> torch.Tensor:
    group, bounds, out = q.shape[1] // num_kv_heads, query_start_loc.tolist(), q.clone()
    for lo, hi in zip(bounds, bounds[1:]):
        for h in range(num_kv_heads):
            rows = out[lo:hi, h * group:(h + 1) * group]
            amax = rows.abs().max()
            step = amax / FP8_MAX if amax > 0 else torch.ones((), dtype=rows.dtype)
            out[lo:hi, h * group:(h + 1) * group] = (rows / step).to(torch.float8_e4m3fn).to(rows.dtype) * step
    return out


@contextlib.contextmanager
def draft_q_rounded():
    real = ops.paged_attention

    def rounded(q, k_cache, v_cache, block_table, seq_lens, query_start_loc, *, causal, **kw):
        if not causal:
            q = round_q_like_the_kernel(q, k_cache.shape[2], query_start_loc)
        return real(q, k_cache, v_cache, block_table, seq_lens, query_start_loc, causal=causal, **kw)
    ops.paged_attention = rounded
    try:
        yield
    finally:
        ops.paged_attention = real


def run_demo(seed: int, batch: int, new_tokens: int) -> dict:
    text = io.StringIO()
    with contextlib.redirect_stdout(text):
        rc = demo.main(["--json", "--no-progress", "--seed", str(seed), "--batch", str(batch),
                        "--max-new-tokens", str(new_tokens)])
    record = json.loads(text.getvalue())
    return {"rc": rc, "lossless": record["lossless"], "tau": record["tau"]}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--batch", type=int, default=6)
    p.add_argument("--max-new-tokens", type=int, default=32)
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    rows = []
    for seed in (int(s) for s in args.seeds.split(",")):
        plain = run_demo(seed, args.batch, args.max_new_tokens)
        with draft_q_rounded():
            rounded = run_demo(seed, args.batch, args.max_new_tokens)
        rows.append({"seed": seed, "plain": plain, "q_rounded": rounded})
        print(f"seed {seed}: tau {plain['tau']:.4f} plain, {rounded['tau']:.4f} with the draft's q in e4m3fn "
              f"({rounded['tau'] / plain['tau'] - 1:+.1%}); lossless {plain['lossless']} / {rounded['lossless']}")
    if args.json:
        meta = {"torch": torch.__version__, "python": platform.python_version(), "device": "cpu (Triton interpreter)",
                "batch": args.batch, "max_new_tokens": args.max_new_tokens}
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "rows": rows}, f, indent=1)
    return 0 if all(r["plain"]["lossless"] and r["q_rounded"]["lossless"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
