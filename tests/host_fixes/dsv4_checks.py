"""Run inside ONE sglang release (its unpacked wheel first on PYTHONPATH); print a JSON report.

Used by test_sglang_dsv4_releases.py.  The DeepSeek-V4 ROCm fixes against the release's real
code: every probe's verdict; that registration installs the start-up hook on the release's own
``dsv4`` factory and runs none of these fixes; that the hook runs them when that factory builds
for a speculating runner on (faked) ROCm, logging each outcome once, and lets the host's own
error through.  Then the "applied" path on real code written like a partial back-port:

* 0.5.12 (no HIP radix module): its CUDA ``DeepseekV4AttnBackend``, which the HIP radix backend
  was forked from, still has the lazy target verify and the unsliced draft step, and its
  ``DraftBackendFactory`` has no dispatch; each probe finds its gap, the patch closes it, and the
  probe then reports "already patched" (the HIP module is a recording stand-in for the dispatch).
* releases with the HIP module: the release's own backend and factory with one part of the fix
  taken out (subclasses in this file), against the real HIP radix module.

The only other stand-ins are the model runner (which would load a model on a GPU), ROCm itself
(``torch.version.hip``) and the eager metadata builder (which needs a KV pool).
"""

from __future__ import annotations

import contextlib
import json
import logging
import sys
import traceback
import types

import torch

DSV4_IDS = ("sglang-dsv4-hip-draft-dispatch", "sglang-dsv4-hip-eager-verify-metadata",
            "sglang-dsv4-hip-draft-step-cache-loc")


@contextlib.contextmanager
def fake_rocm():
    previous = torch.version.hip
    torch.version.hip = "6.4.0-fake"
    try:
        yield
    finally:
        torch.version.hip = previous


class Runner(types.SimpleNamespace):
    """A model runner stand-in: what the draft factories only pass along is None."""

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return None


class Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.INFO)
        self.lines = []

    def emit(self, record):
        self.lines.append([record.levelname, record.getMessage()])


def frames(call) -> dict:
    """Call: the class of what it built (a ("dsv4", backend) pair counts as the backend), or the
    exception it raised and the source files its traceback went through."""
    try:
        built = call()
    except Exception as exc:  # noqa: BLE001 - the point is where it happened
        return {"built": None, "error": type(exc).__name__,
                "files": [f.filename.rsplit("/", 1)[-1] for f in traceback.extract_tb(exc.__traceback__)]}
    pair = isinstance(built, tuple)
    return {"built": type(built[1] if pair else built).__name__, "pair": pair, "error": None, "files": []}


def per_step_draft_out_cache_loc(out_cache_loc, batch_size, topk, num_steps):
    """0.5.13.post1's eagle_utils layout ([batch, topk, step]), for 0.5.12, which has no helper."""
    return out_cache_loc.view(batch_size, topk, num_steps).permute(2, 0, 1).reshape(num_steps, -1)


# --- registration and the start-up hook ------------------------------------------------------------
def startup_checks(report):
    from sglang.srt.layers.attention.attention_registry import ATTENTION_BACKENDS
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    from dflash_rocm_plugin import hostfix
    from dflash_rocm_plugin.hostfix import code
    from dflash_rocm_plugin.sglang import register

    host_factory = ATTENTION_BACKENDS.get("dsv4")
    register()
    hook = ATTENTION_BACKENDS.get("dsv4")
    register()
    report["hook"] = {
        "host_has_dsv4": host_factory is not None,
        "installed": hook is not None and code.is_marked(hook),
        "wraps_host_factory": getattr(hook, "__wrapped__", None) is host_factory,
        "same_after_second_register": ATTENTION_BACKENDS.get("dsv4") is hook,
        "registration_ran_dsv4": sorted({s.id for s in hostfix.statuses("sglang")} & set(DSV4_IDS)),
    }
    if hook is None:
        return
    records = Records()
    fix_log = logging.getLogger("dflash_rocm_plugin.host_fixes")
    fix_log.addHandler(records)
    fix_log.setLevel(logging.INFO)
    plain = Runner(spec_algorithm=SpeculativeAlgorithm.NONE)
    eagle = Runner(spec_algorithm=SpeculativeAlgorithm.EAGLE)
    with fake_rocm():
        host_errors = [frames(lambda: hook(plain))["error"]]
        after_plain = sorted({s.id for s in hostfix.statuses("sglang")} & set(DSV4_IDS))
        host_errors += [frames(lambda: hook(eagle))["error"], frames(lambda: hook(eagle))["error"]]
    fix_log.removeHandler(records)
    fix_log.setLevel(logging.NOTSET)
    report["startup"] = {
        "ran_without_speculation": after_plain,
        "statuses": {s.id: s.as_dict() for s in hostfix.statuses("sglang") if s.id in DSV4_IDS},
        "log": [line for line in records.lines if "dsv4" in line[1]],
        "host_errors": host_errors,
    }


# --- the applied path on 0.5.12's real code -----------------------------------------------------------
def hip_stand_in():
    class Built:
        def __init__(self, *args, **kwargs):
            self.args, self.kwargs = args, kwargs

    module = types.ModuleType("deepseek_v4_backend_hip_radix")
    module.DeepseekV4HipRadixBackend = type("DeepseekV4HipRadixBackend", (Built,), {})
    module.DeepseekV4MultiStepBackend = type("DeepseekV4MultiStepBackend", (Built,), {})
    return module


def factory_instance(cls, runner):
    factory = object.__new__(cls)
    factory.draft_model_runner, factory.topk, factory.speculative_num_steps = runner, 1, 3
    return factory


def dispatch_applied(cls, hip_module) -> dict:
    from dflash_rocm_plugin.sglang.fixes import dsv4_draft_dispatch as fix

    found = fix.probe_factory(cls, hip_module)
    out = {"probe": [found.needed, found.refused, found.reason]}
    if not found.needed or found.refused:
        return out
    out["patch"] = fix.patch(found.state)
    factory = factory_instance(cls, Runner())
    with fake_rocm():
        out["rocm_decode"] = frames(factory._create_dsv4_decode_backend)
        out["rocm_prefill"] = frames(factory._create_dsv4_prefill_backend)
    out["cuda_decode"] = frames(factory._create_dsv4_decode_backend)
    again = fix.probe_factory(cls, hip_module)
    out["reprobe"] = [again.needed, again.reason]
    return out


def verify_applied(cls) -> dict:
    from dflash_rocm_plugin.sglang.fixes import dsv4_eager_verify as fix

    found = fix.probe_class(cls)
    out = {"probe": [found.needed, found.refused, found.reason]}
    if not found.needed or found.refused:
        return out
    backend = object.__new__(cls)
    backend.speculative_num_draft_tokens, backend.device = 4, "cpu"
    backend.extend_seq_lens_buffer = torch.full((1025,), 4)
    seq_lens, loc = torch.tensor([3, 8]), torch.arange(8)
    out["before"] = type(backend.init_forward_metadata_target_verify(9, torch.arange(2), seq_lens, loc)).__name__
    out["patch"] = fix.patch(found.state)
    backend.init_forward_metadata_target_verify_old = lambda **kw: ("eager", kw)
    kind, kwargs = backend.init_forward_metadata_target_verify(9, torch.arange(2), seq_lens, loc)
    out["after"] = [kind, kwargs["seq_lens_cpu"], kwargs["out_cache_loc"] is loc, sorted(kwargs)]
    out["reprobe"] = fix.probe_class(cls).reason
    return out


def step_applied(cls, helper) -> dict:
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    from dflash_rocm_plugin.sglang.fixes import dsv4_draft_step_cache_loc as fix

    without = fix.probe_class(cls, None)
    found = fix.probe_class(cls, helper)
    out = {"probe_without_helper": [without.needed, without.refused, without.reason],
           "probe": [found.needed, found.refused, found.reason]}
    if not found.needed or found.refused:
        return out
    req_to_token = torch.zeros(4, 8, dtype=torch.int32)
    backend = object.__new__(cls)
    backend.mtp_enabled, backend.req_to_token = True, req_to_token
    backend.swa_page_size, backend.page_size = 128, 256
    backend.topk, backend.speculative_num_steps, backend.speculative_step_id = 1, 3, 1
    baked = []
    backend.init_forward_metadata_decode = lambda **kw: baked.append(kw["out_cache_loc"].tolist())
    shared = torch.tensor([10, 11, 12, 20, 21, 22])
    batch = types.SimpleNamespace(
        forward_mode=ForwardMode.DECODE, batch_size=2, out_cache_loc=shared,
        req_pool_indices=torch.arange(2), seq_lens=torch.tensor([5, 7]), seq_lens_cpu=torch.tensor([5, 7]),
        req_to_token_pool=types.SimpleNamespace(req_to_token=req_to_token))
    backend.init_forward_metadata(batch)
    out["patch"] = fix.patch(found.state)
    backend.init_forward_metadata(batch)
    out["baked"] = baked  # [before the patch, after]
    out["caller_buffer_back"] = batch.out_cache_loc is shared
    out["reprobe"] = fix.probe_class(cls, helper).reason
    return out


# --- the applied path on a release with the HIP module: its own code with one part taken out ----------
def backports(hip_module, factory_cls):
    """Subclasses of the release's own classes, each with one part of the upstream fix taken out."""
    from sglang.srt.environ import envs

    hip = hip_module.DeepseekV4HipRadixBackend
    # 0.5.23 dropped the variable; the lazy route read it through envs (default on).
    if not hasattr(envs, "SGLANG_PREP_IN_CUDA_GRAPH"):
        envs = types.SimpleNamespace(SGLANG_PREP_IN_CUDA_GRAPH=types.SimpleNamespace(get=lambda: True))

    class WithoutDispatch(factory_cls):
        def _create_dsv4_decode_backend(self):
            from sglang.srt.layers.attention.deepseek_v4_backend import DeepseekV4MultiStepBackend

            return ("dsv4", DeepseekV4MultiStepBackend(self.draft_model_runner, self.topk,
                                                       self.speculative_num_steps))

        def _create_dsv4_prefill_backend(self):
            from sglang.srt.layers.attention.deepseek_v4_backend import DeepseekV4AttnBackend

            return ("dsv4", DeepseekV4AttnBackend(self.draft_model_runner, skip_prefill=False))

    class LazyVerify(hip):
        def init_forward_metadata_target_verify(self, max_seq_len, req_pool_indices, seq_lens,
                                                out_cache_loc=None, use_prefill_cuda_graph=False):
            if envs.SGLANG_PREP_IN_CUDA_GRAPH.get():
                return ("raw", req_pool_indices, seq_lens, out_cache_loc)
            return self.init_forward_metadata_target_verify_old(
                max_seq_len=max_seq_len, req_pool_indices=req_pool_indices, seq_lens=seq_lens,
                seq_lens_cpu=seq_lens.tolist(), out_cache_loc=out_cache_loc,
                use_prefill_cuda_graph=use_prefill_cuda_graph)

    class UnslicedDecode(hip):
        def init_forward_metadata(self, forward_batch):
            self.forward_metadata = self.init_forward_metadata_decode(
                max_seq_len=int(forward_batch.seq_lens_cpu.max().item()),
                req_pool_indices=forward_batch.req_pool_indices,
                seq_lens=forward_batch.seq_lens.to(torch.int32),
                out_cache_loc=forward_batch.out_cache_loc)
            self.init_forward_metadata_in_graph(forward_batch)

    class Unsliced(UnslicedDecode):
        def init_forward_metadata_in_graph(self, forward_batch):
            self.forward_metadata.core_attn_metadata.swa_out_cache_loc = (
                self.token_to_kv_pool.translate_loc_from_full_to_swa(forward_batch.out_cache_loc))

    return WithoutDispatch, LazyVerify, UnslicedDecode, Unsliced


def backport_checks(report, hip_module, factory_cls, helper):
    from dflash_rocm_plugin.sglang.fixes import dsv4_draft_step_cache_loc as step_fix

    without_dispatch, lazy_verify, unsliced_decode, unsliced = backports(hip_module, factory_cls)
    report["dispatch"] = dispatch_applied(without_dispatch, hip_module)
    report["verify"] = verify_applied(lazy_verify)
    partial = step_fix.probe_class(unsliced_decode, helper)
    found = step_fix.probe_class(unsliced, helper)
    report["step"] = {"partial": [partial.needed, partial.refused, partial.reason],
                      "probe": [found.needed, found.refused, found.reason]}


def main(version: str) -> dict:
    report = {"version": version}
    import sglang
    report["imported_from"] = sglang.__file__
    startup_checks(report)
    from dflash_rocm_plugin.sglang import host_fixes
    report["dry_run"] = {s.id: s.as_dict() for s in host_fixes.apply_deepseek_v4(patch=False)}
    from dflash_rocm_plugin import doctor
    report["doctor_fixes"] = {f["id"]: f["status"] for f in doctor.collect(("sglang",))["hosts"]["sglang"]["fixes"]}

    from dflash_rocm_plugin.hostfix import code
    from dflash_rocm_plugin.sglang.fixes import dsv4_hip
    hip_module = code.optional_module(dsv4_hip.HIP_MODULE)
    if code.optional_module(dsv4_hip.CUDA_MODULE) is None:
        return report  # no DeepSeek-V4
    from sglang.srt.speculative import draft_utils, eagle_utils
    helper = getattr(eagle_utils, "per_step_draft_out_cache_loc", None)
    report["host_helper"] = helper is not None
    if hip_module is None:
        from sglang.srt.layers.attention.deepseek_v4_backend import DeepseekV4AttnBackend
        report["dispatch"] = dispatch_applied(draft_utils.DraftBackendFactory, hip_stand_in())
        report["verify"] = verify_applied(DeepseekV4AttnBackend)
        report["step"] = step_applied(DeepseekV4AttnBackend, helper or per_step_draft_out_cache_loc)
    else:
        backport_checks(report, hip_module, draft_utils.DraftBackendFactory, helper)
    return report


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    result = main(sys.argv[1])
    print("RESULT " + json.dumps(result, default=str))
