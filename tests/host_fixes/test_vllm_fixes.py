"""The vLLM host fixes: probes on the real release sources, patches on stand-ins.

ROCm attention modules do not run on a CPU machine, so the probes' source checks run on
the files of the published wheels (0.20.0, 0.25.0, 0.32.0, 0.33.0, 0.34.0, from the shared wheel
cache) and on the same files with this repository's diff applied; the patches run on small
classes written like those files.  Proves: ROCM_AITER_FA's extend path hard-codes
causal=True in every checked release and the diff removes exactly that; the runtime patch
turns that call non-causal only for non-causal metadata inside extend_forward (other
callers, causal batches and sliding-window layers unchanged); the non-causal-claim probe
finds no false claim in 0.33.0's and 0.34.0's ROCM_AITER_UNIFIED_ATTN and does find one shaped like the
state #40176 fixed.
"""

import subprocess
import types
from pathlib import Path

import pytest
import torch

from dflash_rocm_plugin.hostfix import code as _code
from dflash_rocm_plugin.vllm.fixes import _source, aiter_fa_extend, noncausal_claims
from tests.host_fixes import _releases

AITER_FA = "vllm/v1/attention/backends/rocm_aiter_fa.py"
UNIFIED = "vllm/v1/attention/backends/rocm_aiter_unified_attn.py"
VERSIONS = ("0.20.0", "0.25.0", "0.32.0", "0.33.0", "0.34.0")


def _wheel_file(version, member):
    text = _releases.wheel_member("vllm", version, member)
    if text is None:
        pytest.skip(f"vllm {version} wheel not cached and the registry is unreachable")
    return text


def _extend_forward(source):
    start = source.index("    def extend_forward(")
    end = source.index("\n    def ", start + 10)
    return source[start:end]


@pytest.mark.parametrize("version", VERSIONS)
def test_release_extend_path_hard_codes_causal(version):
    src = _wheel_file(version, AITER_FA)
    assert _source.hardcoded_causal_calls(_extend_forward(src), aiter_fa_extend.CALLEE)
    assert "rocm_aiter_ops.flash_attn_varlen_func" in _extend_forward(src)


@pytest.mark.parametrize("version", VERSIONS)
def test_diff_closes_exactly_the_probed_gap(version, tmp_path):
    src = _wheel_file(version, AITER_FA)
    target = tmp_path / AITER_FA
    target.parent.mkdir(parents=True)
    target.write_text(src)
    diff = _releases.REPO / "patches/vllm" / version / "0001-rocm-aiter-fa-extend-honours-causal.diff"
    subprocess.run(["patch", "-p1", "-s", "-d", str(tmp_path), "-i", str(diff)], check=True)
    patched = target.read_text()
    assert not _source.hardcoded_causal_calls(_extend_forward(patched), aiter_fa_extend.CALLEE)
    # Everything outside extend_forward is byte-identical (sliding-window path included).
    assert patched.replace(_extend_forward(patched), "") == src.replace(_extend_forward(src), "")


@pytest.mark.parametrize("version", ["0.33.0", "0.34.0"])
def test_unified_attention_claim_is_honest(version):
    src = _wheel_file(version, UNIFIED)
    assert "def supports_non_causal" in src and "return False" in src.split("def supports_non_causal")[1][:200]


# --- the runtime patch on a module shaped like rocm_aiter_fa ---------------------------------------
class _Ops:
    def __init__(self):
        self.calls = []

    def flash_attn_varlen_func(self, **kwargs):
        self.calls.append(kwargs["causal"])

    def other(self):
        return "delegated"


def _stand_in_module():
    module = types.ModuleType("stand_in_rocm_aiter_fa")
    module.rocm_aiter_ops = _Ops()
    code = '''
class AiterFlashAttentionBackend:
    @classmethod
    def supports_non_causal(cls):
        return True

    @staticmethod
    def get_impl_cls():
        return AiterFlashAttentionImpl


class AiterFlashAttentionImpl:
    def __init__(self, sliding_window=(-1, -1)):
        self.sliding_window = sliding_window

    def extend_forward(self, attn_metadata, query):
        rocm_aiter_ops.flash_attn_varlen_func(q=query, causal=True, return_lse=True)

    def prefill(self, attn_metadata, query):
        rocm_aiter_ops.flash_attn_varlen_func(q=query, causal=True)
'''
    path = Path(__file__).with_name("_stand_in_rocm_aiter_fa.py")
    exec(compile(code, str(path), "exec"), module.__dict__)
    for name in ("AiterFlashAttentionBackend", "AiterFlashAttentionImpl"):
        getattr(module, name).__module__ = module.__name__
    return module, code


def test_extend_patch_behaviour(monkeypatch):
    module, code = _stand_in_module()
    monkeypatch.setattr(_code, "source_of", lambda obj: code if obj.__name__ == "extend_forward" else None)
    found = aiter_fa_extend.probe_module(module)
    assert found.needed and not found.refused, found
    ops = module.rocm_aiter_ops
    aiter_fa_extend.patch(found.state)
    impl = module.AiterFlashAttentionImpl()
    impl.extend_forward(types.SimpleNamespace(causal=False), "q")
    impl.extend_forward(types.SimpleNamespace(causal=True), "q")
    impl.prefill(types.SimpleNamespace(causal=False), "q")  # not the extend path: unchanged
    module.AiterFlashAttentionImpl(sliding_window=(127, 0)).extend_forward(types.SimpleNamespace(causal=False), "q")
    assert ops.calls == [False, True, True, True]
    assert module.rocm_aiter_ops.other() == "delegated"
    assert not aiter_fa_extend.probe_module(module).needed  # marked: not wrapped twice


def test_extend_probe_without_non_causal_claim(monkeypatch):
    module, code = _stand_in_module()
    module.AiterFlashAttentionBackend.supports_non_causal = classmethod(lambda cls: False)
    assert not aiter_fa_extend.probe_module(module).needed


def test_extend_probe_refuses_without_source(monkeypatch):
    module, _ = _stand_in_module()
    monkeypatch.setattr(_code, "source_of", lambda obj: None)
    assert aiter_fa_extend.probe_module(module).refused


def test_probes_off_rocm():
    # This machine's torch is not a ROCm build: nothing to patch, and each probe says why.
    for probe in (aiter_fa_extend.probe, noncausal_claims.probe):
        found = probe()
        assert not found.needed and "ROCm" in found.reason


def test_extend_probe_without_vllm(monkeypatch):
    monkeypatch.setattr(torch.version, "hip", "6.4.0-fake")
    found = aiter_fa_extend.probe()  # the hostfix environment has no vLLM at all
    assert not found.needed and "not importable" in found.reason


# --- the non-causal claim probe ---------------------------------------------------------------------
class _HonestImpl:
    def forward(self, attn_metadata):
        return unified_attention(causal=attn_metadata.causal)  # noqa: F821


class _CausalOnlyImpl:
    def forward(self, attn_metadata):
        return unified_attention(causal=True)  # noqa: F821


def _backend(name, impl, claims=True):
    return type(name, (), {"supports_non_causal": classmethod(lambda cls: claims),
                           "get_impl_cls": staticmethod(lambda: impl)})


def test_false_claim_found_and_withdrawn():
    honest = _backend("RocmAttentionBackend", _HonestImpl)
    liar = _backend("RocmAiterUnifiedAttentionBackend", _CausalOnlyImpl)
    quiet = _backend("Quiet", _CausalOnlyImpl, claims=False)
    found = noncausal_claims.probe_backends([honest, liar, quiet])
    assert found.needed and found.state == [liar], found
    noncausal_claims.patch(found.state)
    assert liar.supports_non_causal() is False and honest.supports_non_causal() is True
    assert not noncausal_claims.probe_backends([honest, liar, quiet]).needed


def test_source_helpers():
    src = "def f(m):\n    g(causal=True)\n    g(causal=m.causal)\n    h(causal=True)\n"
    assert _source.hardcoded_causal_calls(src, "g") == [2]
    assert _source.reads_causal_flag(src)
    assert not _source.reads_causal_flag("def f():\n    g(causal=True)\n")
