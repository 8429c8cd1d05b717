"""``register()``: put ``rocm_dflash`` into SGLang's backend registry and CLI choices.

Runs in every SGLang process through ``load_plugins()``.  It must be cheap (no GPU,
no kernel import), idempotent, and must never raise into SGLang: ``load_plugins``
swallows exceptions, so a failure here would only surface later as
"invalid choice: 'rocm_dflash'".  Problems are therefore logged loudly instead.
"""

from __future__ import annotations

import logging
import os
import re
import sys

from dflash_rocm_plugin import BACKEND_NAME, switches

logger = logging.getLogger("dflash_rocm_plugin.sglang")

# 0.5.11 is the first release with the ``sglang.srt.plugins`` loader and DFLASH; what
# differs between releases (no KVWriteLoc and no runtime_context before 0.5.14, the legacy
# graph hooks before 0.5.13, kv_index_translator, runtime config groups, the public draft
# allow-list) is probed in compat.py.  Before 0.5.20 the DFLASH draft allow-list is
# private and the host fix sglang-dflash-draft-backend widens it.  Tested on 0.5.11,
# 0.5.12, 0.5.13.post1, 0.5.14, 0.5.18 and 0.5.23; 0.5.19 (between the private and the
# public allow-list) is untested.
SUPPORTED_RANGES = (((0, 5, 11), (0, 5, 18)), ((0, 5, 20), (0, 5, 23)))
SUPPORTED_RANGE = (SUPPORTED_RANGES[0][0], SUPPORTED_RANGES[-1][1])  # the overall span
BACKEND_CLASS_NAME = "RocmDflashAttnBackend"


def _release(version: str) -> tuple[int, ...] | None:
    m = re.match(r"(\d+)\.(\d+)\.(\d+)", version)
    return tuple(int(x) for x in m.groups()) if m else None


def installed_sglang_version() -> str | None:
    from importlib import metadata

    try:
        return metadata.version("sglang")
    except metadata.PackageNotFoundError:
        return None


def version_supported(version: str | None) -> bool:
    rel = _release(version or "")
    return rel is not None and any(lo <= rel <= hi for lo, hi in SUPPORTED_RANGES)


def supported_ranges_text() -> str:
    def text(lo, hi):
        return ".".join(map(str, lo)) + ("" if lo == hi else "-" + ".".join(map(str, hi)))
    return ", ".join(text(lo, hi) for lo, hi in SUPPORTED_RANGES)


def register() -> None:
    """The ``sglang.srt.plugins`` entry point.  Never raises."""
    try:
        switches.warn_misread(logger, "sglang")
        if switches.disabled():
            switches.log_once(logger, "sglang", switches.disabled_message("sglang"))
            return
    except Exception:  # noqa: BLE001 - never raise into the host
        logger.exception("dflash_rocm_plugin: reading the plugin's switches failed")
        return
    try:
        version = installed_sglang_version()
        supported = version_supported(version)
        if not supported and not switches.untested_host_allowed():
            switches.log_once(logger, "sglang",
                              switches.refused_host_message("sglang", version, supported_ranges_text()))
        else:
            if not supported:
                switches.log_once(logger, "sglang",
                                  switches.untested_host_message("sglang", version, supported_ranges_text()))
            _register_backend()
            _register_choices()
            _warn_if_kernels_cannot_run()
            # dflash_utils is a heavy import (~10 s cold): patch it now only if it is
            # already loaded; otherwise the backend factory does, before any capture.
            if "sglang.srt.speculative.dflash_utils" in sys.modules:
                allow_verify_without_custom_mask()
    except Exception:  # noqa: BLE001 - never raise into the host
        logger.exception("dflash_rocm_plugin: registering the '%s' backend failed", BACKEND_NAME)
    try:
        from dflash_rocm_plugin.sglang import host_fixes

        host_fixes.apply()
    except Exception:  # noqa: BLE001
        logger.exception("dflash_rocm_plugin: SGLang host fixes failed")
    _watch_deepseek_v4()


def _watch_deepseek_v4() -> None:
    # The DeepSeek-V4 fixes run when its attention backend is built (deepseek_v4.py), not here.
    try:
        from sglang.srt.layers.attention.attention_registry import ATTENTION_BACKENDS

        from dflash_rocm_plugin.sglang import deepseek_v4

        deepseek_v4.watch(ATTENTION_BACKENDS)
    except Exception as exc:  # noqa: BLE001
        logger.warning("dflash_rocm_plugin: DeepSeek-V4 start-up check not installed: %r", exc)


def _warn_if_kernels_cannot_run() -> None:
    # Registered anyway: building the backend then stops start-up with this reason (config_check).
    from dflash_rocm_plugin import ops
    problem = ops.platform_problem()
    if problem:
        logger.warning("dflash_rocm_plugin: '%s' is registered but its kernels cannot run here: %s",
                       BACKEND_NAME, problem)


def create_rocm_dflash_backend(runner):
    """The factory SGLang calls with its ModelRunner; imports the backend lazily."""
    from dflash_rocm_plugin.sglang.backend import RocmDflashAttnBackend

    allow_verify_without_custom_mask()
    return RocmDflashAttnBackend(runner)


def _register_backend() -> None:
    from sglang.srt.layers.attention.attention_registry import ATTENTION_BACKENDS

    ATTENTION_BACKENDS[BACKEND_NAME] = create_rocm_dflash_backend


def _choices_module():
    """``arg_groups.choices`` (0.5.19+), or ``server_args`` that held the lists before."""
    try:
        from sglang.srt.arg_groups import choices
    except ImportError:
        from sglang.srt import server_args as choices
    return choices


def _register_choices() -> None:
    choices = _choices_module()
    # The lists are shared by reference with argparse and the DFLASH draft resolver;
    # extend them in place, once.  Without the draft entry the DFLASH draft silently
    # falls back to 'triton' (ROCm) or 'flashinfer' (CUDA).
    if BACKEND_NAME not in choices.ATTENTION_BACKEND_CHOICES:
        choices.add_attention_backend_choices([BACKEND_NAME])
    # Before 0.5.20 the draft allow-list is private; host_fixes widens it.
    if hasattr(choices, "add_draft_attention_backend_choices") and \
            BACKEND_NAME not in choices.DRAFT_ATTENTION_BACKEND_CHOICES:
        choices.add_draft_attention_backend_choices([BACKEND_NAME])


def allow_verify_without_custom_mask() -> None:
    """Keep SGLang from handing target verify an all-True mask at graph capture.

    The decode-graph runner passes its all-True ``custom_mask`` buffer to TARGET_VERIFY
    capture for backends whose class name is not in this allow-list; a backend that
    honoured it would replay the target verify non-causally.  The backend also ignores
    the mask for DFLASH verify, so this is belt and braces.
    """
    from sglang.srt.speculative import dflash_utils

    names = dflash_utils._DFLASH_VERIFY_SKIP_CUSTOM_MASK_BACKENDS
    if BACKEND_CLASS_NAME not in names:
        dflash_utils._DFLASH_VERIFY_SKIP_CUSTOM_MASK_BACKENDS = frozenset(names | {BACKEND_CLASS_NAME})


def allow_list() -> set[str] | None:
    """``SGLANG_PLUGINS`` as SGLang's plugin loader reads it (``load_plugins_by_group``): the names it
    loads, None when unset or empty (all)."""
    value = os.environ.get(switches.ALLOW_LISTS["sglang"], "")
    return {name.strip() for name in value.split(",") if name.strip()} if value else None


def check_registered() -> tuple[bool, str]:
    """(registered, detail) after SGLang's own plugin loading, for ``dflash-rocm doctor``."""
    from sglang.srt.plugins import load_plugins
    load_plugins()
    from sglang.srt.layers.attention.attention_registry import ATTENTION_BACKENDS
    if BACKEND_NAME not in ATTENTION_BACKENDS:
        return False, f"'{BACKEND_NAME}' is not in sglang's ATTENTION_BACKENDS after load_plugins()"
    if BACKEND_NAME not in getattr(_choices_module(), "ATTENTION_BACKEND_CHOICES", []):
        return False, f"'{BACKEND_NAME}' is registered but not in --attention-backend choices"
    return True, f"'{BACKEND_NAME}' in ATTENTION_BACKENDS and --attention-backend choices"
