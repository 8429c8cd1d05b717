"""Test-only vLLM plugin: let vLLM's CPU engine run the rocm_dflash backend, so CI can drive the
real V1 engine (DFlash included) through the plugin on a machine without a GPU.

A distribution of its own, installed only into the vllm_cpu test environment; inert unless
``DFLASH_ROCM_TEST_CPU_ENGINE=1``.

Why a switch is needed at all: vLLM's CPU platform ignores the attention backend the user
selects and always returns the ``CPU_ATTN`` class path (``CpuPlatform.get_attn_backend_cls``).
Overriding that one slot with the plugin's class makes both the target (causal) and the
DFlash draft (non-causal) layers run on the plugin.  The backend's ``get_name()`` still
resolves through its own alias, so the layers report ``CUSTOM``, not ``CPU_ATTN``.

The plugin's kernels import ``triton`` directly (not vLLM's placeholder ``triton_utils``,
which the CPU build switches off), so all they need is ``TRITON_INTERPRET=1``.  It must be set
before ``triton`` is first imported, not merely before the kernels are: Triton decorates its
own ``tl.cdiv`` & co. at import, and an interpreted kernel cannot call a helper decorated
without the interpreter.  ``import vllm`` imports triton, so by the time this runs it is too
late to set it; the test environment sets it at process start and this only checks.  No CUDA
query (``torch.cuda.get_device_capability``) is made on the path, and vLLM's own Triton helpers
keep their C++ replacements, so nothing else is patched.
"""

from __future__ import annotations

import logging
import os
import sys

logger = logging.getLogger("dflash_rocm_test_cpu_engine")

SWITCH = "DFLASH_ROCM_TEST_CPU_ENGINE"
# With the switch on, each process also counts its ``ops.paged_attention`` calls by causal flag and
# head geometry into ``$DFLASH_ROCM_TEST_RECORD_DIR/ops-<pid>.json`` (tensor-parallel workers are
# spawned processes, out of reach of the engine runner's in-process probes).
RECORD_DIR = "DFLASH_ROCM_TEST_RECORD_DIR"


def requested() -> bool:
    return os.environ.get(SWITCH, "").strip() == "1"


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0").strip() not in ("", "0")


def register() -> None:
    """The ``vllm.general_plugins`` entry point."""
    maybe_enable()


def maybe_enable() -> bool:
    """Install the CPU-engine test hooks when the switch is on; True when installed.  Never raises."""
    if not requested():
        return False
    try:
        return _enable()
    except Exception as exc:
        logger.warning("dflash_rocm_plugin: %s=1 but the CPU-engine test hooks failed: %r", SWITCH, exc)
        return False


def _enable() -> bool:
    from vllm.platforms import current_platform
    from vllm.v1.attention.backends.registry import AttentionBackendEnum, register_backend

    from dflash_rocm_plugin.vllm import BACKEND_PATH

    if not current_platform.is_cpu():
        logger.warning("dflash_rocm_plugin: %s=1 only applies to vLLM's CPU platform; ignored on %s",
                       SWITCH, type(current_platform).__name__)
        return False

    # On the CPU platform Triton can only run interpreted.
    if not _interpreting():
        if "triton" in sys.modules:
            logger.warning(
                "dflash_rocm_plugin: %s=1 needs TRITON_INTERPRET=1 in the environment before the "
                "process starts (triton is already imported, so setting it now is too late); the "
                "CPU_ATTN slot is left to vLLM", SWITCH)
            return False
        os.environ["TRITON_INTERPRET"] = "1"

    register_backend(AttentionBackendEnum.CPU_ATTN, BACKEND_PATH)
    logger.warning("dflash_rocm_plugin: TEST ONLY (%s=1): vLLM's CPU_ATTN slot now runs %s",
                   SWITCH, BACKEND_PATH)
    if os.environ.get(RECORD_DIR):
        _record_ops_calls(os.environ[RECORD_DIR])
    return True


def _record_ops_calls(directory: str) -> None:
    import functools
    import json

    from dflash_rocm_plugin import ops

    original = ops.paged_attention
    if getattr(original, "_recorded", False):
        return
    counts: dict[str, int] = {}
    path = os.path.join(directory, f"ops-{os.getpid()}.json")

    @functools.wraps(original)
    def paged_attention(q, k_cache, *args, **kwargs):
        key = (f"{'causal' if kwargs.get('causal') else 'non_causal'} q_heads={q.shape[1]} "
               f"kv_heads={k_cache.shape[2]} head_dim={q.shape[2]}")
        counts[key] = counts.get(key, 0) + 1
        with open(path, "w") as f:
            json.dump({"pid": os.getpid(), "calls": counts}, f)
        return original(q, k_cache, *args, **kwargs)

    paged_attention._recorded = True
    ops.paged_attention = paged_attention
