"""SGLang adapter: ``register`` is the ``sglang.srt.plugins`` entry point.

``pip install dflash-rocm-plugin`` makes every SGLang process (launcher, scheduler
and TP ranks, which are spawned and load plugins themselves) run ``register()``.
It adds the ``rocm_dflash`` attention backend for the target model and for the
DFLASH draft.  Nothing here imports sglang until ``register()`` runs.
"""

from dflash_rocm_plugin.sglang.registration import (
    BACKEND_CLASS_NAME,
    SUPPORTED_RANGE,
    allow_list,
    check_registered,
    register,
)

__all__ = ["register", "check_registered", "allow_list", "SUPPORTED_RANGE", "BACKEND_CLASS_NAME"]
