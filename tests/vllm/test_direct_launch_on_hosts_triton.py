"""Direct relaunch under the Triton release of the torch build vLLM pins (3.8 for vLLM 0.33-0.34):
the release is in the range whose launch path was read, the key follows every setting its
``JITFunction.run`` compiles with, and the fixed arguments are what its own binder passes
(tests/core runs the same checks under the core environment's release)."""

from tests.core.test_direct_launch import (  # noqa: F401 - collected here under this environment's Triton
    fresh_switch,
    test_a_pass_pipeline_hook_launches_normally_where_the_installed_triton_keys_on_it,
    test_fixed_arguments_are_what_tritons_binder_passes,
    test_the_installed_triton_launches_directly,
    test_the_key_holds_every_setting_the_installed_triton_compiles_with,
)
