"""CUDA-graph metadata path: ``init_cuda_graph_state`` + ``init_forward_metadata_out_graph
(in_capture=True)`` gives the same attention as the eager path, and a replay for a smaller
batch padded to the captured size (SGLang's padding: request row 0, seq_len fill value,
slot 0) refills the very same buffers (graph-safe addresses) and is exact on real rows."""

import pytest
import torch
from sglang.srt.model_executor.forward_batch_info import ForwardMode

import harness as h

CAPTURE_BS = 4


def metadata_addresses(backend):
    m = backend.forward_metadata
    return [t.data_ptr() for t in (m.block_table, m.seq_lens, m.query_start_loc)]


@pytest.mark.parametrize("page_size, context_len", [(1, h.CONTEXT_LEN), (16, h.CONTEXT_LEN), (16, 1024)])
@pytest.mark.parametrize("mode, encoder_only", [
    (ForwardMode.DECODE, False), (ForwardMode.TARGET_VERIFY, False), (ForwardMode.TARGET_VERIFY, True)])
def test_capture_then_replay_smaller_batch(mode, encoder_only, page_size, context_len):
    """A long context capacity makes ops split the KV; the graph then uses the backend's
    own reserved workspace, never the shared one an eager launch may regrow."""
    shape = h.Shape(page_size=page_size)
    rows = 1 if mode == ForwardMode.DECODE else 16
    runner = h.make_runner(shape, max_bs=CAPTURE_BS, context_len=context_len)
    backend = h.make_backend("rocm_dflash", runner)
    backend.init_cuda_graph_state(CAPTURE_BS, CAPTURE_BS * rows)
    assert backend.get_cuda_graph_seq_len_fill_value() == 1
    layer = h.make_layer(shape, encoder_only=encoder_only)
    prefix = [3, 20, 9, 33] if mode == ForwardMode.TARGET_VERIFY else [7, 20, 9, 40]

    capture = h.build_case(runner, shape, mode, prefix, [rows] * CAPTURE_BS, seed=11)
    fb = h.forward_batch(runner, capture)
    backend.init_forward_metadata_out_graph(fb, in_capture=True)
    backend.init_forward_metadata_in_graph(fb)
    captured = metadata_addresses(backend)
    assert (backend.forward_metadata.workspace is not None) == (context_len > 512)
    out = h.run(backend, layer, fb, capture.q, capture.k, capture.v, eager=False)
    ref = h.expected(runner, capture, shape, causal=not encoder_only)
    torch.testing.assert_close(out.double(), ref, atol=2e-5, rtol=2e-5)

    replay = h.build_case(runner, shape, mode, [30, 2], [rows] * 2, seed=12)
    fb = h.forward_batch(runner, replay, pad_to=CAPTURE_BS)
    backend.init_forward_metadata_out_graph(fb)
    backend.init_forward_metadata_in_graph(fb)
    assert metadata_addresses(backend) == captured
    q, k, v = h.padded_qkv(replay, shape, (CAPTURE_BS - 2) * rows)
    out = h.run(backend, layer, fb, q, k, v, eager=False)
    ref = h.expected(runner, replay, shape, causal=not encoder_only)
    torch.testing.assert_close(out[: 2 * rows].double(), ref, atol=2e-5, rtol=2e-5)


def test_graph_metadata_needs_state():
    shape = h.Shape()
    runner = h.make_runner(shape)
    backend = h.make_backend("rocm_dflash", runner)
    case = h.build_case(runner, shape, ForwardMode.DECODE, [3], [1])
    with pytest.raises(RuntimeError, match="init_cuda_graph_state"):
        backend.init_forward_metadata_out_graph(h.forward_batch(runner, case), in_capture=True)


def test_extend_cannot_be_graph_captured():
    shape = h.Shape()
    runner = h.make_runner(shape)
    backend = h.make_backend("rocm_dflash", runner)
    backend.init_cuda_graph_state(4, 64)
    case = h.build_case(runner, shape, ForwardMode.EXTEND, [3], [4])
    with pytest.raises(ValueError, match="EXTEND"):
        backend.init_forward_metadata_out_graph(h.forward_batch(runner, case), in_capture=True)
