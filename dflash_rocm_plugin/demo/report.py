"""What the demo prints: the lossless verdict, tau, throughput, and where the kernels ran."""

from __future__ import annotations

import sys
import time

import torch

from dflash_rocm_plugin import ops

SCHEMA_KEYS = ("lossless", "tokens_equal", "tokens_total", "first_mismatch", "tau", "block_size", "batch",
               "max_new_tokens", "dflash", "target_only", "speedup", "device", "dtype", "kernel_path",
               "models", "draft", "fault", "acceptance", "outputs")


class ProgressBar:
    """A plain one-line progress bar on stderr (no dependency), at most ~10 redraws a second."""

    def __init__(self, label: str, width: int = 30):
        self.label, self.width, self._last = label, width, 0.0

    def __call__(self, done: int, total: int) -> None:
        now = time.monotonic()
        if done < total and now - self._last < 0.1:
            return
        self._last = now
        fill = self.width * done // max(total, 1)
        sys.stderr.write(f"\r{self.label} [{'#' * fill}{'.' * (self.width - fill)}] {done}/{total}")
        if done >= total:
            sys.stderr.write("\n")
        sys.stderr.flush()


def kernel_path(device: torch.device) -> str:
    if device.type == "cpu":
        return "triton interpreter on CPU (TRITON_INTERPRET=1; correctness only, not speed)"
    paths = ops.kernel_paths(device)
    where = f"{'ROCm/HIP' if paths['platform']['rocm'] else 'CUDA'} {paths['platform']['arch']}"
    attention = paths["attention"]
    if attention["impl"] == "triton":
        return f"triton native, {where}"
    return f"attention {attention['impl']} ({attention['reason']}), {where}"


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return f"{device} ({torch.cuda.get_device_name(device)})"
    return "cpu"


def summarize(spec, base, *, prompts, block_size, page_size, device, dtype, models, fault, draft=None) -> dict:
    """``draft``: the draft's config; the report says which style ran (``dflash``: full attention
    over the context; ``sliding-window``: DFlash2-style, every layer over the last ``window`` keys)."""
    equal = total = 0
    first = None
    for s, (a, b) in enumerate(zip(spec.tokens, base.tokens)):
        total += len(b)
        for i, (x, y) in enumerate(zip(a, b)):
            if x == y:
                equal += 1
            elif first is None:
                first = {"sequence": s, "index": i, "dflash": x, "target_only": y}
        if len(a) != len(b) and first is None:
            first = {"sequence": s, "index": min(len(a), len(b)), "dflash": None, "target_only": None}
    lossless = first is None and spec.tokens == base.tokens
    return {
        "lossless": lossless, "tokens_equal": equal, "tokens_total": total, "first_mismatch": first,
        "tau": round(spec.tau, 4), "block_size": block_size, "page_size": page_size, "batch": len(prompts),
        "max_new_tokens": max(len(t) for t in base.tokens),
        "dflash": {"tokens": spec.num_tokens, "seconds": round(spec.seconds, 4),
                   "tokens_per_s": round(spec.tokens_per_second, 3),
                   "verify_steps": max(len(a) for a in spec.acceptance)},
        "target_only": {"tokens": base.num_tokens, "seconds": round(base.seconds, 4),
                        "tokens_per_s": round(base.tokens_per_second, 3)},
        "speedup": round(base.seconds / spec.seconds, 3) if spec.seconds > 0 else None,
        "device": device_name(device), "dtype": str(dtype).removeprefix("torch."),
        "kernel_path": kernel_path(device), "models": models, "fault": fault,
        "draft": {"style": getattr(draft, "style", "dflash"), "window": getattr(draft, "sliding_window", None),
                  "causal": False},
        "acceptance": spec.acceptance, "outputs": spec.tokens,
    }


def render(r: dict, tokenizer=None) -> str:
    lines = [
        f"target: {r['models']['target']}",
        f"draft:  {r['models']['draft']}" + (
            f" [sliding-window draft, window {r['draft']['window']}]" if r.get("draft", {}).get("window") else ""),
        f"device: {r['device']}   dtype: {r['dtype']}",
        f"kernels: {r['kernel_path']}",
        f"batch {r['batch']}, block size {r['block_size']}, {r['max_new_tokens']} new tokens per sequence, "
        f"page size {r['page_size']}" + (f", FAULT INJECTED: {r['fault']}" if r["fault"] != "none" else ""),
        "",
        f"lossless:    {'yes' if r['lossless'] else 'no'} ({r['tokens_equal']}/{r['tokens_total']} tokens equal "
        "to the independent target-only greedy run)",
    ]
    if r["first_mismatch"]:
        m = r["first_mismatch"]
        lines.append(f"             first mismatch: sequence {m['sequence']}, token {m['index']}: "
                     f"dflash {m['dflash']} vs target-only {m['target_only']}")
    lines += [
        f"tau:         {r['tau']:.2f} tokens per verify step (bonus included; max {r['block_size']})",
        f"dflash:      {r['dflash']['tokens_per_s']:.1f} tokens/s ({r['dflash']['tokens']} tokens, "
        f"{r['dflash']['verify_steps']} verify steps)",
        f"target-only: {r['target_only']['tokens_per_s']:.1f} tokens/s",
        f"speedup:     {r['speedup']:.2f}x" if r["speedup"] else "speedup:     n/a",
    ]
    if tokenizer is not None:
        lines += ["", "output of sequence 0:", tokenizer.decode(r["outputs"][0])]
    return "\n".join(lines)
