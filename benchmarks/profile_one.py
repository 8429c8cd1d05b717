"""One plugin launch per case, for a profiler (ncu) to read.

    python benchmarks/profile_one.py [CASE ...]     # CASE: PAGE[:field=value,...], default "16 1"

e.g. ``1:page_ids_asm=1,offsets_32=1`` forces AttentionLaunch fields (ops.forced_launch / ops.AttentionLaunch) for
that launch; every case is a 32 x 16K non-causal draft in bf16.
"""

import sys

import torch

from dflash_rocm_plugin import ops
from dflash_rocm_plugin.bench import inputs
from dflash_rocm_plugin.bench.shapes import Shape

for spec in sys.argv[1:] or ["16", "1"]:
    page, _, extra = spec.partition(":")
    fields = {k: int(v) for k, v in (kv.split("=") for kv in extra.split(",") if kv)}
    case = inputs.build(Shape("qwen3-8b", "draft", 32, 16384, int(page)), torch.device("cuda"))
    with ops.forced_launch(**fields):
        ops.paged_attention(case.q, case.k_cache, case.v_cache, case.block_tables[0], case.seq_lens,
                            case.query_start_loc, causal=False, max_query_len=16)
    torch.cuda.synchronize()
    print(f"profiled page {page} {fields}", flush=True)
    del case
    torch.cuda.empty_cache()
