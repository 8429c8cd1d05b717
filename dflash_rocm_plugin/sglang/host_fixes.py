"""Feature-probed runtime fixes for older sglang releases (see patches/).  Called by register()."""

from __future__ import annotations

import logging

logger = logging.getLogger("dflash_rocm_plugin.host_fixes")


def apply() -> list:
    """Apply every fix whose probe says this sglang needs it; return their statuses.  Never raises."""
    try:
        from dflash_rocm_plugin import host_fix_catalogue
        return host_fix_catalogue.run("sglang")
    except Exception as exc:  # noqa: BLE001 - never raise into the host
        logger.warning("dflash_rocm_plugin: sglang host fixes could not run: %r", exc)
        return []
