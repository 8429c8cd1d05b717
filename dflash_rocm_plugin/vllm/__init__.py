"""vLLM adapter: ``register`` is the ``vllm.general_plugins`` entry point."""

import logging

logger = logging.getLogger("dflash_rocm_plugin.vllm")


def register() -> None:
    logger.info("dflash_rocm_plugin: the vLLM adapter is not available in this build")
