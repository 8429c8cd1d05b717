"""vLLM adapter: ``register`` is the ``vllm.general_plugins`` entry point.

Nothing here imports vLLM at import time; the backend classes live in ``backend.py`` and
are only imported by vLLM through the registered class path.
"""

from dflash_rocm_plugin.vllm.registration import BACKEND_ENUM_NAME, BACKEND_PATH, SUPPORTED_VERSIONS, register

__all__ = ["register", "BACKEND_ENUM_NAME", "BACKEND_PATH", "SUPPORTED_VERSIONS"]
