"""How vLLM names the plugin's backend (see registration.py for why it is the CUSTOM slot)."""

from __future__ import annotations

BACKEND_ENUM_NAME = "ROCM_DFLASH"
BACKEND_PATH = "dflash_rocm_plugin.vllm.backend.RocmDFlashBackend"


def is_plugin_backend(member) -> bool:
    """True when ``member`` (an ``AttentionBackendEnum`` or None) selects this plugin's backend."""
    try:
        return member is not None and member.is_overridden() and member.get_path() == BACKEND_PATH
    except Exception:  # noqa: BLE001 - a foreign member type is simply not ours
        return False
