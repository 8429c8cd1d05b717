"""The target-verify trap: at TARGET_VERIFY graph capture SGLang hands an all-True
``custom_mask`` to backends whose class name is missing from
``dflash_utils._DFLASH_VERIFY_SKIP_CUSTOM_MASK_BACKENDS``; a backend honouring it would
replay the target verify non-causally (lossless, but acceptance collapses).  Proves the
plugin is on that list (and that without registration it would not be), and that even
an all-True mask leaves DFLASH target verify causal on the eager and graph paths, while
SGLang's Triton backend, which honours masks, turns non-causal under the same mask."""

import pytest
import torch
from sglang.srt.model_executor.forward_batch_info import ForwardMode
from sglang.srt.speculative import dflash_utils

import harness as h
from dflash_rocm_plugin.sglang import registration

PREFIX, BLOCK = [6, 21], 16


def all_true_mask(prefix):
    return torch.ones(sum(BLOCK * (p + BLOCK) for p in prefix) + 64, dtype=torch.bool)


def capture_time_mask(backend, is_draft_worker=False):
    """What decode_cuda_graph_runner puts into DFlashVerifyInput.custom_mask at capture."""
    _, build_custom_mask = dflash_utils.resolve_dflash_verify_mask_policy(backend)
    return None if (is_draft_worker or not build_custom_mask) else all_true_mask(PREFIX)


def test_plugin_is_on_the_skip_list(monkeypatch):
    runner = h.make_runner(h.Shape())
    backend = h.make_backend("rocm_dflash", runner)
    assert type(backend).__name__ == registration.BACKEND_CLASS_NAME
    assert capture_time_mask(backend) is None
    # Without the registration step the runner would capture with the all-True mask.
    original = dflash_utils._DFLASH_VERIFY_SKIP_CUSTOM_MASK_BACKENDS - {registration.BACKEND_CLASS_NAME}
    monkeypatch.setattr(dflash_utils, "_DFLASH_VERIFY_SKIP_CUSTOM_MASK_BACKENDS", original)
    assert capture_time_mask(backend) is not None
    # Building the backend (in any scheduler process) puts it back before any capture.
    h.make_backend("rocm_dflash", runner)
    assert capture_time_mask(backend) is None


@pytest.mark.parametrize("graph_path", [False, True])
def test_all_true_mask_keeps_target_verify_causal(graph_path):
    shape = h.Shape(page_size=16)
    runner = h.make_runner(shape)
    case = h.build_case(runner, shape, ForwardMode.TARGET_VERIFY, PREFIX, [BLOCK] * 2, seed=21)
    causal = h.expected(runner, case, shape, causal=True)
    non_causal = h.expected(runner, case, shape, causal=False)
    assert (causal - non_causal).abs().max() > 0.05
    layer = h.make_layer(shape)  # the target's DECODER layer
    start = h.snapshot(runner)

    backend = h.make_backend("rocm_dflash", runner)
    fb = h.forward_batch(runner, case, custom_mask=all_true_mask(PREFIX))
    if graph_path:
        backend.init_cuda_graph_state(4, 4 * BLOCK)
        backend.init_forward_metadata_out_graph(fb, in_capture=True)
    out = h.run(backend, layer, fb, case.q, case.k, case.v, eager=not graph_path)
    torch.testing.assert_close(out.double(), causal, atol=2e-5, rtol=2e-5)

    # Control: a backend that honours the mask falls into the trap on the same batch.
    h.restore(runner, start)
    triton = h.make_backend("triton", runner)
    fb = h.forward_batch(runner, case, custom_mask=all_true_mask(PREFIX))
    out = h.run(triton, layer, fb, case.q, case.k, case.v, poison_out=False)
    torch.testing.assert_close(out.double(), non_causal, atol=2e-5, rtol=2e-5)
