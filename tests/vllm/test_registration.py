"""``register()`` is found through vLLM's plugin loader, makes ``rocm_dflash`` a backend name
that resolves to the plugin class, is idempotent, and registers nothing (one log line, no
exception) on a vLLM outside the supported range."""

import subprocess
import sys
from importlib.metadata import entry_points

from dflash_rocm_plugin.vllm import registration


def test_entry_point_is_discovered_and_loaded_by_vllm():
    eps = [ep for ep in entry_points(group="vllm.general_plugins") if ep.name == "rocm_dflash"]
    assert [ep.value for ep in eps] == ["dflash_rocm_plugin.vllm:register"]

    from vllm.plugins import load_general_plugins
    from vllm.v1.attention.backends.registry import AttentionBackendEnum
    load_general_plugins()
    member = AttentionBackendEnum["rocm_dflash".upper()]
    assert member is AttentionBackendEnum.CUSTOM  # spawn-safe: pickles as the built-in CUSTOM
    assert member.get_path() == registration.BACKEND_PATH
    from dflash_rocm_plugin.vllm.backend import RocmDFlashBackend
    assert member.get_class() is RocmDFlashBackend
    assert AttentionBackendEnum[RocmDFlashBackend.get_name()] is member  # Attention layer lookup


def test_register_is_idempotent(monkeypatch):
    from vllm.v1.attention.backends.registry import AttentionBackendEnum
    registration.register()
    names = list(AttentionBackendEnum._member_names_)
    for _ in range(5):
        monkeypatch.setattr(registration, "_registered", False)  # as in a fresh process, state kept
        registration.register()
        registration.register()
    assert AttentionBackendEnum._member_names_ == names
    assert AttentionBackendEnum["ROCM_DFLASH"] is AttentionBackendEnum.CUSTOM
    assert AttentionBackendEnum.CUSTOM.get_path() == registration.BACKEND_PATH


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)


def test_out_of_range_version_registers_nothing():
    proc = _run(
        "import logging; logging.basicConfig(level=logging.INFO)\n"
        "from dflash_rocm_plugin.vllm import registration as r\n"
        "r.host_version = lambda: '0.31.2'\n"
        "r.register(); r.register()\n"
        "from vllm.v1.attention.backends.registry import AttentionBackendEnum as E\n"
        "assert 'ROCM_DFLASH' not in E._member_map_, 'registered on an unsupported vLLM'\n"
        "assert not E.CUSTOM.is_overridden()\n"
        "from vllm.engine.arg_utils import EngineArgs\n"
        "assert not hasattr(EngineArgs.create_speculative_config, '_dflash_rocm_inherits_backend')\n"
        "print('OK')\n")
    assert proc.returncode == 0, proc.stderr
    assert "OK" in proc.stdout
    lines = [ln for ln in proc.stderr.splitlines() if "outside the supported range" in ln]
    assert len(lines) == 1, proc.stderr
    assert ">=0.32,<0.35" in lines[0] and "0.31.2" in lines[0]


def test_supported_versions():
    for ok in ("0.34.0", "0.33.0", "0.33.2+rocm711", "0.32.0", "0.33.1.dev12+gabc", "0.34.1.dev3+gabc"):
        assert registration.version_supported(ok), ok
    for bad in ("0.31.9", "0.35.0", "1.0.0", "not-a-version"):
        assert not registration.version_supported(bad), bad


def test_register_never_raises(monkeypatch):
    def boom():
        raise RuntimeError("host exploded")
    monkeypatch.setattr(registration, "_registered", False)
    monkeypatch.setattr(registration, "host_version", boom)
    registration.register()  # logs, does not raise


def test_a_triton_that_cannot_run_is_one_log_line_and_a_selection_reason(monkeypatch, caplog):
    import logging

    import torch

    from dflash_rocm_plugin import ops
    from dflash_rocm_plugin.ops import _runtime
    from dflash_rocm_plugin.vllm import registration
    from dflash_rocm_plugin.vllm.backend import RocmDFlashBackend

    monkeypatch.setattr(_runtime, "triton_problem", lambda: "triton 3.1.0 is older than 3.2 (stand-in)")
    monkeypatch.setattr(ops, "platform_problem", _runtime.triton_problem)
    with caplog.at_level(logging.WARNING, logger="dflash_rocm_plugin.vllm"):
        registration._warn_if_kernels_cannot_run()
    assert [r.getMessage() for r in caplog.records if "cannot run" in r.getMessage()] == [
        "dflash_rocm_plugin: rocm_dflash is registered but its kernels cannot run here: "
        "triton 3.1.0 is older than 3.2 (stand-in)"]
    reason = RocmDFlashBackend.supports_combination(128, torch.bfloat16, "auto", 16, False, False,
                                                    False, False, None)
    assert "triton 3.1.0 is older than 3.2" in reason
