"""Unsupported configurations stop at backend construction with a reason naming the
feature (MLA, cross-attention, fp4 KV, head dims, tree-mask speculation), and
per-layer features the backend cannot honour raise ``ops.Unsupported`` (a ValueError, as in the
vLLM adapter) instead of computing wrong attention."""

from types import SimpleNamespace

import pytest
import torch
from sglang.srt.configs.model_config import AttentionArch
from sglang.srt.layers.radix_attention import AttentionType
from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool
from sglang.srt.model_executor.forward_batch_info import ForwardMode
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

import harness as h
from dflash_rocm_plugin import ops
from dflash_rocm_plugin.sglang.config_check import UnsupportedConfig


def build(runner):
    return h.make_backend("rocm_dflash", runner)


def with_model_config(runner, **changes):
    runner.model_config = SimpleNamespace(**{**vars(runner.model_config), **changes})
    return runner


@pytest.mark.parametrize("changes, reason", [
    (dict(attention_arch=AttentionArch.MLA), "MLA"),
    (dict(is_encoder_decoder=True), r"encoder-decoder \(cross\) attention"),
    (dict(v_head_dim=64), "v_head_dim"),
])
def test_model_config_rejected(changes, reason):
    runner = with_model_config(h.make_runner(h.Shape()), **changes)
    with pytest.raises(UnsupportedConfig, match=reason) as err:
        build(runner)
    assert "--attention-backend rocm_dflash" in str(err.value)


@pytest.mark.parametrize("head_dim", [8, 12, 520])
def test_head_dim_rejected(head_dim):
    runner = with_model_config(h.make_runner(h.Shape()), head_dim=head_dim, v_head_dim=head_dim)
    with pytest.raises(UnsupportedConfig, match=f"head_dim {head_dim}"):
        build(runner)


def test_fp4_kv_cache_rejected():
    runner = h.make_runner(h.Shape())
    runner.token_to_kv_pool.dtype = torch.float4_e2m1fn_x2  # SGLang's fp4 pools: not a format served
    with pytest.raises(UnsupportedConfig, match="float4_e2m1fn_x2 is not supported"):
        build(runner)


def test_kv_dtype_must_match_model_dtype():
    runner = h.make_runner(h.Shape(dtype=torch.float16))
    runner.dtype = torch.bfloat16
    with pytest.raises(UnsupportedConfig, match="differs from the model dtype"):
        build(runner)


@pytest.mark.parametrize("algo, ok", [
    (SpeculativeAlgorithm.DFLASH, True), (SpeculativeAlgorithm.NONE, True), (SpeculativeAlgorithm.EAGLE, True),
    (SpeculativeAlgorithm.NGRAM, False)])
def test_speculative_algorithms(algo, ok):
    runner = h.make_runner(h.Shape())
    runner.spec_algorithm = algo
    if ok:
        build(runner)
    else:
        with pytest.raises(UnsupportedConfig, match="tree-shaped"):
            build(runner)


def _verify_setup():
    shape = h.Shape()
    runner = h.make_runner(shape)
    case = h.build_case(runner, shape, ForwardMode.TARGET_VERIFY, [3], [16])
    backend = build(runner)
    fb = h.forward_batch(runner, case)
    backend.init_forward_metadata(fb)
    return shape, case, backend, fb


def test_bidirectional_decoder_layer_raises():
    shape, case, backend, fb = _verify_setup()
    layer = h.make_layer(shape)
    layer.attn_type = AttentionType.DECODER_BIDIRECTIONAL
    with pytest.raises(ops.Unsupported, match="attention type DECODER_BIDIRECTIONAL: bidirectional decoder"):
        backend.forward(case.q.reshape(16, -1), case.k, case.v, layer, fb)


def test_score_modifiers_raise():
    shape, case, backend, fb = _verify_setup()
    with pytest.raises(ops.Unsupported, match="score modifiers is not supported"):
        backend.forward_extend(case.q.reshape(16, -1), case.k, case.v, h.make_layer(shape), fb,
                               score_mod=lambda *a: a)
