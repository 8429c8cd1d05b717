"""vLLM 0.33's hybrid KV-cache manager (GDN hybrids: Qwen3.5/3.6, Qwen3-Next) and sliding-window
layers with their evicted blocks, on the plugin's backend.

* Block sizes: vLLM's own ``Platform._align_hybrid_block_size`` (the path ROCm takes; it does not
  override it) raises the attention block size to match the Mamba page for a Qwen3-Next-shaped
  target on ``rocm_dflash``: 544 tokens with a bf16 SSM state, 1056 with fp32, 592 with 7 DFlash
  tokens (the GDN conv state grows by the speculative tokens).  The backend accepts those sizes,
  and vLLM's ``select_common_block_size`` keeps the kernel block equal to the manager block (no
  splitting).
* CUDA graphs: with vLLM's GDN builder beside ours, FULL_AND_PIECEWISE survives vLLM's own
  resolution for 1 + 7 and 1 + 15 token verify/draft blocks.
* Numerics on vLLM's own metadata at those block sizes (544, 1056), including pages padded past
  their dense size, against TRITON_ATTN and the float64 reference.
* Sliding-window layers after eviction: vLLM's ``SlidingWindowManager`` frees blocks wholly outside
  the window and puts the null block 0 in their table slots; block 0 and every freed block are NaN.
  Causal target layers and non-causal DFlash2-style draft blocks (window 2048, blocks 8 and 16)
  stay finite and equal the dense reference and TRITON_ATTN.  vLLM's TRITON_ATTN makes a
  non-causal window symmetric (key j visible from p iff |p - j| < W) where ours keeps p - j < W;
  the two agree whenever the query block is shorter than the window, the only case a DFlash
  draft produces, and that is the domain tested here.
"""

from __future__ import annotations

import json

import pytest
import torch

from dflash_rocm_plugin import reference
from tests.vllm import hybrid_batches, kv_batches

HQ, HKV, D = 4, 2, 32
TOL = 2e-5

# A Qwen3-Next-shaped hybrid (kv 2, head_dim 256, linear 16/32 heads of 128): config only.
QWEN3_NEXT = {
    "architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next", "vocab_size": 1024,
    "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 4, "num_attention_heads": 16,
    "num_key_value_heads": 2, "head_dim": 256, "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128,
    "linear_value_head_dim": 128, "linear_num_key_heads": 16, "linear_num_value_heads": 32,
    "full_attention_interval": 4, "num_experts": 4, "num_experts_per_tok": 2, "decoder_sparse_step": 1,
    "moe_intermediate_size": 64, "shared_expert_intermediate_size": 64, "norm_topk_prob": True,
    "rope_theta": 10000000, "partial_rotary_factor": 0.25, "rms_norm_eps": 1e-6,
    "max_position_embeddings": 4096, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
}
DFLASH_DRAFT = {
    "architectures": ["DFlashDraftModel"], "model_type": "qwen3", "vocab_size": 1024, "hidden_size": 256,
    "intermediate_size": 512, "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 2,
    "head_dim": 64, "max_position_embeddings": 4096, "rms_norm_eps": 1e-6, "rope_theta": 1e6,
    "hidden_act": "silu", "attention_bias": False, "tie_word_embeddings": False, "block_size": 8,
    "num_target_layers": 4, "dflash_config": {"mask_token_id": 1023, "target_layer_ids": [1, 2]},
    "torch_dtype": "bfloat16",
}


@pytest.fixture(scope="module")
def hybrid_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("hybrid")
    for name, cfg in (("target", QWEN3_NEXT), ("draft", DFLASH_DRAFT)):
        (root / name).mkdir()
        (root / name / "config.json").write_text(json.dumps(cfg))
    return str(root / "target"), str(root / "draft")


def hybrid_config(hybrid_dirs, *, ssm_dtype, spec_tokens=0):
    from vllm.engine.arg_utils import EngineArgs
    from vllm.plugins import load_general_plugins

    load_general_plugins()
    kwargs = dict(model=hybrid_dirs[0], skip_tokenizer_init=True, dtype="bfloat16", max_model_len=2048,
                  max_num_seqs=8, enforce_eager=True, attention_backend="rocm_dflash", enable_prefix_caching=False)
    if spec_tokens:
        kwargs["speculative_config"] = {"method": "dflash", "model": hybrid_dirs[1],
                                        "num_speculative_tokens": spec_tokens}
    config = EngineArgs(**kwargs).create_engine_config()
    assert config.model_config.is_hybrid
    # The CPU platform forces an fp32 SSM state; ROCm keeps the model's or the user's choice.
    config.cache_config.mamba_ssm_cache_dtype = ssm_dtype
    return config


def plugin_backend():
    from vllm.v1.attention.backends.registry import AttentionBackendEnum
    return AttentionBackendEnum["ROCM_DFLASH"].get_class()


@pytest.mark.parametrize("ssm_dtype, spec_tokens, expected", [
    ("bfloat16", 0, 544), ("float32", 0, 1056), ("bfloat16", 7, 592)])
def test_hybrid_manager_block_size_is_served_unsplit(hybrid_dirs, ssm_dtype, spec_tokens, expected):
    from vllm.platforms.interface import Platform
    from vllm.v1.kv_cache_interface import FullAttentionSpec
    from vllm.v1.worker.utils import select_common_block_size

    config = hybrid_config(hybrid_dirs, ssm_dtype=ssm_dtype, spec_tokens=spec_tokens)
    backend = plugin_backend()
    config.cache_config.block_size = backend.get_preferred_block_size(16)  # phase 1 of update_block_size
    Platform._align_hybrid_block_size(config, backend)
    block = config.cache_config.block_size
    assert block == expected
    Platform._check_aligned_block_size(config, [backend], 16)
    assert backend.supports_block_size(block)
    assert select_common_block_size(block, [backend]) == block, "vLLM would split the block for this backend"
    page = FullAttentionSpec(block_size=block, num_kv_heads=2, head_size=256, dtype=torch.bfloat16).page_size_bytes
    # The Mamba page is padded up to the attention page (None: they already match).
    assert config.cache_config.mamba_page_size_padded in (None, page)


@pytest.mark.parametrize("spec_tokens", [7, 15])
def test_full_and_piecewise_graphs_survive_with_the_gdn_builder(hybrid_dirs, spec_tokens):
    from vllm.config import CUDAGraphMode
    from vllm.config.compilation import CompilationConfig
    from vllm.v1.attention.backends.gdn_attn import GDNAttentionMetadataBuilder
    from vllm.v1.kv_cache_interface import FullAttentionSpec

    config = hybrid_config(hybrid_dirs, ssm_dtype="bfloat16")
    spec = FullAttentionSpec(block_size=544, num_kv_heads=2, head_size=256, dtype=torch.bfloat16)
    ours = plugin_backend().get_builder_cls().get_cudagraph_support(config, spec)
    gdn = GDNAttentionMetadataBuilder.get_cudagraph_support(config, spec)
    compilation = CompilationConfig(cudagraph_mode=CUDAGraphMode.FULL_AND_PIECEWISE)
    compilation.splitting_ops = list(config.compilation_config.splitting_ops or [])
    resolved = compilation.resolve_cudagraph_mode_and_sizes(
        min(ours, gdn, key=lambda s: s.value), "ROCM_DFLASH", uniform_decode_query_len=1 + spec_tokens)
    assert resolved == CUDAGraphMode.FULL_AND_PIECEWISE


# ---- numerics on vLLM's metadata at hybrid block sizes ----------------------------------------

def pair(engine_config, *, block_size, sliding_window=None, dtype=torch.float32):
    """(plugin builder, plugin impl, TRITON_ATTN builder, TRITON_ATTN impl)."""
    from vllm.config import set_current_vllm_config
    from vllm.v1.attention.backends.registry import AttentionBackendEnum
    from vllm.v1.kv_cache_interface import FullAttentionSpec, SlidingWindowSpec

    if sliding_window is None:
        spec = FullAttentionSpec(block_size=block_size, num_kv_heads=HKV, head_size=D, dtype=dtype)
    else:
        spec = SlidingWindowSpec(block_size=block_size, num_kv_heads=HKV, head_size=D, dtype=dtype,
                                 sliding_window=sliding_window)
    out = []
    with set_current_vllm_config(engine_config):
        for member in (AttentionBackendEnum["ROCM_DFLASH"], AttentionBackendEnum.TRITON_ATTN):
            cls = member.get_class()
            out += [cls.get_builder_cls()(spec, ["layer.0"], engine_config, torch.device("cpu")),
                    cls.get_impl_cls()(HQ, D, D ** -0.5, HKV, None, sliding_window, "auto")]
    return out



def run(builder, impl, layer, batch, kv_cache, **cam_extra):
    cam = batch.common_metadata()
    for name, value in cam_extra.items():
        setattr(cam, name, value)
    metadata = builder.build(0, cam)
    impl.do_kv_cache_update(layer, batch.key, batch.value, kv_cache, batch.slot_mapping)
    output = torch.full_like(batch.query, float("nan"))
    impl.forward(layer, batch.query, batch.key, batch.value, kv_cache, metadata, output)
    return output


def compare(backends, layer, batch, expected, **cam_extra):
    pb, pi, tb, ti = backends
    ours_cache, theirs_cache = batch.kv_cache.clone(), batch.kv_cache.clone()
    ours = run(pb, pi, layer, batch, ours_cache, **cam_extra)
    theirs = run(tb, ti, layer, batch, theirs_cache, **cam_extra)
    n = batch.num_tokens
    assert torch.isfinite(ours[:n]).all(), "a NaN block (unowned, evicted or padding) was read"
    torch.testing.assert_close(ours[:n].double(), expected, rtol=TOL, atol=TOL)
    torch.testing.assert_close(ours[:n], theirs[:n], rtol=TOL, atol=TOL)
    assert torch.isnan(ours[n:]).all()
    torch.testing.assert_close(ours_cache, theirs_cache, rtol=0, atol=0, equal_nan=True)


# (name, seq_lens, q_lens, causal): decode, causal 1+7 / 1+15 verify, non-causal 1+7 DFlash draft.
HYBRID_CASES = [
    ("decode", [1200, 33, 600], [1, 1, 1], True),
    ("verify_1+7", [1100, 40, 560], [8, 8, 8], True),
    ("verify_1+15", [1100, 40], [16, 16], True),
    ("dflash_draft_1+7", [1100, 40, 545], [8, 8, 8], False),
]


@pytest.mark.parametrize("block_size", [544, 1056])
@pytest.mark.parametrize("name,seq_lens,q_lens,causal", HYBRID_CASES, ids=[c[0] for c in HYBRID_CASES])
def test_hybrid_block_sizes_match_triton_attn_and_reference(engine_config, layer, block_size, name, seq_lens,
                                                            q_lens, causal):
    from vllm.v1.kv_cache_interface import KVCacheLayout

    batch = kv_batches.build(seq_lens, q_lens, causal=causal, layout=KVCacheLayout.LBHNC, block_size=block_size,
                             padding_rows=2, seed=block_size + len(name))
    k, v = kv_batches.split_kv(batch.kv_cache.clone(), D)
    reference.write_kv_cache(batch.key, batch.value, k, v, batch.slot_mapping)
    n = batch.num_tokens
    expected = reference.paged_attention(batch.query[:n].double(), k.double(), v.double(), batch.block_table,
                                         batch.seq_lens, batch.query_start_loc, causal=causal, scale=D ** -0.5)
    # The Mamba-hybrid runner adds is_prefilling to the metadata the attention builders get.
    compare(pair(engine_config, block_size=block_size), layer, batch, expected,
            is_prefilling=torch.zeros(len(seq_lens), dtype=torch.bool))


def test_padded_pages_at_a_hybrid_block_size(engine_config, layer):
    """A page padded past its dense size (block stride > page): the padding holds NaN."""
    from vllm.v1.kv_cache_interface import KVCacheLayout

    block_size = 544
    batch = kv_batches.build([1100, 40], [8, 8], causal=False, layout=KVCacheLayout.LBHNC, block_size=block_size,
                             seed=3)
    padded = hybrid_batches.padded_block_kv_cache(batch.kv_cache.shape[0], HKV, block_size, D, torch.float32,
                                                  torch.Generator().manual_seed(4), pad_elems=4096)
    padded.copy_(batch.kv_cache)
    assert padded.stride(0) > HKV * block_size * 2 * D
    batch.kv_cache = padded
    k, v = kv_batches.split_kv(padded.clone(), D)
    reference.write_kv_cache(batch.key, batch.value, k, v, batch.slot_mapping)
    expected = reference.paged_attention(batch.query.double(), k.double(), v.double(), batch.block_table,
                                         batch.seq_lens, batch.query_start_loc, causal=False, scale=D ** -0.5)
    pb, pi, _, _ = pair(engine_config, block_size=block_size)
    cache = padded  # written in place, through the strided view
    out = run(pb, pi, layer, batch, cache)
    torch.testing.assert_close(out.double(), expected, rtol=TOL, atol=TOL)


# ---- sliding windows after eviction ---------------------------------------------------------

@pytest.mark.parametrize("block_size, window, seq_lens, q_lens", [
    (16, 40, [130, 20, 97], [8, 8, 8]),
    (544, 100, [1300, 90, 1100], [16, 16, 16]),
])
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "non_causal"])
def test_sliding_window_with_null_block_in_evicted_slots(engine_config, layer, block_size, window, seq_lens,
                                                         q_lens, causal):
    from vllm.v1.kv_cache_interface import KVCacheLayout

    batch = hybrid_batches.sliding_window_batch(seq_lens, q_lens, causal=causal, window=window,
                                                block_size=block_size, layout=KVCacheLayout.LBHNC,
                                                padding_rows=1, seed=block_size)
    assert any(batch.nulled) and (batch.block_table == 0).any(), "the case must evict blocks"
    expected = hybrid_batches.dense_reference(batch, window=window, scale=D ** -0.5)
    unwindowed = hybrid_batches.dense_reference(batch, window=None, scale=D ** -0.5)
    assert (expected - unwindowed).abs().max() > 0.05
    compare(pair(engine_config, block_size=block_size, sliding_window=window), layer, batch, expected)


@pytest.mark.parametrize("block", [8, 16])
def test_dflash2_window_draft_blocks(engine_config, layer, block):
    """Every DFlash2 draft layer: window 2048, non-causal block, contexts past the window, the
    draft's own sliding-window group having evicted what lies before it."""
    from vllm.v1.kv_cache_interface import KVCacheLayout

    window = 2048
    batch = hybrid_batches.sliding_window_batch([2100 + block, 30 + block, 2500 + block], [block] * 3, causal=False,
                                                window=window, block_size=16, layout=KVCacheLayout.LBHNC,
                                                seed=block)
    assert any(batch.nulled)
    expected = hybrid_batches.dense_reference(batch, window=window, scale=D ** -0.5)
    compare(pair(engine_config, block_size=16, sliding_window=window), layer, batch, expected)
