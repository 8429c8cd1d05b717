"""The DeepSeek-V4 ROCm fixes where they ARE needed, on stand-ins written like partial back-ports.

No released sglang needs them (test_sglang_dsv4_releases.py proves the probes say so on the real
releases, and refuse on 0.5.12, which has no HIP radix backend).  An image that back-ported the
HIP radix backend of sgl-project/sglang#26383 without all of it does: each stand-in below is
shaped like such code (the released code with one part of the fix taken out), and the probe must
find the gap, the patch must give the upstream behaviour, and the probe must then report nothing
to do.  Also the start-up hook: SGLang's ``dsv4`` backend factory runs the fixes first, on ROCm
with speculative decoding only, and never raises into the host.
"""

import logging
import types

import pytest
import torch

from dflash_rocm_plugin import hostfix
from dflash_rocm_plugin.sglang import deepseek_v4, host_fixes
from dflash_rocm_plugin.sglang.fixes import dsv4_draft_dispatch as dispatch
from dflash_rocm_plugin.sglang.fixes import dsv4_draft_step_cache_loc as step_loc
from dflash_rocm_plugin.sglang.fixes import dsv4_eager_verify as eager_verify
from dflash_rocm_plugin.sglang.fixes import dsv4_hip


def fresh(cls):
    """A copy of a stand-in class, so that a patch stays inside one test."""
    return type(cls.__name__, cls.__bases__, dict(vars(cls)))


@pytest.fixture
def rocm(monkeypatch):
    monkeypatch.setattr(torch.version, "hip", "6.4.0-fake", raising=False)


@pytest.fixture
def not_rocm(monkeypatch):
    monkeypatch.setattr(torch.version, "hip", None, raising=False)


# --- (1) the draft factory's is_hip() dispatch ----------------------------------------------------
class _Built:
    def __init__(self, *args, **kwargs):
        self.args, self.kwargs = args, kwargs


def _hip_module():
    module = types.ModuleType(dsv4_hip.HIP_MODULE)
    module.DeepseekV4HipRadixBackend = type("DeepseekV4HipRadixBackend", (_Built,), {})
    module.DeepseekV4MultiStepBackend = type("DeepseekV4MultiStepBackend", (_Built,), {})
    return module


def is_hip():
    return False


class Factory012:
    """Shaped like 0.5.12's DraftBackendFactory: the DeepSeek-V4 draft always gets the CUDA backends."""

    def __init__(self, runner, topk, steps):
        self.draft_model_runner, self.topk, self.speculative_num_steps = runner, topk, steps

    def _create_dsv4_decode_backend(self):
        from sglang.srt.layers.attention.deepseek_v4_backend import DeepseekV4MultiStepBackend

        return DeepseekV4MultiStepBackend(self.draft_model_runner, self.topk, self.speculative_num_steps)

    def _create_dsv4_prefill_backend(self):
        from sglang.srt.layers.attention.deepseek_v4_backend import DeepseekV4AttnBackend

        return DeepseekV4AttnBackend(self.draft_model_runner, skip_prefill=False)


class Factory018WithoutDispatch(Factory012):
    """Shaped like 0.5.18's factory (returns ("dsv4", backend)) with its is_hip() branch taken out."""

    def _create_dsv4_decode_backend(self):
        from sglang.srt.layers.attention.deepseek_v4_backend import DeepseekV4MultiStepBackend

        return ("dsv4", DeepseekV4MultiStepBackend(self.draft_model_runner, self.topk,
                                                   self.speculative_num_steps))

    def _create_dsv4_prefill_backend(self):
        from sglang.srt.layers.attention.deepseek_v4_backend import DeepseekV4AttnBackend

        return ("dsv4", DeepseekV4AttnBackend(self.draft_model_runner, skip_prefill=False))


class Factory013(Factory012):
    """Shaped like 0.5.13.post1: the HIP radix backends when is_hip()."""

    def _create_dsv4_decode_backend(self):
        if is_hip():
            from sglang.srt.layers.attention.deepseek_v4_backend_hip_radix import DeepseekV4MultiStepBackend
        else:
            from sglang.srt.layers.attention.deepseek_v4_backend import DeepseekV4MultiStepBackend
        return DeepseekV4MultiStepBackend(self.draft_model_runner, self.topk, self.speculative_num_steps)

    def _create_dsv4_prefill_backend(self):
        if is_hip():
            from sglang.srt.layers.attention.deepseek_v4_backend_hip_radix import DeepseekV4HipRadixBackend

            return DeepseekV4HipRadixBackend(self.draft_model_runner, skip_prefill=False)
        from sglang.srt.layers.attention.deepseek_v4_backend import DeepseekV4AttnBackend

        return DeepseekV4AttnBackend(self.draft_model_runner, skip_prefill=False)


@pytest.mark.parametrize("standin,pair", [(Factory012, False), (Factory018WithoutDispatch, True)])
def test_missing_dispatch_is_patched(standin, pair, rocm):
    cls, hip = fresh(standin), _hip_module()
    found = dispatch.probe_factory(cls, hip)
    assert found.needed and not found.refused, found
    assert "no is_hip() dispatch" in found.reason
    dispatch.patch(found.state)
    runner = object()
    decode = cls(runner, 1, 3)._create_dsv4_decode_backend()
    prefill = cls(runner, 1, 3)._create_dsv4_prefill_backend()
    if pair:
        assert decode[0] == prefill[0] == "dsv4"
        decode, prefill = decode[1], prefill[1]
    assert type(decode) is hip.DeepseekV4MultiStepBackend and decode.args == (runner, 1, 3)
    assert type(prefill) is hip.DeepseekV4HipRadixBackend
    assert prefill.args == (runner,) and prefill.kwargs == {"skip_prefill": False}
    again = dispatch.probe_factory(cls, hip)
    assert not again.needed and again.reason == "already patched"
    patched = cls._create_dsv4_decode_backend
    dispatch.patch(found.state)  # a second patch wraps nothing twice
    assert cls._create_dsv4_decode_backend is patched


def test_patched_dispatch_leaves_other_platforms_to_the_host(not_rocm):
    cls = fresh(Factory012)
    found = dispatch.probe_factory(cls, _hip_module())
    dispatch.patch(found.state)
    with pytest.raises(ModuleNotFoundError) as raised:  # the host's CUDA import ran
        cls(object(), 1, 3)._create_dsv4_decode_backend()
    assert raised.value.name.startswith("sglang")


def test_dispatch_verdicts():
    assert not dispatch.probe_factory(Factory013, _hip_module()).needed
    no_hip = dispatch.probe_factory(Factory012, None)
    assert no_hip.refused and "move to sglang 0.5.13.post1" in no_hip.reason
    assert not dispatch.probe_factory(type("Factory011", (), {}), None).needed
    incomplete = _hip_module()
    del incomplete.DeepseekV4MultiStepBackend
    assert dispatch.probe_factory(Factory012, incomplete).refused


# --- (2) eager target-verify metadata --------------------------------------------------------------
envs = types.SimpleNamespace(SGLANG_PREP_IN_CUDA_GRAPH=types.SimpleNamespace(get=lambda: True))


class RawVerify(types.SimpleNamespace):
    pass


class LazyVerifyHipRadix:
    """Shaped like the HIP radix backend with the CUDA backend's lazy target-verify route kept."""

    speculative_num_draft_tokens = 4

    def init_forward_metadata_target_verify(self, max_seq_len, req_pool_indices, seq_lens,
                                            out_cache_loc=None, extend_seq_lens=None,
                                            use_prefill_cuda_graph=False):
        if envs.SGLANG_PREP_IN_CUDA_GRAPH.get():
            return RawVerify(req_pool_indices=req_pool_indices, seq_lens=seq_lens, out_cache_loc=out_cache_loc)
        seq_lens_cpu = seq_lens.tolist()
        return self.init_forward_metadata_target_verify_old(
            max_seq_len=max_seq_len, req_pool_indices=req_pool_indices, seq_lens=seq_lens,
            seq_lens_cpu=seq_lens_cpu, out_cache_loc=out_cache_loc,
            use_prefill_cuda_graph=use_prefill_cuda_graph)

    def init_forward_metadata_target_verify_old(self, max_seq_len, req_pool_indices, seq_lens,
                                                seq_lens_cpu=None, out_cache_loc=None,
                                                use_prefill_cuda_graph=False):
        return ("eager", max_seq_len, [x + self.speculative_num_draft_tokens for x in seq_lens_cpu],
                out_cache_loc, use_prefill_cuda_graph)


class EagerVerifyHipRadix(LazyVerifyHipRadix):
    """Shaped like 0.5.13.post1: always the eager builder."""

    def init_forward_metadata_target_verify(self, max_seq_len, req_pool_indices, seq_lens,
                                            out_cache_loc=None, extend_seq_lens=None,
                                            use_prefill_cuda_graph=False):
        seq_lens_cpu = seq_lens.tolist()
        return self.init_forward_metadata_target_verify_old(
            max_seq_len=max_seq_len, req_pool_indices=req_pool_indices, seq_lens=seq_lens,
            seq_lens_cpu=seq_lens_cpu, out_cache_loc=out_cache_loc,
            use_prefill_cuda_graph=use_prefill_cuda_graph)


def test_lazy_target_verify_is_made_eager():
    cls = fresh(LazyVerifyHipRadix)
    seq_lens, loc = torch.tensor([1, 5]), torch.arange(8)
    assert isinstance(cls().init_forward_metadata_target_verify(7, None, seq_lens, loc), RawVerify)
    found = eager_verify.probe_class(cls)
    assert found.needed and not found.refused and "SGLANG_PREP_IN_CUDA_GRAPH" in found.reason, found
    eager_verify.patch(found.state)
    patched = cls.init_forward_metadata_target_verify
    eager_verify.patch(found.state)
    assert cls.init_forward_metadata_target_verify is patched
    got = cls().init_forward_metadata_target_verify(7, None, seq_lens, loc, use_prefill_cuda_graph=True)
    assert got == ("eager", 7, [5, 9], loc, True)
    positional = cls().init_forward_metadata_target_verify(7, None, seq_lens, loc, None, False)
    assert positional == ("eager", 7, [5, 9], loc, False)
    assert eager_verify.probe_class(cls).reason == "already patched"


def test_eager_verify_verdicts():
    assert not eager_verify.probe_class(EagerVerifyHipRadix).needed
    no_builder = fresh(LazyVerifyHipRadix)
    del no_builder.init_forward_metadata_target_verify_old
    refused = eager_verify.probe_class(no_builder)
    assert refused.refused and "init_forward_metadata_target_verify_old" in refused.reason
    assert eager_verify.probe_class(type("NoVerify", (), {})).refused


# --- (3) each draft step's out_cache_loc slice -------------------------------------------------
def per_step_draft_out_cache_loc(out_cache_loc, batch_size, topk, num_steps):
    """The host helper's layout (eagle_utils, 0.5.13.post1+): slots are [batch, topk, step]."""
    return out_cache_loc.view(batch_size, topk, num_steps).permute(2, 0, 1).reshape(num_steps, -1)


class Mode:
    def __init__(self, name):
        self.name = name

    def is_decode_or_idle(self):
        return self.name in ("DECODE", "IDLE")


def _batch(mode="DECODE", bs=2, slots=None):
    loc = torch.tensor([10, 11, 12, 20, 21, 22]) if slots is None else slots
    return types.SimpleNamespace(forward_mode=Mode(mode), batch_size=bs, out_cache_loc=loc,
                                 req_pool_indices=torch.arange(bs), seq_lens=torch.full((bs,), 9))


class UnslicedHipRadix:
    """Shaped like a back-ported HIP radix backend without the per-step slice."""

    def __init__(self, model_runner=None, skip_prefill=False, speculative_step_id=0, topk=0,
                 speculative_num_steps=0):
        self.topk, self.speculative_num_steps = topk, speculative_num_steps
        self.speculative_step_id = speculative_step_id
        self.forward_metadata = self.swa_out_cache_loc = None

    def init_forward_metadata_decode(self, req_pool_indices, seq_lens, out_cache_loc):
        assert req_pool_indices.shape[0] == seq_lens.shape[0] == out_cache_loc.shape[0]
        return ("decode", out_cache_loc.clone())

    def init_forward_metadata(self, forward_batch):
        if forward_batch.forward_mode.is_decode_or_idle():
            metadata = self.init_forward_metadata_decode(
                req_pool_indices=forward_batch.req_pool_indices, seq_lens=forward_batch.seq_lens,
                out_cache_loc=forward_batch.out_cache_loc)
        else:
            metadata = ("other", forward_batch.out_cache_loc.clone())
        self.forward_metadata = metadata
        self.init_forward_metadata_in_graph(forward_batch)

    def init_forward_metadata_in_graph(self, forward_batch):
        if forward_batch.out_cache_loc is not None:
            # stands for token_to_kv_pool.translate_loc_from_full_to_swa(out_cache_loc)
            self.swa_out_cache_loc = forward_batch.out_cache_loc + 1000


class SlicedInGraphOnly(UnslicedHipRadix):
    """A partial back-port: the in-graph SWA target is sliced, the decode metadata is not."""

    def init_forward_metadata_in_graph(self, forward_batch):
        loc = forward_batch.out_cache_loc
        if forward_batch.forward_mode.is_decode_or_idle() and self.topk > 0 and self.speculative_num_steps > 1:
            loc = per_step_draft_out_cache_loc(loc, forward_batch.batch_size, self.topk,
                                               self.speculative_num_steps)[self.speculative_step_id]
        self.swa_out_cache_loc = loc + 1000


class SlicedHipRadix(SlicedInGraphOnly):
    """Shaped like 0.5.13.post1: both entry points slice."""

    def init_forward_metadata(self, forward_batch):
        loc = forward_batch.out_cache_loc
        if self.topk > 0 and self.speculative_num_steps > 1:
            loc = per_step_draft_out_cache_loc(loc, forward_batch.batch_size, self.topk,
                                               self.speculative_num_steps)[self.speculative_step_id]
        self.forward_metadata = self.init_forward_metadata_decode(
            req_pool_indices=forward_batch.req_pool_indices, seq_lens=forward_batch.seq_lens, out_cache_loc=loc)
        self.init_forward_metadata_in_graph(forward_batch)


class DelegatingSlicedHipRadix(SlicedInGraphOnly):
    """Shaped like 0.5.23: init_forward_metadata delegates the slice to a builder method."""

    def init_forward_metadata(self, forward_batch):
        self.forward_metadata = self._build_forward_metadata(forward_batch)
        self.init_forward_metadata_in_graph(forward_batch)

    def _build_forward_metadata(self, forward_batch):
        loc = per_step_draft_out_cache_loc(forward_batch.out_cache_loc, forward_batch.batch_size,
                                           self.topk, self.speculative_num_steps)[self.speculative_step_id]
        return self.init_forward_metadata_decode(forward_batch.req_pool_indices, forward_batch.seq_lens, loc)


class DelegatingUnslicedHipRadix(UnslicedHipRadix):
    """Shaped like 0.5.23's delegation with the slice taken out of the builder."""

    def init_forward_metadata(self, forward_batch):
        self.forward_metadata = self._build_forward_metadata(forward_batch)
        self.init_forward_metadata_in_graph(forward_batch)

    def _build_forward_metadata(self, forward_batch):
        return self.init_forward_metadata_decode(forward_batch.req_pool_indices, forward_batch.seq_lens,
                                                 forward_batch.out_cache_loc)


def test_unsliced_draft_steps_are_sliced():
    cls = fresh(UnslicedHipRadix)
    step1 = cls(speculative_step_id=1, topk=1, speculative_num_steps=3)
    with pytest.raises(AssertionError):  # the whole 3-step buffer reaches the decode builder
        step1.init_forward_metadata(_batch())
    found = step_loc.probe_class(cls, per_step_draft_out_cache_loc)
    assert found.needed and not found.refused, found
    assert "init_forward_metadata," in found.reason and "init_forward_metadata_in_graph" in found.reason
    step_loc.patch(found.state)
    patched = cls.init_forward_metadata
    step_loc.patch(found.state)
    assert cls.init_forward_metadata is patched

    batch = _batch()
    shared = batch.out_cache_loc
    step1.init_forward_metadata(batch)
    assert step1.forward_metadata[0] == "decode" and step1.forward_metadata[1].tolist() == [11, 21]
    assert step1.swa_out_cache_loc.tolist() == [1011, 1021]
    assert batch.out_cache_loc is shared  # the caller's buffer is put back
    step2 = cls(speculative_step_id=2, topk=1, speculative_num_steps=3)
    step2.init_forward_metadata_in_graph(batch)  # the graph runner's call: the whole buffer again
    assert step2.swa_out_cache_loc.tolist() == [1012, 1022]
    assert step_loc.probe_class(cls, per_step_draft_out_cache_loc).reason == "already patched"


def test_sliced_entry_points_leave_other_batches_alone():
    cls = fresh(UnslicedHipRadix)
    step_loc.patch(step_loc.probe_class(cls, per_step_draft_out_cache_loc).state)
    target = cls(topk=1, speculative_num_steps=3)  # MTP target backend: no step id, one slot per request
    target.init_forward_metadata(_batch(slots=torch.tensor([5, 6])))
    assert target.forward_metadata[1].tolist() == [5, 6]
    one_step = cls(topk=1, speculative_num_steps=1)
    one_step.init_forward_metadata(_batch(slots=torch.tensor([5, 6])))
    assert one_step.forward_metadata[1].tolist() == [5, 6]
    verify = cls(speculative_step_id=1, topk=1, speculative_num_steps=3)
    verify.init_forward_metadata(_batch(mode="TARGET_VERIFY"))
    assert verify.forward_metadata[0] == "other"
    assert verify.forward_metadata[1].tolist() == [10, 11, 12, 20, 21, 22]


def test_step_slice_verdicts():
    for sliced in (SlicedHipRadix, DelegatingSlicedHipRadix):
        found = step_loc.probe_class(sliced, per_step_draft_out_cache_loc)
        assert not found.needed and "per_step_draft_out_cache_loc" in found.reason, found
    delegating = step_loc.probe_class(DelegatingUnslicedHipRadix, per_step_draft_out_cache_loc)
    assert delegating.needed and "init_forward_metadata," in delegating.reason  # seen through the builder
    partial = step_loc.probe_class(SlicedInGraphOnly, per_step_draft_out_cache_loc)
    assert partial.refused and "the other entry point slices" in partial.reason
    assert step_loc.probe_class(UnslicedHipRadix, None).refused

    class NoSteps(UnslicedHipRadix):
        def __init__(self, model_runner=None):
            self.topk = self.speculative_num_steps = 0

    assert "speculative_step_id" in step_loc.probe_class(NoSteps, per_step_draft_out_cache_loc).reason


# --- the start-up hook ------------------------------------------------------------------------------
class _Algo:
    def __init__(self, name):
        self.name = name

    def is_none(self):
        return self.name == "NONE"


def _runner(algo="EAGLE"):
    return types.SimpleNamespace(spec_algorithm=_Algo(algo))


def test_speculative():
    assert deepseek_v4.speculative(_runner("EAGLE"))
    assert not deepseek_v4.speculative(_runner("NONE"))
    args = types.SimpleNamespace(speculative_algorithm="EAGLE")
    assert deepseek_v4.speculative(types.SimpleNamespace(server_args=args))
    assert not deepseek_v4.speculative(types.SimpleNamespace())


def test_watch_wraps_the_host_factory_once(monkeypatch):
    ran = []
    monkeypatch.setattr(host_fixes, "apply_deepseek_v4", lambda: ran.append("fixes") or ["st"])

    def create_dsv4_backend(runner):
        ran.append("host")
        if runner.spec_algorithm.name == "BROKEN":
            raise RuntimeError("the host's own failure")
        return "backend"

    backends = {"dsv4": create_dsv4_backend, "triton": print}
    assert deepseek_v4.watch(backends) and deepseek_v4.watch(backends)
    wrapped = backends["dsv4"]
    assert wrapped.__wrapped__ is create_dsv4_backend and backends["triton"] is print
    monkeypatch.setattr(torch.version, "hip", "6.4.0-fake", raising=False)
    assert wrapped(_runner()) == "backend" and ran == ["fixes", "host"]
    ran.clear()
    assert wrapped(_runner("NONE")) == "backend" and ran == ["host"]  # no speculation: nothing to check
    with pytest.raises(RuntimeError, match="the host's own failure"):
        wrapped(_runner("BROKEN"))
    monkeypatch.setattr(torch.version, "hip", None, raising=False)
    ran.clear()
    assert wrapped(_runner()) == "backend" and ran == ["host"]  # not ROCm
    assert not deepseek_v4.watch({})


def test_check_never_raises(monkeypatch, caplog):
    monkeypatch.setattr(host_fixes, "apply_deepseek_v4", lambda: 1 / 0)
    with caplog.at_level(logging.ERROR):
        assert deepseek_v4.check(_runner(), on_rocm=True) == []
    assert "DeepSeek-V4 host fixes failed" in caplog.text
    assert deepseek_v4.check(None, on_rocm=True) == []


def test_registration_does_not_run_the_deepseek_v4_fixes():
    assert {f.id for f in host_fixes.DEEPSEEK_V4_FIXES} == {
        dispatch.FIX_ID, eager_verify.FIX_ID, step_loc.FIX_ID}
    assert set(host_fixes.DEEPSEEK_V4_FIXES) <= set(host_fixes.FIXES)
    ids = {s.id for s in host_fixes.apply(patch=False)}
    assert ids and not ids & {f.id for f in host_fixes.DEEPSEEK_V4_FIXES}
    statuses = host_fixes.apply_deepseek_v4(patch=False)
    assert [s.id for s in statuses] == [f.id for f in host_fixes.DEEPSEEK_V4_FIXES]
    assert {s.status for s in statuses} == {hostfix.Status.NOT_NEEDED}  # no sglang here
