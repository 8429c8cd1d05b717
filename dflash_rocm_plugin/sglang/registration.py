"""``register()``: put ``rocm_dflash`` into SGLang's backend registry and CLI choices.

Runs in every SGLang process through ``load_plugins()``.  It must be cheap (no GPU,
no kernel import), idempotent, and must never raise into SGLang: ``load_plugins``
swallows exceptions, so a failure here would only surface later as
"invalid choice: 'rocm_dflash'".  Problems are therefore logged loudly instead.
"""

from __future__ import annotations

import logging
import re
import sys

from dflash_rocm_plugin import BACKEND_NAME

logger = logging.getLogger("dflash_rocm_plugin.sglang")

# Releases whose hooks this adapter uses as-is: the draft backend allow-list
# (add_draft_attention_backend_choices), KVWriteLoc and the kv_index_translator all
# exist from 0.5.20 on.  Tested against 0.5.23.
SUPPORTED_RANGE = ((0, 5, 20), (0, 5, 23))
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
    return rel is not None and SUPPORTED_RANGE[0] <= rel <= SUPPORTED_RANGE[1]


def register() -> None:
    """The ``sglang.srt.plugins`` entry point.  Never raises."""
    try:
        version = installed_sglang_version()
        if not version_supported(version):
            lo, hi = (".".join(map(str, v)) for v in SUPPORTED_RANGE)
            logger.warning(
                "dflash_rocm_plugin: sglang %s is outside the supported range %s-%s; "
                "the '%s' attention backend is not registered", version, lo, hi, BACKEND_NAME)
        else:
            _register_backend()
            _register_choices()
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


def create_rocm_dflash_backend(runner):
    """The factory SGLang calls with its ModelRunner; imports the backend lazily."""
    from dflash_rocm_plugin.sglang.backend import RocmDflashAttnBackend

    allow_verify_without_custom_mask()
    return RocmDflashAttnBackend(runner)


def _register_backend() -> None:
    from sglang.srt.layers.attention.attention_registry import ATTENTION_BACKENDS

    ATTENTION_BACKENDS[BACKEND_NAME] = create_rocm_dflash_backend


def _register_choices() -> None:
    from sglang.srt.arg_groups import choices

    # The lists are shared by reference with argparse and the DFLASH draft resolver;
    # extend them in place, once.  Without the draft entry the DFLASH draft silently
    # falls back to 'triton' (ROCm) or 'flashinfer' (CUDA).
    if BACKEND_NAME not in choices.ATTENTION_BACKEND_CHOICES:
        choices.add_attention_backend_choices([BACKEND_NAME])
    if BACKEND_NAME not in choices.DRAFT_ATTENTION_BACKEND_CHOICES:
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
