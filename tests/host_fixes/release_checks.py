"""Run inside ONE sglang release (its unpacked wheel first on PYTHONPATH); print a JSON report.

Used by test_sglang_releases.py, which starts one interpreter per release because importing
sglang takes most of a minute and releases cannot share a process.  Every check calls the
release's real code; the only stand-ins are for what cannot exist on a CPU machine (the
CUDA/ROCm kernel package ``sgl_kernel``, a ROCm torch build, a GPU worker) and for the
plugin's own backend registration, which the adapter performs only on 0.5.14+ (0.5.11 needs it).
"""

from __future__ import annotations

import contextlib
import copy
import importlib
import importlib.abc
import importlib.machinery
import inspect
import json
import logging
import sys
import types


class _KernelStubs(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """sgl_kernel (and its submodules) as empty modules whose every attribute is a no-op."""

    def find_spec(self, name, path=None, target=None):
        if name == "sgl_kernel" or name.startswith("sgl_kernel."):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        module = types.ModuleType(spec.name)
        module.__path__ = []
        top_level = spec.name == "sgl_kernel"

        def attribute(name):
            # `from sgl_kernel import x` keeps failing, so guarded imports take their fallback;
            # only unguarded submodule imports (sgl_kernel.kvcacheio...) get no-op functions.
            if name.startswith("__") or top_level:
                raise AttributeError(name)
            return lambda *a, **k: None

        module.__getattr__ = attribute
        return module

    def exec_module(self, module):
        pass


def _import(name):
    """Import a release module; if only the CUDA/ROCm kernel package stops it, stub that."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if not (exc.name or "").startswith("sgl_kernel"):
            raise
    sys.modules.pop("sgl_kernel", None)
    sys.meta_path.insert(0, _KernelStubs())
    _STUBBED.append(name)
    return importlib.import_module(name)


_STUBBED: list = []


class _Stop(Exception):
    """Raised by the stand-in TpModelWorker: the draft backend has been decided."""

    def __init__(self, server_args):
        super().__init__("draft worker construction reached")
        self.backend = server_args.attention_backend


class _Anything(types.SimpleNamespace):
    """A stand-in GPU model runner: attributes the draft setup only passes along are None."""

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return None


class _ServerArgs(types.SimpleNamespace):
    def get_attention_backends(self):
        return self.prefill_attention_backend or self.attention_backend, self.attention_backend


def _server_args(draft=None, target=None):
    return _ServerArgs(speculative_draft_attention_backend=draft, attention_backend=target,
                       prefill_attention_backend=None, decode_attention_backend=None, page_size=1,
                       speculative_dflash_draft_window_size=None, speculative_draft_window_size=None,
                       skip_tokenizer_init=False, context_length=None)


@contextlib.contextmanager
def _fake_rocm():
    import torch
    previous = torch.version.hip
    torch.version.hip = "6.4.0-fake"
    try:
        yield
    finally:
        torch.version.hip = previous


class _Warnings(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def _worker_resolver(module_name, class_name):
    """Call the release's real worker __init__ up to the draft TpModelWorker; return its backend."""
    module = _import(module_name)
    cls = getattr(module, class_name)

    def resolve(server_args):
        module.TpModelWorker = lambda server_args, **kw: (_ for _ in ()).throw(_Stop(server_args))
        module.get_global_server_args = lambda: None
        runner = _Anything(model_config=types.SimpleNamespace(context_len=4096))
        target = types.SimpleNamespace(model_runner=runner, device="cpu",
                                       get_memory_pool=lambda: (None, None))
        params = list(inspect.signature(cls.__init__).parameters)[1:]
        kwargs = {p: None for p in params}
        kwargs.update(server_args=server_args, target_worker=target, gpu_id=0, tp_rank=0, nccl_port=0)
        kwargs = {k: v for k, v in kwargs.items() if k in params}
        try:
            cls.__init__(object.__new__(cls), **kwargs)
        except _Stop as stop:
            return stop.backend
        raise AssertionError("the worker never built its draft TpModelWorker")

    return resolve


def _hook_resolver():
    from sglang.srt.arg_groups import speculative_hook

    def resolve(server_args):
        speculative_hook._resolve_dflash_draft_attention_backend(server_args)
        return server_args.speculative_draft_attention_backend

    return resolve


def _draft_resolver():
    for module_name, class_name in (("sglang.srt.speculative.dflash_worker_v2", "DFlashWorkerV2"),
                                    ("sglang.srt.speculative.dflash_worker", "DFlashWorker")):
        try:
            module = _import(module_name)
        except ModuleNotFoundError as exc:
            if exc.name != module_name:
                raise
            continue
        if "supported_draft_backends" in module.__dict__.get(class_name).__init__.__code__.co_varnames:
            return "worker", _worker_resolver(module_name, class_name)
    return "arg_hook", _hook_resolver()


def _draft_code(kind):
    """The code objects the fix rewrites (to see that a second apply leaves them alone)."""
    if kind == "arg_hook":
        from sglang.srt.arg_groups import speculative_hook
        fn = speculative_hook._resolve_dflash_draft_attention_backend
    else:
        module = sys.modules.get("sglang.srt.speculative.dflash_worker_v2") or sys.modules[
            "sglang.srt.speculative.dflash_worker"]
        cls = getattr(module, "DFlashWorkerV2", None) or module.DFlashWorker
        fn = cls.__init__
    return (fn, getattr(fn, "__wrapped__", fn).__code__)


def _draft_backend_checks(report, kind, resolve):
    from dflash_rocm_plugin.sglang.fixes import draft_backend
    from sglang.srt.layers.attention.attention_registry import ATTENTION_BACKENDS

    report["draft_resolver"] = kind
    report["before_patch"] = {"explicit_rocm_dflash": resolve(_server_args(draft="rocm_dflash"))}

    from dflash_rocm_plugin import hostfix
    from dflash_rocm_plugin.sglang import register

    # The adapter's entry point applies the fixes (and registers the backend on 0.5.14+);
    # a second call must change nothing.
    register()
    status = next(s for s in hostfix.statuses("sglang") if s.id == draft_backend.FIX_ID)
    report["patch_status"] = status.as_dict()
    code_before = _draft_code(kind)
    register()
    again = next(s for s in hostfix.statuses("sglang") if s.id == draft_backend.FIX_ID)
    report["second_evaluate_same"] = again == status and _draft_code(kind) == code_before
    from dflash_rocm_plugin import doctor
    report["doctor"] = doctor.collect(("sglang",))

    after = {"explicit_rocm_dflash": resolve(_server_args(draft="rocm_dflash")),
             "explicit_triton": resolve(_server_args(draft="triton"))}
    # What the adapter does where it supports this release: rocm_dflash is a registered backend.
    ATTENTION_BACKENDS.setdefault("rocm_dflash", lambda runner: None)
    handler = _Warnings()
    logging.getLogger().addHandler(handler)
    with _fake_rocm():
        after["rocm_explicit_trtllm"] = resolve(_server_args(draft="trtllm_mha"))
        after["rocm_inherits_aiter"] = resolve(_server_args(target="aiter"))
        after["rocm_explicit_triton"] = resolve(_server_args(draft="triton"))
        args = _server_args(target="aiter")
        after["rocm_inherits_aiter_again"] = resolve(args)
        after["caller_args_after_worker"] = args.speculative_draft_attention_backend
    logging.getLogger().removeHandler(handler)
    after["rocm_warnings"] = [m for m in handler.messages if "DFLASH" in m]
    report["after_patch"] = after

    common = sys.modules.get("sglang.srt.speculative.draft_worker_common")
    if common is None:
        with contextlib.suppress(ModuleNotFoundError):
            common = importlib.import_module("sglang.srt.speculative.draft_worker_common")
    if common is not None and hasattr(common, "_SUPPORTED_DRAFT_BACKENDS"):
        report["worker_gate"] = common._resolve_draft_attention_backend_fallback(
            server_args=_server_args(draft="rocm_dflash"), algo_label="DFLASH")


def main(version: str) -> dict:
    report = {"version": version}
    import sglang
    report["imported_from"] = sglang.__file__
    report["sglang_version"] = getattr(sglang, "__version__", None)
    # Locating the release's draft resolver first also stubs sgl_kernel where only it is missing.
    kind, resolve = _draft_resolver()
    from dflash_rocm_plugin.sglang import host_fixes
    report["dry_run"] = {s.id: s.as_dict() for s in host_fixes.apply(patch=False)}
    report["dsv4_dry_run"] = {s.id: s.as_dict() for s in host_fixes.apply_deepseek_v4(patch=False)}
    if report["dry_run"]["sglang-dflash-draft-backend"]["status"] != "not needed":
        _draft_backend_checks(report, kind, resolve)
    report["stubbed_sgl_kernel_for"] = _STUBBED
    return report


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    result = main(sys.argv[1])
    print("RESULT " + json.dumps(result, default=str))
