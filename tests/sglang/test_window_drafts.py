"""DFlash2-style window drafts on SGLang 0.5.23: every draft layer is ``sliding_attention``
with the HF window 2048 (SGLang's ``RadixAttention(sliding_window_size=2047)``), blocks of 8
and 16 draft tokens over contexts shorter and longer than the window.

SGLang's DFLASH draft makes such a layer ``DECODER`` (causal) by default and ``ENCODER_ONLY``
(non-causal within the block) when the draft config says ``is_causal: false``
(``models/dflash.py::_get_dflash_layer_attention_params``); both run here against SGLang's
TritonAttnBackend and the float64 reference on shuffled pages with NaN in unowned slots.
The block is shorter than the window, so "key j visible iff p - j < 2048" is the whole rule
for the non-causal block too.  ``--speculative-draft-window-size`` (the draft worker's own
compact context) is not a layer window: the backend just sees shorter sequences.
"""

import pytest
import torch
from sglang.srt.model_executor.forward_batch_info import ForwardMode

import harness as h
from test_numerics import run_both

HF_WINDOW = 2048
SGLANG_WINDOW = HF_WINDOW - 1
CONTEXTS = [2100, 37, 2600]  # past the window, short, and well past it


@pytest.mark.parametrize("page_size", [1, 16])
@pytest.mark.parametrize("encoder_only", [True, False], ids=["non_causal", "causal"])
@pytest.mark.parametrize("block", [8, 16])
def test_dflash2_window_draft_block(block, encoder_only, page_size):
    shape = h.Shape(page_size=page_size)
    runner = h.make_runner(shape, verify_tokens=block, sliding_window=SGLANG_WINDOW, context_len=4096,
                           pool_tokens=2 * sum(CONTEXTS) + 4 * block * 16)
    case = h.build_case(runner, shape, ForwardMode.TARGET_VERIFY, CONTEXTS, [block] * len(CONTEXTS),
                        seed=block + page_size)
    layer = h.make_layer(shape, encoder_only=encoder_only, sliding_window=SGLANG_WINDOW)
    plugin, triton, plugin_pool, triton_pool = run_both(runner, shape, case, layer)

    assert not plugin.isnan().any()
    ref = h.expected(runner, case, shape, causal=not encoder_only, sglang_window=SGLANG_WINDOW)
    torch.testing.assert_close(plugin.double(), ref, atol=2e-5, rtol=2e-5)
    torch.testing.assert_close(plugin, triton, atol=2e-5, rtol=2e-5)
    for a, b in zip(plugin_pool, triton_pool):
        assert torch.equal(a.nan_to_num(7.0), b.nan_to_num(7.0))
    # The window matters here: without it the long requests attend to more keys.
    unwindowed = h.expected(runner, case, shape, causal=not encoder_only)
    assert (unwindowed - ref).abs().max() > 1e-3
