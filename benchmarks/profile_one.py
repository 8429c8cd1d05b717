"""One plugin launch per case, for a profiler (ncu) to read: `python benchmarks/profile_one.py`."""

import torch

from dflash_rocm_plugin import ops
from dflash_rocm_plugin.bench import inputs
from dflash_rocm_plugin.bench.shapes import Shape

for page in (16, 1):
    case = inputs.build(Shape("qwen3-8b", "draft", 32, 16384, page), torch.device("cuda"))
    for _ in range(2):  # the first compiles
        ops.paged_attention(case.q, case.k_cache, case.v_cache, case.block_tables[0], case.seq_lens,
                            case.query_start_loc, causal=False, max_query_len=16)
    torch.cuda.synchronize()
    del case
    torch.cuda.empty_cache()
