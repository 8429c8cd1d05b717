"""SGLang adapter: ``register`` is the ``sglang.srt.plugins`` entry point."""

import logging

logger = logging.getLogger("dflash_rocm_plugin.sglang")


def register() -> None:
    logger.info("dflash_rocm_plugin: the SGLang adapter is not available in this build")
