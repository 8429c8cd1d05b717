"""Registration proves: ``rocm_dflash`` enters SGLang's backend registry, the attention
and DFLASH-draft CLI choices and the verify-mask allow-list exactly once however often
``register()`` runs, with SGLang's ``dsv4`` factory wrapped once (the DeepSeek-V4 start-up
check); a fresh process is rejected without the plugin and resolves target
and draft to ``rocm_dflash`` through the real entry point; ``register()`` never raises,
gates the sglang version, and calls the host fixes."""

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
from sglang.srt.arg_groups import choices
from sglang.srt.layers.attention.attention_registry import ATTENTION_BACKENDS

from dflash_rocm_plugin.sglang import registration, register

HERE = Path(__file__).parent


def test_register_is_idempotent():
    for _ in range(3):
        register()
    assert ATTENTION_BACKENDS["rocm_dflash"] is registration.create_rocm_dflash_backend
    assert choices.ATTENTION_BACKEND_CHOICES.count("rocm_dflash") == 1
    assert choices.DRAFT_ATTENTION_BACKEND_CHOICES.count("rocm_dflash") == 1
    dsv4 = ATTENTION_BACKENDS["dsv4"]  # the DeepSeek-V4 start-up check, wrapped around it once
    assert dsv4.__wrapped__.__module__ == "sglang.srt.layers.attention.attention_registry"
    assert not hasattr(dsv4.__wrapped__, "__wrapped__")
    from sglang.srt.speculative import dflash_utils

    registration.allow_verify_without_custom_mask()
    registration.allow_verify_without_custom_mask()
    names = dflash_utils._DFLASH_VERIFY_SKIP_CUSTOM_MASK_BACKENDS
    assert isinstance(names, frozenset) and "RocmDflashAttnBackend" in names
    assert "TritonAttnBackend" in names  # SGLang's own entries are kept


@pytest.mark.parametrize("version, ok", [
    ("0.5.10", False), ("0.5.10.post1", False), ("0.5.11", True), ("0.5.12", True),
    ("0.5.13.post1", True), ("0.5.14", True), ("0.5.18", True), ("0.5.19", False), ("0.5.20", True),
    ("0.5.23", True), ("0.5.23.post1", True), ("0.5.24", False),
    ("0.6.0", False), (None, False), ("garbage", False)])
def test_version_gate(version, ok):
    assert registration.version_supported(version) is ok


def test_unsupported_version_logs_and_registers_nothing(monkeypatch, caplog):
    monkeypatch.setattr(registration, "installed_sglang_version", lambda: "0.5.10")
    touched = []
    monkeypatch.setattr(registration, "_register_backend", lambda: touched.append(1))
    with caplog.at_level(logging.WARNING, logger="dflash_rocm_plugin.sglang"):
        register()
    assert not touched
    assert "outside the supported ranges 0.5.11-0.5.18, 0.5.20-0.5.23" in caplog.text


def test_register_never_raises_and_calls_host_fixes(monkeypatch, caplog):
    from dflash_rocm_plugin.sglang import host_fixes

    def boom():
        raise RuntimeError("simulated")

    calls = []
    monkeypatch.setattr(registration, "_register_backend", boom)
    monkeypatch.setattr(host_fixes, "apply", lambda: calls.append(1) or [])
    with caplog.at_level(logging.ERROR, logger="dflash_rocm_plugin.sglang"):
        register()
    assert calls == [1]
    assert "registering the 'rocm_dflash' backend failed" in caplog.text
    monkeypatch.setattr(host_fixes, "apply", boom)
    register()  # a failing host fix is logged, not raised


def _write_configs(tmp_path: Path) -> tuple[Path, Path]:
    common = {"model_type": "qwen3", "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
              "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 256, "max_position_embeddings": 512,
              "rms_norm_eps": 1e-6, "rope_theta": 10000, "torch_dtype": "bfloat16"}
    target, draft = tmp_path / "target", tmp_path / "draft"
    target.mkdir()
    draft.mkdir()
    (target / "config.json").write_text(json.dumps(
        {**common, "architectures": ["Qwen3ForCausalLM"], "num_hidden_layers": 4}))
    (draft / "config.json").write_text(json.dumps(
        {**common, "architectures": ["DFlashDraftModel"], "num_hidden_layers": 1, "block_size": 16,
         "dflash_config": {"target_layer_ids": [1], "mask_token_id": 255, "block_size": 16}}))
    return target, draft


def test_fresh_process_cli_resolution(tmp_path):
    target, draft = _write_configs(tmp_path)
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    env.pop("SGLANG_PLUGINS", None)
    proc = subprocess.run([sys.executable, str(HERE / "server_args_probe.py"), str(target), str(draft)],
                          capture_output=True, text=True, env=env, timeout=600)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("PROBE ")]
    assert lines, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(lines[-1][len("PROBE "):])
    assert result == {
        "rejected_without_plugin": True,
        "prefill_decode": ["rocm_dflash", "rocm_dflash"],
        "draft": "rocm_dflash",
        "registered": True,
        "choices_count": 1,
        "draft_choices_count": 1,
    }


def test_a_triton_that_cannot_run_is_one_log_line_and_a_start_up_refusal(monkeypatch, caplog):
    import harness as h
    from dflash_rocm_plugin import ops
    from dflash_rocm_plugin.ops import _runtime
    from dflash_rocm_plugin.sglang.config_check import UnsupportedConfig

    monkeypatch.setattr(_runtime, "triton_problem", lambda: "`import triton` failed (stand-in)")
    monkeypatch.setattr(ops, "platform_problem", _runtime.triton_problem)
    with caplog.at_level(logging.WARNING, logger="dflash_rocm_plugin.sglang"):
        registration._warn_if_kernels_cannot_run()
    assert sum("kernels cannot run here: `import triton` failed" in r.getMessage() for r in caplog.records) == 1
    with pytest.raises(UnsupportedConfig, match="import triton. failed"):
        h.make_backend("rocm_dflash", h.make_runner(h.Shape()))
