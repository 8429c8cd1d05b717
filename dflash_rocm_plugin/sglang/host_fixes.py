"""Feature-probed runtime fixes for older sglang releases (see patches/).  Called by register()."""


def apply() -> list:
    """Apply every fix whose probe says this sglang needs it; return their statuses.  Never raises."""
    return []
