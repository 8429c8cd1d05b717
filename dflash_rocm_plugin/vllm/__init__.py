"""vLLM adapter: ``register`` is the ``vllm.general_plugins`` entry point.

Nothing here imports vLLM at import time; the backend classes live in ``backend.py`` and
are only imported by vLLM through the registered class path.
"""

from dflash_rocm_plugin.vllm.names import BACKEND_ENUM_NAME, BACKEND_PATH
from dflash_rocm_plugin.vllm.registration import SUPPORTED_VERSIONS, allow_list, check_registered, register

__all__ = ["register", "check_registered", "allow_list", "BACKEND_ENUM_NAME", "BACKEND_PATH", "SUPPORTED_VERSIONS"]
