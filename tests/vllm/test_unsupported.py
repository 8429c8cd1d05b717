"""Configurations the kernels cannot run are refused at vLLM's backend-validation step with a
reason (or at layer construction / metadata build with a clear error), never in a kernel."""

import pytest
import torch


def _reasons(**overrides):
    from dflash_rocm_plugin.vllm.backend import RocmDFlashBackend
    args = dict(head_size=128, dtype=torch.bfloat16, kv_cache_dtype="auto", block_size=16,
                use_mla=False, has_sink=False, use_sparse=False, use_mm_prefix=False,
                use_per_head_quant_scales=False, device_capability=None, attn_type="decoder",
                use_non_causal=True)
    args.update(overrides)
    return RocmDFlashBackend.validate_configuration(**args)


def test_supported_configurations_have_no_reasons():
    for head_size in (16, 64, 80, 96, 128, 256, 512):
        for dtype in (torch.float16, torch.bfloat16, torch.float32):
            assert _reasons(head_size=head_size, dtype=dtype) == []
    assert _reasons(has_sliding_window=True, kv_cache_dtype="bfloat16") == []


@pytest.mark.parametrize("overrides,expected", [
    (dict(kv_cache_dtype="fp8_e5m2"), "rocm_dflash: kv_cache_dtype 'fp8_e5m2': KV cache dtype torch.float8_e5m2 is not supported"),
    (dict(kv_cache_dtype="fp8_e5m2"), "kv_cache_dtype not supported"),
    (dict(kv_cache_dtype="fp8_per_token_head"), "per-token-head scales stored inline in the cache are not supported"),
    (dict(kv_cache_dtype="float16"), "rocm_dflash: KV cache dtype torch.float16 differs from the model dtype"),
    (dict(use_mla=True), "MLA not supported"),
    (dict(use_sparse=True), "sparse not supported"),
    (dict(attn_type="encoder_decoder"), "attention type encoder_decoder not supported"),
    (dict(attn_type="encoder_only"), "attention type encoder_only not supported"),
    (dict(head_size=12), "rocm_dflash: head_dim 12 is not supported (multiples of 8 from 16 to 512"),
    (dict(head_size=100), "head_size not supported"),
    (dict(head_size=520), "head_size not supported"),
    (dict(dtype=torch.int8), "dtype not supported"),
    (dict(block_size=8), "block_size not supported"),
    (dict(use_mm_prefix=True), "partial multimodal token full attention not supported"),
    (dict(use_rswa=True), "R-SWA not supported"),
], ids=lambda v: str(v)[:40])
def test_rejected_with_reason(overrides, expected):
    reasons = _reasons(**overrides)
    assert any(expected in r for r in reasons), reasons


def test_impl_refuses_alibi_quantized_modes_and_cross_attention():
    from dflash_rocm_plugin.vllm.impl import RocmDFlashImpl
    with pytest.raises(ValueError, match="ALiBi"):
        RocmDFlashImpl(4, 32, 0.1, 2, [0.1, 0.2, 0.3, 0.4], None, "auto")
    with pytest.raises(ValueError, match="kv_cache_dtype 'fp8_e5m2'"):
        RocmDFlashImpl(4, 32, 0.1, 2, None, None, "fp8_e5m2")
    with pytest.raises(ValueError, match=r"encoder-decoder \(cross\) attention"):
        RocmDFlashImpl(4, 32, 0.1, 2, None, None, "auto", attn_type="encoder_decoder")
    with pytest.raises(ValueError, match="head_dim 20"):
        RocmDFlashImpl(4, 20, 0.1, 2, None, None, "auto")


def test_attention_types_and_the_layer_s_other_refusals_are_said_in_ops_words():
    """The backend's attention-type hook and the layer's own refusals read ops (``features_problem``,
    ``v_head_dim_problem``): a fact changed there changes them."""
    from vllm.v1.attention.backend import AttentionType

    from dflash_rocm_plugin import ops
    from dflash_rocm_plugin.vllm.backend import RocmDFlashBackend
    from dflash_rocm_plugin.vllm.impl import RocmDFlashImpl, split_kv_cache
    assert RocmDFlashBackend.supports_attn_type(AttentionType.DECODER)
    for kind in (AttentionType.ENCODER, AttentionType.ENCODER_ONLY, AttentionType.ENCODER_DECODER, "unknown"):
        assert not RocmDFlashBackend.supports_attn_type(kind), kind
    with pytest.raises(ValueError, match="v_head_dim 16 differs from head_dim 32"):
        split_kv_cache(torch.zeros(3, 2, 16, 48), 32)
    impl = RocmDFlashImpl(4, 32, 0.1, 2, None, None, "auto")
    with pytest.raises(NotImplementedError, match=ops.features_problem({"output_quant"})):
        impl.forward(None, None, None, None, None, None, None, output_scale=torch.ones(1))


def test_per_request_causal_tensor_is_refused_at_build(engine_config):
    from vllm.config import set_current_vllm_config
    from vllm.v1.kv_cache_interface import FullAttentionSpec
    from vllm.v1.kv_cache_interface import KVCacheLayout

    from dflash_rocm_plugin.vllm.metadata import RocmDFlashMetadataBuilder
    from tests.vllm import kv_batches

    spec = FullAttentionSpec(block_size=16, num_kv_heads=2, head_size=32, dtype=torch.float32)
    with set_current_vllm_config(engine_config):
        builder = RocmDFlashMetadataBuilder(spec, ["l"], engine_config, torch.device("cpu"))
    cam = kv_batches.build([5], [5], causal=True, layout=KVCacheLayout.LBHNC).common_metadata()
    with pytest.raises(ValueError, match="per-request causal"):
        builder.build(0, cam.replace(causal=torch.tensor([True])))


def test_layouts_intersect_the_rocm_backends():
    from vllm.v1.attention.backends.rocm_attn import RocmAttentionBackend
    from vllm.v1.attention.backends.utils import get_supported_kv_cache_layouts

    from dflash_rocm_plugin.vllm.backend import RocmDFlashBackend
    shared = get_supported_kv_cache_layouts([RocmDFlashBackend, RocmAttentionBackend])
    assert set(shared) == set(RocmAttentionBackend.supported_kv_cache_layouts())
