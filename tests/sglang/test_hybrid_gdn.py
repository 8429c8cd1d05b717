"""GDN hybrid targets (Qwen3.5/3.6, Qwen3-Next) on SGLang 0.5.23: ``rocm_dflash`` is the
full-attention backend inside SGLang's own ``attn_backend_wrapper`` (``HybridLinearAttnBackend``
with the real ``GDNAttnBackend``), over ``HybridLinearKVPool`` / ``HybridReqToTokenPool``.

The start-up check admits the pool, reads its buffers through a global full-attention layer
id (layer 0 is a linear layer: the pool raises for it), and the wrapper finds what it reads
off its full-attention child.  Through the wrapper the full-attention layer computes what
SGLang's own TritonAttnBackend computes in the same wrapper, and the float64 reference,
on shuffled pages with NaN in every unowned slot; the pools end equal bit for bit.
"""

import pytest
import torch
from sglang.srt.layers.attention.hybrid_linear_attn_backend import HybridLinearAttnBackend
from sglang.srt.mem_cache.memory_pool import HybridLinearKVPool
from sglang.srt.model_executor.forward_batch_info import ForwardMode

import harness as h
import hybrid_harness as hh
from dflash_rocm_plugin.sglang.backend import RocmDflashAttnBackend
from dflash_rocm_plugin.sglang.config_check import UnsupportedConfig

EXTEND, DECODE, VERIFY = ForwardMode.EXTEND, ForwardMode.DECODE, ForwardMode.TARGET_VERIFY
CASES = {
    "extend_prefix": (EXTEND, [5, 16, 0], [7, 3, 17]),
    "decode": (DECODE, [8, 31, 16], [1, 1, 1]),
    "verify_causal": (VERIFY, [1, 17, 30], [16, 16, 16]),
}
L = hh.FULL_LAYER


def test_the_real_wrapper_takes_rocm_dflash_for_full_attention():
    runner = hh.make_gdn_runner(h.Shape())
    assert isinstance(runner.token_to_kv_pool, HybridLinearKVPool)
    with pytest.raises(ValueError, match="not in full attention layers"):
        runner.token_to_kv_pool.get_key_buffer(0)  # what the check must not ask for
    backend = hh.wrapped("rocm_dflash", runner)
    assert isinstance(backend, HybridLinearAttnBackend)
    assert isinstance(backend.full_attn_backend, RocmDflashAttnBackend)
    assert type(backend.linear_attn_backend).__name__ == "GDNAttnBackend"
    assert backend.full_attn_layers == [3, 7]
    assert backend.req_to_token_pool is runner.req_to_token_pool
    assert backend.token_to_kv_pool is runner.token_to_kv_pool
    assert backend.kv_index_translator is runner.kv_index_translator


def _run(name, runner, case, layer):
    backend = hh.wrapped(name, runner)
    fb = h.forward_batch(runner, case)
    return h.run(backend, layer, fb, case.q, case.k, case.v, poison_out=name == "rocm_dflash")


@pytest.mark.parametrize("page_size", [1, 16])
@pytest.mark.parametrize("case_name", CASES)
def test_full_attention_layer_matches_triton_and_reference(case_name, page_size):
    mode, prefix, new = CASES[case_name]
    shape = h.Shape(page_size=page_size)
    runner = hh.make_gdn_runner(shape)
    case = h.build_case(runner, shape, mode, prefix, new, seed=len(case_name) + page_size, layer_id=L)
    layer = h.make_layer(shape, layer_id=L)
    other_layer = runner.token_to_kv_pool.get_key_buffer(7)
    other_layer.fill_(float("nan"))
    start = h.snapshot(runner, L)
    plugin = _run("rocm_dflash", runner, case, layer)
    plugin_pool = h.snapshot(runner, L)
    h.restore(runner, start, L)
    triton = _run("triton", runner, case, layer)

    assert not plugin.isnan().any()
    ref = h.expected(runner, case, shape, causal=True, layer_id=L)
    torch.testing.assert_close(plugin.double(), ref, atol=2e-5, rtol=2e-5)
    torch.testing.assert_close(plugin.double(), triton.double(), atol=2e-5, rtol=2e-5)
    for a, b in zip(plugin_pool, h.snapshot(runner, L)):
        assert torch.equal(a.nan_to_num(7.0), b.nan_to_num(7.0))
    assert other_layer.isnan().all(), "the step's K/V went to another full-attention layer"


def test_radix_layer_reaches_the_full_attention_child():
    """``RadixAttention.forward`` (what Qwen3.5's attention calls) through the wrapper."""
    from sglang.srt.model_executor.forward_context import ForwardContext, forward_context

    shape = h.Shape(page_size=16)
    runner = hh.make_gdn_runner(shape)
    case = h.build_case(runner, shape, VERIFY, [4, 9], [16, 16], seed=6, layer_id=L)
    backend = hh.wrapped("rocm_dflash", runner)
    fb = h.forward_batch(runner, case)
    backend.init_forward_metadata(fb)
    layer = h.make_layer(shape, layer_id=L)
    with forward_context(ForwardContext(attn_backend=backend)):
        out = layer(case.q.reshape(32, -1), case.k.reshape(32, -1), case.v.reshape(32, -1), fb)
    ref = h.expected(runner, case, shape, causal=True, layer_id=L)
    torch.testing.assert_close(out.view(case.q.shape).double(), ref, atol=2e-5, rtol=2e-5)


def test_graph_metadata_through_the_wrapper():
    """Capture-shaped metadata (the wrapper forwards the graph hooks to both children)."""
    shape = h.Shape(page_size=16)
    runner = hh.make_gdn_runner(shape)
    case = h.build_case(runner, shape, VERIFY, [3, 20], [16, 16], seed=9, layer_id=L)
    layer = h.make_layer(shape, layer_id=L)
    start = h.snapshot(runner, L)
    eager = _run("rocm_dflash", runner, case, layer)
    h.restore(runner, start, L)
    backend = hh.wrapped("rocm_dflash", runner)
    backend.full_attn_backend.init_cuda_graph_state(4, 64)
    fb = h.forward_batch(runner, case)
    backend.full_attn_backend.init_forward_metadata_out_graph(fb)
    graph = h.run(backend.full_attn_backend, layer, fb, case.q, case.k, case.v, eager=False)
    torch.testing.assert_close(graph, eager, atol=0, rtol=0)


def test_mla_hybrid_pool_is_refused_with_the_reason():
    runner = hh.make_gdn_runner(h.Shape())
    runner.token_to_kv_pool.use_mla = True
    with pytest.raises(UnsupportedConfig, match="HybridLinearKVPool holds its full-attention layers.*MLA"):
        h.make_backend("rocm_dflash", runner)
