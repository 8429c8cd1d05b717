"""The plugin does not depend on the ``triton`` distribution, so it checks the module instead: a
missing or too old Triton is named (once, cached), refused at selection by both adapters through
``ops.supports``, and makes ``dflash-rocm doctor`` fail with the reason."""

import sys
import types

import pytest

from dflash_rocm_plugin import doctor, ops
from dflash_rocm_plugin.ops import _runtime

check = _runtime.triton_problem.__wrapped__  # the uncached probe


def test_the_installed_triton_is_usable():
    assert check() is None


def test_a_missing_triton_is_named(monkeypatch):
    monkeypatch.setitem(sys.modules, "triton", None)
    assert "`import triton` failed" in check() and "pytorch-triton-rocm" in check()


@pytest.mark.parametrize("version", ["3.1.0", "2.3.1", "", "unknown"])
def test_an_old_or_unversioned_triton_is_named(monkeypatch, version):
    monkeypatch.setitem(sys.modules, "triton", types.SimpleNamespace(__version__=version))
    assert "older than 3.2" in check()


def test_doctor_fails_with_the_reason(monkeypatch, capsys):
    monkeypatch.setattr(ops, "platform_problem", lambda: "`import triton` failed (stand-in)")
    assert doctor.main(["--host", "vllm"]) == 1
    out = capsys.readouterr().out
    assert "triton: CANNOT RUN THE KERNELS - `import triton` failed (stand-in)" in out
    assert "status: FAILED - the kernels cannot run" in out
