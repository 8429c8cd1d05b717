"""The gpt-oss / Gemma-4 backend-list probe on stand-ins written like the release code (the real
releases: test_sglang_model_backend_releases.py): which constant it takes for each family, that
it leaves other families' lists alone, refuses a list it cannot widen, and patches idempotently."""

import pytest

from dflash_rocm_plugin.hostfix import Status, evaluate
from dflash_rocm_plugin.sglang.fixes import model_backends

LLAMA4 = ("fa3", "aiter", "triton")


class ServerArgs:
    """Shaped like ServerArgs._handle_model_specific_adjustments of 0.5.14 (three families)."""

    def __init__(self, arch, backend):
        self.arch, self.backend = arch, backend

    def check(self):
        if self.arch == "Llama4":
            assert self.backend in ("fa3", "aiter", "triton"), "llama4"
        elif self.arch == "GptOssForCausalLM":
            supported_backends = ["triton", "trtllm_mha", "fa3", "aiter"]
            assert self.backend in supported_backends, (
                f"GptOssForCausalLM requires one of {supported_backends} attention backend")
        elif self.arch == "Gemma4":
            accepted_backends = ("trtllm_mha", "triton", "intel_xpu")
            assert self.backend in accepted_backends, (
                "Gemma4 only supports trtllm_mha, triton, or intel_xpu attention backend, "
                f"got {self.backend}")


_MODULE_LIST = ["triton", "aiter"]


def module_list_check(backend):
    assert backend in _MODULE_LIST, f"GptOssForCausalLM requires one of {_MODULE_LIST} attention backend"


def _accepts(arch, backend):
    try:
        ServerArgs(arch, backend).check()
    except AssertionError:
        return False
    return True


def test_each_family_gets_its_own_list():
    lists = model_backends.family_allow_lists(ServerArgs.check.__code__)
    assert lists == {"GptOssForCausalLM": ("triton", "trtllm_mha", "fa3", "aiter"),
                     "Gemma4": ("trtllm_mha", "triton", "intel_xpu")}


def test_probe_patch_then_not_needed(monkeypatch):
    monkeypatch.setattr(ServerArgs.check, "__code__", ServerArgs.check.__code__)  # restored after
    fix = _fix()
    assert not _accepts("GptOssForCausalLM", "rocm_dflash") and not _accepts("Gemma4", "rocm_dflash")
    found = model_backends.probe_functions([("stand-in", ServerArgs.check)])
    assert found.needed and not found.refused
    assert "GptOssForCausalLM in stand-in" in found.reason and "Gemma4 in stand-in" in found.reason
    assert evaluate(fix).status is Status.APPLIED
    assert _accepts("GptOssForCausalLM", "rocm_dflash") and _accepts("Gemma4", "rocm_dflash")
    assert not _accepts("GptOssForCausalLM", "flashinfer") and _accepts("GptOssForCausalLM", "triton")
    assert not _accepts("Llama4", "rocm_dflash")  # another family's list is untouched
    assert LLAMA4 in ServerArgs.check.__code__.co_consts
    code = ServerArgs.check.__code__
    again = model_backends.probe_functions([("stand-in", ServerArgs.check)])
    assert not again.needed
    model_backends.patch([("stand-in", ServerArgs.check, "GptOssForCausalLM",
                           ("triton", "trtllm_mha", "fa3", "aiter"))])
    assert ServerArgs.check.__code__ is code  # nothing left to widen


def test_a_list_outside_the_code_is_refused():
    found = model_backends.probe_functions([("module", module_list_check)])
    assert found.refused and "GptOssForCausalLM in module" in found.reason
    assert "--attention-backend rocm_dflash fails that check" in found.reason


def test_a_function_without_the_asserts_needs_nothing():
    assert not model_backends.probe_functions([("other", _accepts)]).needed


def _fix():
    from dflash_rocm_plugin.hostfix import Fix
    return Fix("stand-in-model-backends", "sglang", "t", "u",
               lambda: model_backends.probe_functions([("stand-in", ServerArgs.check)]), model_backends.patch)


@pytest.fixture(autouse=True)
def fresh(monkeypatch):
    from dflash_rocm_plugin import hostfix
    for name in ("_applied", "_last"):
        monkeypatch.setattr(hostfix, name, {})
    monkeypatch.setattr(hostfix, "_logged", set())


def both_checks(arch, backend):
    if arch == "GptOssForCausalLM":
        assert backend in ("triton", "aiter"), "GptOssForCausalLM requires one of the listed backends"
    else:
        assert backend in _MODULE_LIST, "Gemma4 only supports triton or aiter"


def test_a_list_is_not_borrowed_from_the_previous_assert():
    lists = model_backends.family_allow_lists(both_checks.__code__)
    assert lists == {"GptOssForCausalLM": ("triton", "aiter"), "Gemma4": None}
    assert model_backends.probe_functions([("both", both_checks)]).refused
