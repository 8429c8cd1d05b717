"""DeepSeek-V4 with speculative decoding on ROCm: its host fixes run when such a server starts.

SGLang serves DeepSeek-V4 with its own ``dsv4`` attention backend (sparse MLA; ``rocm_dflash``
refuses MLA), so the plugin does not serve its attention.  What it does is probe the upstream
ROCm MTP/DSpark work (``host_fixes.DEEPSEEK_V4_FIXES``) and patch it into an image that lacks part
of it, or say once, with the release to move to, why this sglang cannot run it on ROCm.

The hook is SGLang's ``dsv4`` attention-backend factory: the target model runner calls it before
the draft worker and before any graph capture, and only for DeepSeek-V4.  Registration wraps it
(a dictionary entry, nothing imported); the wrapper never raises and always builds the host's
backend.
"""

from __future__ import annotations

import functools
import logging

from dflash_rocm_plugin import ops
from dflash_rocm_plugin.hostfix import code as _code

logger = logging.getLogger("dflash_rocm_plugin.sglang")

HOST_BACKEND = "dsv4"
MARK = "sglang-dsv4-startup-check"


def speculative(runner) -> bool:
    """The model runner serves a target with speculative decoding."""
    algo = getattr(runner, "spec_algorithm", None)
    if algo is not None and hasattr(algo, "is_none"):
        return not algo.is_none()
    return getattr(getattr(runner, "server_args", None), "speculative_algorithm", None) is not None


def check(runner, *, on_rocm: bool | None = None) -> list:
    """Run the DeepSeek-V4 fixes when ``runner`` speculates on ROCm (each outcome logged once per
    process); the outcomes, or [] when they do not apply here.  Never raises."""
    try:
        on_rocm = ops.on_rocm() if on_rocm is None else on_rocm
        if not (on_rocm and speculative(runner)):
            return []
        from dflash_rocm_plugin.sglang import host_fixes
        return host_fixes.apply_deepseek_v4()
    except Exception:  # noqa: BLE001 - never raise into the host
        logger.exception("dflash_rocm_plugin: DeepSeek-V4 host fixes failed")
        return []


def watch(backends) -> bool:
    """Wrap ``backends[HOST_BACKEND]`` (SGLang's ATTENTION_BACKENDS) once; False when there is none."""
    factory = backends.get(HOST_BACKEND)
    if factory is None:
        return False
    if not _code.is_marked(factory):
        backends[HOST_BACKEND] = _checked(factory)
    return True


def _checked(factory):
    @functools.wraps(factory)
    def create_dsv4_backend(runner, *args, **kwargs):
        check(runner)
        return factory(runner, *args, **kwargs)

    return _code.mark(create_dsv4_backend, MARK)
