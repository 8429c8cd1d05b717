"""The AITER attention path is chosen only where it can run, and never breaks a call.

AITER cannot exist on this machine (it needs ROCm), so fake ``aiter`` modules are injected
through ``sys.modules`` / ``sys.meta_path`` and ROCm is simulated by patching the platform
probe.  For each state -- absent, import raising, too old, kernel raising, working -- the tests
assert which implementation ran, that exactly one warning was given however many calls were
made (and that the import was tried once), and that the result equals the float64 reference.
The working fake computes through ``dflash_rocm_plugin.reference`` after the host-side checks
AITER's CK ``mha_batch_prefill`` makes, so a wrong argument mapping fails here.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import types

import pytest
import torch

from dflash_rocm_plugin import ops, reference
from dflash_rocm_plugin.ops import _runtime, backends
from dflash_rocm_plugin.ops.backends import aiter as aiter_backend
from dflash_rocm_plugin.ops.backends import aiter_loader
from tests.core.cases import build, check_against_reference, poisoned_like, tolerance

LOGGER = "dflash_rocm_plugin.aiter"
CALLS_PER_TEST = 2


@pytest.fixture(autouse=True)
def clean_state(clean_aiter_state):
    yield


@pytest.fixture
def rocm(monkeypatch):
    """A ROCm torch build whose (CPU-resident) tensors count as GPU tensors."""
    monkeypatch.setattr(_runtime, "is_rocm", lambda: True)
    monkeypatch.setattr(aiter_backend, "_on_gpu", lambda t: True)


class FakeAiter:
    """Installs a fake ``aiter`` with a CK-checking ``mha_batch_prefill_func``."""

    def __init__(self, monkeypatch, version="0.1.16.post2", *, raises=None, with_kernel=True):
        self.calls = []
        self.raises = raises
        module = types.ModuleType("aiter")
        module.__version__ = version
        if with_kernel:
            module.mha_batch_prefill_func = self.mha_batch_prefill_func
        monkeypatch.setitem(sys.modules, "aiter", module)

    def mha_batch_prefill_func(self, q, k, v, cu_seqlens_q, kv_indptr, kv_page_indices, max_seqlen_q,
                               max_seqlen_k, dropout_p=0.0, softmax_scale=None, logits_soft_cap=0.0,
                               causal=False, window_size=(-1, -1), out=None, block_table=None,
                               seqlen_k=None, **unused):
        self.calls.append(dict(max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k, causal=causal))
        if self.raises is not None:
            raise self.raises
        batch = cu_seqlens_q.numel() - 1
        # The host-side checks of aiter's CK mha_batch_prefill (csrc/py_itfs_ck/mha_batch_prefill_kernels.cu).
        assert q.dtype in (torch.float16, torch.bfloat16) and k.dtype == v.dtype == q.dtype
        assert cu_seqlens_q.dtype == kv_indptr.dtype == kv_page_indices.dtype == torch.int32
        assert kv_indptr.shape == (batch + 1,) and kv_indptr.is_contiguous() and cu_seqlens_q.is_contiguous()
        assert kv_page_indices.stride(-1) == 1
        assert block_table.dtype == torch.int32 and block_table.dim() == 2 and block_table.shape[0] == batch
        assert block_table.stride(-1) == 1
        assert seqlen_k.dtype == torch.int32 and seqlen_k.shape == (batch,)
        assert isinstance(max_seqlen_q, int) and isinstance(max_seqlen_k, int) and max_seqlen_k > 0
        assert k.dim() == 4 and k.shape[-1] == q.shape[-1] <= 256 and q.shape[1] % k.shape[2] == 0
        assert q.stride(-1) == k.stride(-1) == v.stride(-1) == out.stride(-1) == 1
        assert logits_soft_cap == 0.0 and tuple(window_size) == (-1, -1) and dropout_p == 0.0
        want = reference.paged_attention(q, k, v, block_table, seqlen_k, cu_seqlens_q,
                                         causal=causal, scale=softmax_scale)
        qsl = cu_seqlens_q.tolist()
        out[qsl[0]:qsl[-1]] = want[qsl[0]:qsl[-1]].to(out.dtype)
        return out


class RaisingImport:
    """A meta-path finder whose ``import aiter`` raises like AITER off ROCm; counts attempts."""

    def __init__(self, monkeypatch):
        self.attempts = 0
        monkeypatch.setattr(sys, "meta_path", [self, *sys.meta_path])

    def find_spec(self, name, path=None, target=None):
        if name == "aiter":
            self.attempts += 1
            raise RuntimeError("ROCm version file not found")
        return None


def small_case(dtype=torch.float16, **kw):
    params = dict(num_q_heads=4, num_kv_heads=2, head_dim=16, block_size=8, dtype=dtype, padding_rows=2)
    params.update(kw)
    return build([6, 13], [2, 3], **params)


def run_checked(case, *, causal=False, **kw):
    return check_against_reference(case, causal=causal, **kw)


def warnings_from(caplog):
    return [r for r in caplog.records if r.name == LOGGER and r.levelno >= logging.WARNING]


# ----------------------------------------------------------------------------- auto

def test_auto_off_rocm_never_imports_aiter(monkeypatch, caplog):
    finder = RaisingImport(monkeypatch)
    for _ in range(CALLS_PER_TEST):
        run_checked(small_case())
    assert finder.attempts == 0
    assert warnings_from(caplog) == []
    assert ops.kernel_paths()["attention"]["impl"] == "triton"


def test_auto_off_rocm_ignores_an_importable_aiter(monkeypatch):
    fake = FakeAiter(monkeypatch)
    run_checked(small_case())
    assert fake.calls == []


def test_auto_on_rocm_without_aiter_warns_once_and_uses_triton(rocm, caplog):
    for _ in range(CALLS_PER_TEST):
        run_checked(small_case())
    (warning,) = warnings_from(caplog)
    assert "import aiter" in warning.getMessage()
    info = ops.kernel_paths()["attention"]
    assert info["impl"] == "triton" and "import aiter" in info["reason"]


def test_auto_import_raising_is_tried_once_and_warned_once(rocm, monkeypatch, caplog):
    finder = RaisingImport(monkeypatch)
    for _ in range(CALLS_PER_TEST):
        run_checked(small_case())
    assert finder.attempts == 1
    (warning,) = warnings_from(caplog)
    assert "ROCm version file not found" in warning.getMessage()


@pytest.mark.parametrize("version", ["0.1.15.post3", "0.1.16.dev12+gabc"])
def test_auto_too_old_aiter_is_not_used(rocm, monkeypatch, caplog, version):
    fake = FakeAiter(monkeypatch, version=version)
    for _ in range(CALLS_PER_TEST):
        run_checked(small_case())
    assert fake.calls == []
    (warning,) = warnings_from(caplog)
    assert version in warning.getMessage() and "0.1.16" in warning.getMessage()


def test_auto_unknown_version_is_not_used(rocm, monkeypatch, caplog):
    fake = FakeAiter(monkeypatch)
    del sys.modules["aiter"].__version__  # and no amd-aiter distribution metadata here
    run_checked(small_case())
    assert fake.calls == []
    assert "version unknown" in warnings_from(caplog)[0].getMessage()


def test_auto_kernel_that_raises_is_disabled_once_and_results_stay_correct(rocm, monkeypatch, caplog):
    fake = FakeAiter(monkeypatch, raises=RuntimeError("invalid argument for batch_prefill: no matching kernel"))
    for _ in range(CALLS_PER_TEST):
        run_checked(small_case())
    assert len(fake.calls) == 1, "a disabled path must not be retried"
    (warning,) = warnings_from(caplog)
    assert "no matching kernel" in warning.getMessage() and "disabled" in warning.getMessage()
    info = ops.kernel_paths()["attention"]
    assert info["impl"] == "triton" and "no matching kernel" in info["reason"]


def test_auto_working_aiter_serves_noncausal_calls(rocm, monkeypatch, caplog):
    fake = FakeAiter(monkeypatch)
    for _ in range(CALLS_PER_TEST):
        run_checked(small_case())
    assert len(fake.calls) == CALLS_PER_TEST
    assert all(c["causal"] is False for c in fake.calls)
    assert warnings_from(caplog) == []
    info = ops.kernel_paths()
    assert info["attention"]["impl"] == "aiter+triton"
    assert info["aiter"]["usable"] and info["aiter"]["version"] == "0.1.16.post2"


def test_bf16_goes_to_aiter(rocm, monkeypatch):
    # Checked against the reference directly: the Triton interpreter's bf16 dots are unreliable.
    fake = FakeAiter(monkeypatch)
    case = small_case(dtype=torch.bfloat16)
    out = ops.paged_attention(*case.args(), causal=False, out=poisoned_like(case.q))
    want = reference.paged_attention(*case.args(), causal=False)
    valid = int(case.query_start_loc[-1])
    assert len(fake.calls) == 1
    assert (out[:valid].double() - want[:valid]).abs().max().item() <= tolerance(torch.bfloat16)


def test_host_bounds_are_passed_without_device_reads(rocm, monkeypatch):
    fake = FakeAiter(monkeypatch)
    case = small_case()
    run_checked(case)
    run_checked(case, max_query_len=5)
    capacity = case.block_table.shape[1] * case.k_cache.shape[1]
    assert fake.calls[0]["max_seqlen_q"] == case.q.shape[0]
    assert fake.calls[1]["max_seqlen_q"] == 5
    assert all(c["max_seqlen_k"] == capacity for c in fake.calls)


@pytest.mark.parametrize("why, case_kw, call_kw", [
    ("causal", {}, {"causal": True}),
    ("window", {}, {"sliding_window": 4}),
    ("softcap", {}, {"softcap": 20.0}),
    ("fp32", {"dtype": torch.float32}, {}),
    ("head_dim>128", {"head_dim": 136}, {}),
    ("heads-major cache", {"layout": "heads_major"}, {}),
    ("split override", {}, {"num_kv_splits": 2}),
])
def test_auto_unsupported_calls_stay_on_triton(rocm, monkeypatch, caplog, why, case_kw, call_kw):
    fake = FakeAiter(monkeypatch)
    run_checked(small_case(**case_kw), **call_kw)
    assert fake.calls == [], why
    assert warnings_from(caplog) == []


def test_vllm_style_cache_view_goes_to_aiter(rocm, monkeypatch):
    """K and V as kv[0], kv[1] of one [2, blocks, page, heads, dim] tensor (vLLM's layout)."""
    fake = FakeAiter(monkeypatch)
    case = small_case()
    kv = torch.stack([case.k_cache, case.v_cache])
    case.k_cache, case.v_cache = kv[0], kv[1]
    run_checked(case)
    assert len(fake.calls) == 1


def test_token_pool_view_goes_to_aiter(rocm, monkeypatch):
    """SGLang's page-size-1 pool passed as [num_slots, 1, heads, dim] views."""
    fake = FakeAiter(monkeypatch)
    run_checked(small_case(block_size=1))
    assert len(fake.calls) == 1


def test_forced_triton_never_uses_aiter(rocm, monkeypatch):
    monkeypatch.setenv(backends.ATTENTION_ENV, "triton")
    fake = FakeAiter(monkeypatch)
    run_checked(small_case())
    assert fake.calls == []
    assert ops.kernel_paths()["attention"]["impl"] == "triton"


# ----------------------------------------------------------------------------- forced aiter

def test_policies_are_not_read_at_import():
    # Even an invalid value must not break importing: it is reported at the first call.
    code = ("import os, sys; os.environ['DFLASH_ROCM_ATTENTION_IMPL'] = os.environ['DFLASH_ROCM_GREEDY_IMPL'] = 'ck'; "
            "import dflash_rocm_plugin.ops; print('aiter' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_the_policy_is_read_once_and_an_explicit_backend_wins(rocm, monkeypatch):
    fake = FakeAiter(monkeypatch)
    monkeypatch.setenv(backends.ATTENTION_ENV, "triton")
    run_checked(small_case())
    monkeypatch.setenv(backends.ATTENTION_ENV, "aiter")  # too late: read at the first call
    run_checked(small_case())
    assert fake.calls == []
    run_checked(small_case(), backend="aiter")
    assert len(fake.calls) == 1
    with pytest.raises(ValueError, match=r"backend='ck' is not one of: auto, triton, aiter"):
        ops.paged_attention(*small_case().args(), causal=False, backend="ck")


def test_forced_aiter_off_rocm_fails_at_first_use(monkeypatch):
    monkeypatch.setenv(backends.ATTENTION_ENV, "aiter")
    with pytest.raises(ops.AiterUnavailable, match=r"torch\.version\.hip"):
        ops.paged_attention(*small_case().args(), causal=False)
    assert ops.kernel_paths()["attention"]["impl"] == "error"


@pytest.mark.parametrize("state, message", [
    ("absent", r"import aiter"),
    ("import raises", r"ROCm version file not found"),
    ("old", r"0\.1\.15 is older than 0\.1\.16"),
    ("triton-only build", r"mha_batch_prefill_func"),
])
def test_forced_aiter_names_what_is_missing(rocm, monkeypatch, state, message):
    monkeypatch.setenv(backends.ATTENTION_ENV, "aiter")
    if state == "import raises":
        RaisingImport(monkeypatch)
    elif state == "old":
        FakeAiter(monkeypatch, version="0.1.15")
    elif state == "triton-only build":
        FakeAiter(monkeypatch, with_kernel=False)
    # First use is a causal (target) call: the error must not wait for a draft call.
    with pytest.raises(ops.AiterUnavailable, match=message):
        ops.paged_attention(*small_case().args(), causal=True)
    assert ops.kernel_paths()["attention"]["impl"] == "error"


def test_forced_aiter_serves_draft_and_leaves_causal_to_triton(rocm, monkeypatch):
    monkeypatch.setenv(backends.ATTENTION_ENV, "aiter")
    fake = FakeAiter(monkeypatch)
    run_checked(small_case(), causal=True)
    assert fake.calls == []
    run_checked(small_case())
    assert len(fake.calls) == 1


def test_forced_aiter_kernel_that_raises_falls_back_once(rocm, monkeypatch, caplog):
    monkeypatch.setenv(backends.ATTENTION_ENV, "aiter")
    fake = FakeAiter(monkeypatch, raises=ValueError("Batch prefill requires head size divisible by vector size"))
    for _ in range(CALLS_PER_TEST):
        run_checked(small_case())
    assert len(fake.calls) == 1
    assert len(warnings_from(caplog)) == 1


def test_bad_policy_value_is_rejected_naming_the_variable(monkeypatch):
    monkeypatch.setenv(backends.ATTENTION_ENV, "ck")
    with pytest.raises(ValueError, match=r"DFLASH_ROCM_ATTENTION_IMPL='ck'.*auto, triton, aiter"):
        ops.paged_attention(*small_case().args(), causal=False)
    assert ops.kernel_paths()["attention"]["impl"] == "error"


# ----------------------------------------------------------------------------- pieces

@pytest.mark.parametrize("version, ok", [
    ("0.1.16", True), ("0.1.16.post1", True), ("0.1.16.post1.dev3+g1a2b", True), ("0.1.17.dev4+gabc", True),
    ("v0.1.20.post1", True), ("0.2", True), ("1.0.0", True), ("0.1.16.1.dev0", True),
    ("0.1.16.dev5", False), ("0.1.16rc1", False), ("0.1.15.post3", False), ("0.1.7.post2.dev18", False),
    ("0.1.0", False), ("", False), (None, False), ("unknown", False),
])
def test_version_gate(version, ok):
    assert aiter_loader.version_ok(version) is ok


def test_describe_off_rocm_loads_nothing(monkeypatch):
    finder = RaisingImport(monkeypatch)
    info = ops.kernel_paths(device="cpu")
    assert finder.attempts == 0
    assert info["platform"]["rocm"] is False
    assert info["attention"]["impl"] == "triton" and info["greedy_sample"]["impl"] == "torch"
    assert info["aiter"]["min_version"] == "0.1.16" and info["aiter"]["usable"] is None
