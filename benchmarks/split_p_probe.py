"""Why P as two fp8 parts ("qk_pv_split") leaves rows non-finite on Hopper (benchmarks/NOTES.md, "v17 -> v18"):
the mode run past NVIDIA's refusal (``ops.fp8_dots_problem``), beside "qk_pv" (P rounded, one dot), with the
finite fraction, the error against float64 and where the non-finite rows sit.  Run it twice, with and without
DISABLE_MMA_V3=1 (Hopper's dots on mma.sync instead of wgmma) and a fresh TRITON_CACHE_DIR each, to tell
Hopper's wgmma path from the kernel's arithmetic (``WHY_SPLIT_P=1 bash benchmarks/device_round.sh none 0 0``).

    python3 benchmarks/split_p_probe.py
"""

import os
import sys

import torch

from dflash_rocm_plugin import ops, reference
from dflash_rocm_plugin.ops.backends import triton as triton_backend
from tests.gpu.test_fp8_sinks_window import _build, _rel

triton_backend.fp8_dots_problem = lambda mode, arch: None  # the probe runs what NVIDIA refuses
lens = [1000, 4111, 16, 2049]
args = _build(lens, 16, cache=ops.native_fp8_dtype(ops.gpu_arch()), seed=7)
q, k, v, table, sl, qsl = args
print(ops.gpu_arch(), "DISABLE_MMA_V3 =", os.environ.get("DISABLE_MMA_V3"), file=sys.stderr)
for causal in (True, False):
    ref = reference.paged_attention(q.cpu(), k.cpu(), v.cpu(), table.cpu(), sl.cpu(), qsl.cpu(), causal=causal)
    for fields in (dict(fp8_dots="qk_pv"), dict(fp8_dots="qk_pv_split"), dict(fp8_dots="qk_pv_split", num_kv_splits=1)):
        splits = fields.pop("num_kv_splits", None)
        out = torch.full_like(q, float("nan"))
        with ops.forced_launch(**fields):
            ops.paged_attention(q, k, v, table, sl, qsl, causal=causal, out=out, max_query_len=16,
                                num_kv_splits=splits)
        torch.cuda.synchronize()
        finite = torch.isfinite(out)
        bad_tokens = (~finite).any(-1).any(-1).nonzero().flatten().tolist()
        bad_heads = (~finite).any(-1).any(0).nonzero().flatten().tolist()
        err = _rel(torch.where(finite, out, 0).cpu(), ref)
        print(f"causal={causal} {fields} splits={splits} finite={finite.float().mean().item():.3f} "
              f"err={err:.2e} bad tokens {bad_tokens[:20]} heads {bad_heads}")
