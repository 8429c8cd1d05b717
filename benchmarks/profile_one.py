"""One plugin launch per case, for a profiler (ncu) to read.

    python benchmarks/profile_one.py [CASE ...]     # CASE: PAGE[:field=value,...], default "16 1"

e.g. ``1:page_ids_asm=1,offsets_32=1`` forces AttentionLaunch fields (ops.forced_launch / ops.AttentionLaunch) for
that launch; every case is a non-causal q16 draft in bf16 of 32 sequences, 16K keys each unless the case says
``context=N``; ``window=W`` gives it a sliding window (``16:window=2048`` against ``16:context=2064`` compares a
DFlash2 draft with as many keys read without a window).
"""

import sys

import torch

from dflash_rocm_plugin import ops
from dflash_rocm_plugin.bench import inputs
from dflash_rocm_plugin.bench.shapes import Shape

for spec in sys.argv[1:] or ["16", "1"]:
    page, _, extra = spec.partition(":")
    fields = {k: int(v) for k, v in (kv.split("=") for kv in extra.split(",") if kv)}
    context, window = fields.pop("context", 16384), fields.pop("window", None)
    # Pages for 16K keys either way, so a short context reads as scattered a pool as a window does.
    case = inputs.build(Shape("qwen3-8b", "draft", 32, context, int(page)), torch.device("cuda"), pool_context=16384)
    with ops.forced_launch(**fields):
        ops.paged_attention(case.q, case.k_cache, case.v_cache, case.block_tables[0], case.seq_lens,
                            case.query_start_loc, causal=False, max_query_len=16, sliding_window=window)
    torch.cuda.synchronize()
    print(f"profiled page {page} context {context} window {window} {fields}", flush=True)
    del case
    torch.cuda.empty_cache()
