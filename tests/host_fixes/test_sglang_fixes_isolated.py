"""SGLang fixes 2-4 where they ARE needed, on stand-ins written like the pre-#22342 code.

No released sglang needs them (test_sglang_releases.py proves the probes say so on real
releases); builds from between the DFLASH merge and sgl-project/sglang#22342 do.  Those
builds are not published, so each probe and patch runs here on a small class shaped like
that code: the probe must report the gap, the patch must close it with the upstream
behaviour, the probe must then report nothing to do, and patching twice changes nothing.
Also: the draft-backend decision table, and the DFlash layer-id convention (id i = output
of layer i) against SGLang's "capture before layer j" loop.
"""

import dataclasses
import types

import pytest
import torch

from dflash_rocm_plugin.sglang.fixes import draft_backend, k_rope, qwen3_capture, triton_custom_mask


# --- fix 2: Triton legacy capture/replay with custom_mask None ------------------------------
@dataclasses.dataclass
class _Meta:
    custom_mask: object
    max_extend_len: int


class LegacyTriton:
    """Shaped like the pre-#22342 TritonAttnBackend legacy graph API (unguarded mask copy)."""

    def __init__(self):
        self.cuda_graph_custom_mask = torch.zeros(64, dtype=torch.uint8)
        self.forward_metadata = None

    def init_forward_metadata_capture_cuda_graph(self, bs, num_tokens, req_pool_indices, seq_lens,
                                                 encoder_lens, forward_mode, spec_info):
        custom_mask = self.cuda_graph_custom_mask
        custom_mask[: spec_info.custom_mask.shape[0]] = spec_info.custom_mask
        self.forward_metadata = _Meta(custom_mask, num_tokens // bs)

    def init_forward_metadata_replay_cuda_graph(self, bs, req_pool_indices, seq_lens, seq_lens_sum,
                                                encoder_lens, forward_mode, spec_info, seq_lens_cpu=None):
        custom_mask = self.cuda_graph_custom_mask
        custom_mask[: spec_info.custom_mask.shape[0]] = spec_info.custom_mask
        self.forward_metadata = _Meta(custom_mask, 4)


class GuardedTriton:
    """Shaped like the 0.5.11 code: both legacy methods check the mask for None."""

    def init_forward_metadata_capture_cuda_graph(self, bs, num_tokens, req_pool_indices, seq_lens,
                                                 encoder_lens, forward_mode, spec_info):
        custom_mask = self.cuda_graph_custom_mask
        if spec_info is not None and getattr(spec_info, "custom_mask", None) is not None:
            custom_mask[: spec_info.custom_mask.shape[0]] = spec_info.custom_mask
        else:
            custom_mask = None
        self.forward_metadata = _Meta(custom_mask, num_tokens // bs)

    init_forward_metadata_replay_cuda_graph = init_forward_metadata_capture_cuda_graph


def _spec(mask):
    return types.SimpleNamespace(custom_mask=mask, draft_token_num=4)


def test_unguarded_legacy_api_crashes_then_is_fixed():
    cls = type("LegacyTritonCopy", (LegacyTriton,), dict(vars(LegacyTriton)))
    with pytest.raises(AttributeError):
        cls().init_forward_metadata_capture_cuda_graph(2, 8, None, None, None, None, _spec(None))
    found = triton_custom_mask.probe_class(cls)
    assert found.needed and not found.refused, found
    triton_custom_mask.patch(found.state)
    backend = cls()
    spec = _spec(None)
    backend.init_forward_metadata_capture_cuda_graph(2, 8, None, None, None, None, spec)
    assert backend.forward_metadata.custom_mask is None and backend.forward_metadata.max_extend_len == 4
    assert spec.custom_mask is None  # the caller's spec_info is not modified
    backend.init_forward_metadata_replay_cuda_graph(2, None, None, 0, None, None, spec_info=spec)
    assert backend.forward_metadata.custom_mask is None
    # A real mask still flows through untouched.
    mask = torch.ones(6, dtype=torch.uint8)
    backend.init_forward_metadata_capture_cuda_graph(2, 8, None, None, None, None, _spec(mask))
    assert backend.forward_metadata.custom_mask is backend.cuda_graph_custom_mask
    assert backend.cuda_graph_custom_mask[:6].sum().item() == 6
    again = triton_custom_mask.probe_class(cls)
    assert not again.needed  # marked: not wrapped twice


def test_guarded_or_modern_api_is_not_needed():
    assert not triton_custom_mask.probe_class(GuardedTriton).needed
    assert not triton_custom_mask.probe_class(type("Modern", (), {})).needed


# --- fix 3: apply_k_rope dummy query -----------------------------------------------------------
class OldDFlashAttention:
    """Shaped like the pre-#22342 draft attention: a one-head dummy query."""

    def __init__(self, rotary):
        self.rotary_emb = rotary
        self.head_dim = 8

    def apply_k_rope(self, positions, k):
        dummy_q = k.new_empty((k.shape[0], self.head_dim))
        _, k = self.rotary_emb(positions, dummy_q, k)
        return k


def _strict_rotary(num_kv_heads, head_dim):
    """Like ROCm's rotary kernel: query heads must be a multiple of the K heads."""

    def rotary(positions, q, k):
        if (q.shape[-1] // head_dim) % num_kv_heads:
            raise RuntimeError("num_heads % num_kv_heads != 0")
        return q, k + 1.0

    return rotary


def test_one_head_dummy_query_is_fixed():
    cls = type("OldDFlashAttentionCopy", (OldDFlashAttention,), dict(vars(OldDFlashAttention)))
    k = torch.zeros(3, 2 * 8)
    with pytest.raises(RuntimeError):
        cls(_strict_rotary(2, 8)).apply_k_rope(torch.arange(3), k)
    found = k_rope.probe_class(cls)
    assert found.needed, found
    k_rope.patch([found.state])
    out = cls(_strict_rotary(2, 8)).apply_k_rope(torch.arange(3), k)
    assert torch.equal(out, k + 1.0)
    assert not k_rope.probe_class(cls).needed


# --- fix 4: Qwen3 set_dflash_layers_to_capture --------------------------------------------------
class OldQwen3ForCausalLM:
    def set_eagle3_layers_to_capture(self, layer_ids=None):
        self.capture_aux_hidden_states = True
        self.model.layers_to_capture = [i + 1 for i in layer_ids]


def test_missing_capture_method_is_added():
    cls = type("OldQwen3Copy", (OldQwen3ForCausalLM,), {})
    found = qwen3_capture.probe_class(cls)
    assert found.needed, found
    qwen3_capture.patch(found.state)
    assert qwen3_capture.captured_before(cls.set_dflash_layers_to_capture, [1, 9, 17]) == ([2, 10, 18], True)
    assert not qwen3_capture.probe_class(cls).needed


def test_capture_needs_the_aux_hidden_state_machinery():
    assert qwen3_capture.probe_class(type("NoCapture", (), {})).refused


def test_wrong_convention_is_left_alone():
    def same_ids(self, layer_ids):
        self.capture_aux_hidden_states = True
        self.model.layers_to_capture = list(layer_ids)

    assert qwen3_capture.probe_class(type("OffByOne", (), {"set_dflash_layers_to_capture": same_ids})).refused


def test_capture_before_layer_convention_matches_dflash_ids():
    """SGLang's Qwen3Model loop records hidden+residual before layer j for j in layers_to_capture."""
    torch.manual_seed(0)
    num_layers, hidden = 8, 4
    weights = [torch.randn(hidden, hidden) * 0.3 for _ in range(num_layers)]
    dflash_ids = [1, 3, 6]  # DFlash: the OUTPUT of these layers

    stand_in = types.SimpleNamespace(pp_group=types.SimpleNamespace(is_last_rank=True),
                                     model=types.SimpleNamespace())
    qwen3_capture.set_dflash_layers_to_capture(stand_in, dflash_ids)

    x = torch.randn(2, hidden)
    outputs, captured = [], []
    h = x
    for j, w in enumerate(weights):
        if j in stand_in.model.layers_to_capture:
            captured.append(h)
        h = torch.tanh(h @ w)
        outputs.append(h)
    assert len(captured) == len(dflash_ids)
    for got, i in zip(captured, dflash_ids):
        assert torch.equal(got, outputs[i])


# --- fix 1: decision table and code-constant widening ---------------------------------------
ALLOWED = ("flashinfer", "fa3", "fa4", "triton", "rocm_dflash")


@pytest.mark.parametrize("requested,inherited,moves", [
    (None, None, True), ("trtllm_mha", None, True), (None, "aiter", True), ("aiter", "triton", True),
    ("triton", None, False), (None, "triton", False), ("rocm_dflash", None, False), (None, "rocm_dflash", False),
])
def test_draft_default_reason(requested, inherited, moves):
    reason = draft_backend.draft_default_reason(requested, inherited, ALLOWED)
    assert (reason is not None) == moves
    if moves and (requested or inherited):
        assert repr(requested or inherited) in reason


@pytest.mark.parametrize("on_rocm,registered", [(False, True), (True, False)])
def test_no_default_off_rocm_or_unregistered(on_rocm, registered):
    args = types.SimpleNamespace(speculative_draft_attention_backend="trtllm_mha", attention_backend=None)
    assert not draft_backend.default_on_rocm(args, ALLOWED, on_rocm=on_rocm, registered=registered)
    assert args.speculative_draft_attention_backend == "trtllm_mha"


def _resolver(server_args):
    supported_draft_backends = ("flashinfer", "fa3", "fa4", "triton")
    backend = server_args.speculative_draft_attention_backend
    return backend if backend in supported_draft_backends else "flashinfer"


def test_code_constant_widening_is_idempotent():
    fn = types.FunctionType(_resolver.__code__, _resolver.__globals__, "resolver_copy")
    args = types.SimpleNamespace(speculative_draft_attention_backend="rocm_dflash")
    assert fn(args) == "flashinfer"
    draft_backend.widen_code(fn)
    draft_backend.widen_code(fn)
    assert fn(args) == "rocm_dflash"
    assert draft_backend.allow_lists(fn.__code__) == [("flashinfer", "fa3", "fa4", "triton", "rocm_dflash")]
