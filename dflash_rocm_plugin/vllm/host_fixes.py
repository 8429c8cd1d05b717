"""Feature-probed runtime fixes for older vllm releases (see patches/).  Called by register()."""


def apply() -> list:
    """Apply every fix whose probe says this vllm needs it; return their statuses.  Never raises."""
    return []
