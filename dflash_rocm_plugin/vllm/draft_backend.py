"""Let the DFlash draft inherit ``rocm_dflash`` from the target.

vLLM never lets a draft model inherit the target's ``--attention-backend``: with
``speculative_config.attention_backend`` unset, the draft auto-selects (ROCM_ATTN on ROCm).
Users who ask for ``rocm_dflash`` want the DFlash draft, whose non-causal block attention is
the point of this backend, on it too.  So, in the process that builds the engine config,
the speculative config of a DFlash run whose target uses ``rocm_dflash`` and that names no
draft backend gets ``attention_backend = rocm_dflash``.  It is set before ``VllmConfig`` is
built, so it travels inside the pickled config to every engine-core and worker process.
An explicit draft backend is never changed.
"""

from __future__ import annotations

import functools
import logging

from dflash_rocm_plugin.vllm.names import is_plugin_backend

logger = logging.getLogger("dflash_rocm_plugin.vllm")

_MARK = "_dflash_rocm_inherits_backend"


def install() -> None:
    """Wrap ``EngineArgs.create_speculative_config`` once per process."""
    from vllm.engine.arg_utils import EngineArgs

    original = EngineArgs.create_speculative_config
    if getattr(original, _MARK, False):
        return

    @functools.wraps(original)
    def create_speculative_config(self, *args, **kwargs):
        speculative_config = original(self, *args, **kwargs)
        inherit_target_backend(self, speculative_config)
        return speculative_config

    setattr(create_speculative_config, _MARK, True)
    EngineArgs.create_speculative_config = create_speculative_config


def target_backend(engine_args):
    """The ``AttentionBackendEnum`` member the target asked for, or None."""
    from vllm.config.attention import AttentionConfig

    value = getattr(engine_args, "attention_backend", None)
    if value is None:
        config = getattr(engine_args, "attention_config", None)
        value = getattr(config, "backend", None) if not isinstance(config, dict) else config.get("backend")
    return AttentionConfig.validate_backend_before(value)


def inherit_target_backend(engine_args, speculative_config) -> None:
    if speculative_config is None or speculative_config.attention_backend is not None:
        return
    if getattr(speculative_config, "method", None) != "dflash":
        return
    try:
        backend = target_backend(engine_args)
    except Exception:  # a bad name is reported by vLLM's own validation right after
        return
    if is_plugin_backend(backend):
        speculative_config.attention_backend = backend
        logger.info("dflash_rocm_plugin: the DFlash draft uses the target's attention backend rocm_dflash")
