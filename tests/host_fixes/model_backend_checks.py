"""Run inside ONE sglang release: its real server-argument resolution for a gpt-oss and a Gemma-4
model with ``--attention-backend rocm_dflash``, before and after the adapter's fixes; print a
JSON report.

Used by test_sglang_model_backend_releases.py.  The models are config-only checkpoints (a
config.json is all the resolution reads); ``ServerArgs`` is the release's own class, built the
way the launcher builds it (``resolve_once()`` where the release defers resolution).
"""

from __future__ import annotations

import json
import logging
import sys
import tempfile
from pathlib import Path

from tests.host_fixes.release_checks import _STUBBED, _import

GPT_OSS = {
    "architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "num_hidden_layers": 2,
    "num_local_experts": 4, "num_experts_per_tok": 2, "vocab_size": 512, "hidden_size": 128,
    "intermediate_size": 128, "head_dim": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
    "sliding_window": 8, "max_position_embeddings": 4096, "torch_dtype": "bfloat16",
    "layer_types": ["sliding_attention", "full_attention"],
    "rope_parameters": {"rope_type": "yarn", "rope_theta": 150000.0, "factor": 32.0, "beta_fast": 32.0,
                        "beta_slow": 1.0, "truncate": False, "original_max_position_embeddings": 4096},
}
GEMMA4 = {
    "architectures": ["Gemma4ForCausalLM"], "model_type": "gemma4_text", "num_hidden_layers": 2,
    "vocab_size": 512, "hidden_size": 128, "intermediate_size": 256, "num_attention_heads": 4,
    "num_key_value_heads": 2, "head_dim": 64, "global_head_dim": 64, "sliding_window": 512,
    "layer_types": ["sliding_attention", "full_attention"], "max_position_embeddings": 4096,
    "hidden_activation": "gelu_pytorch_tanh", "rms_norm_eps": 1e-6, "tie_word_embeddings": True,
    "hidden_size_per_layer_input": 0, "vocab_size_per_layer_input": 512, "torch_dtype": "bfloat16",
    "rope_parameters": {"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                        "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25,
                                           "rope_theta": 1000000.0}},
}


def _checkpoint(root: Path, name: str, config: dict) -> str:
    path = root / name
    path.mkdir()
    (path / "config.json").write_text(json.dumps(config))
    return str(path)


def resolve(model_path: str, backend: str) -> dict:
    """The release's own resolution of these arguments: accepted, or the error it raised."""
    server_args = _import("sglang.srt.server_args")
    try:
        args = server_args.ServerArgs(model_path=model_path, attention_backend=backend, device="cpu",
                                      skip_tokenizer_init=True)
        if hasattr(args, "resolve_once"):
            args.resolve_once()
    except BaseException as exc:  # noqa: BLE001 - the report says what the release raised
        return {"accepted": False, "error": type(exc).__name__, "message": str(exc)[:400]}
    return {"accepted": True, "attention_backend": args.attention_backend}


def _has_gemma4(version: str) -> bool:
    return tuple(int(x) for x in version.split(".")[:3]) >= (0, 5, 13)


def _other_family_lists():
    """Every backend-name constant of the checked functions (the other families must keep theirs)."""
    from dflash_rocm_plugin.sglang.fixes import model_backends
    found = {}
    for module_name, path in model_backends.FUNCTION_TARGETS:
        module = sys.modules.get(module_name)
        if module is None:
            continue
        try:
            fn = model_backends._resolve(module, path)
        except AttributeError:
            continue
        found[path] = sorted(sorted(c) for c in fn.__code__.co_consts
                             if isinstance(c, (tuple, frozenset)) and c and all(isinstance(v, str) for v in c)
                             and "triton" in c)
    return found


def main(version: str) -> dict:
    report = {"version": version}
    import sglang
    report["imported_from"] = sglang.__file__
    root = Path(tempfile.mkdtemp(prefix="model-backends-"))
    models = {"gpt_oss": _checkpoint(root, "gpt-oss", GPT_OSS)}
    if _has_gemma4(version):
        models["gemma4"] = _checkpoint(root, "gemma4", GEMMA4)
    _import("sglang.srt.server_args")
    from dflash_rocm_plugin import hostfix
    from dflash_rocm_plugin.sglang import host_fixes, register
    from dflash_rocm_plugin.sglang.fixes import model_backends

    report["dry_run"] = next(s.as_dict() for s in host_fixes.apply(patch=False) if s.id == model_backends.FIX_ID)
    report["before"] = {name: resolve(path, "rocm_dflash") for name, path in models.items()}
    lists_before = _other_family_lists()

    register()
    report["status"] = next(s for s in hostfix.statuses("sglang") if s.id == model_backends.FIX_ID).as_dict()
    register()
    again = next(s for s in hostfix.statuses("sglang") if s.id == model_backends.FIX_ID).as_dict()
    report["second_register_same"] = again == report["status"]
    report["probe_after"] = model_backends.probe().reason

    report["after"] = {name: resolve(path, "rocm_dflash") for name, path in models.items()}
    report["after_triton"] = {name: resolve(path, "triton") for name, path in models.items()}
    report["after_flashinfer"] = {name: resolve(path, "flashinfer") for name, path in models.items()}
    lists_after = _other_family_lists()
    report["lists_changed"] = {
        path: sorted(set(map(tuple, lists_after[path])) - set(map(tuple, lists_before[path])))
        for path in lists_after}
    report["stubbed_sgl_kernel_for"] = _STUBBED
    return report


if __name__ == "__main__":
    logging.basicConfig(level=logging.ERROR, stream=sys.stderr)
    result = main(sys.argv[1])
    print("RESULT " + json.dumps(result, default=str))
