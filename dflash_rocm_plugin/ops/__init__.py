"""The framework-free API both hosts call.

    paged_attention(q, k_cache, v_cache, block_table, seq_lens, query_start_loc, *, causal, ...)
    write_kv_cache(key, value, k_cache, v_cache, slot_mapping)
    greedy_sample(logits, out=None)

Arguments are checked before any launch (``ValueError`` naming the argument);
kernels are imported on first use so ``TRITON_INTERPRET`` may be set late.
"""

from dflash_rocm_plugin.ops._runtime import triton_problem as platform_problem
from dflash_rocm_plugin.ops.attention import paged_attention, reserve_workspace
from dflash_rocm_plugin.ops.kv_cache import write_kv_cache
from dflash_rocm_plugin.ops.sampling import greedy_sample

__all__ = ["paged_attention", "write_kv_cache", "greedy_sample", "reserve_workspace", "platform_problem"]
