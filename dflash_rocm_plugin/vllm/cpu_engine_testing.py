"""Test-only: put the plugin backend into vLLM's CPU_ATTN slot so the CPU engine runs it.

Enabled only when DFLASH_ROCM_TEST_CPU_ENGINE=1; never in production.
"""


def maybe_enable() -> bool:
    """Return True when the CPU-engine test hooks were installed."""
    return False
