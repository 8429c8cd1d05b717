"""SGLang's own attention test kit (sglang/test/kits/attention_unittest) run unchanged
against ``rocm_dflash``: its dense MHA/GQA/MQA cases around page boundaries, its
sliding-window cases (the plugin is classified under the kit's W+1-keys decode rule,
as FlashInfer/FA3 are), and its DFLASH target-verify case, all against the kit's own
references."""

import unittest

import pytest
import torch

kit = pytest.importorskip("sglang.test.kits.attention_unittest.attention_methods.dense_attention")

CASES = {c.name + f"-{i}": c for i, c in enumerate(
    kit.make_dense_cases("rocm_dflash")
    + kit.make_swa_no_prefix_input_config_cases("rocm_dflash")
    + kit.make_swa_prefix_input_config_cases("rocm_dflash"))}


@pytest.fixture(autouse=True, scope="module")
def plugin_classified_for_swa_decode():
    original = kit._SWA_DECODE_EXTEND_WINDOW
    kit._SWA_DECODE_EXTEND_WINDOW = original | {"rocm_dflash"}
    yield
    kit._SWA_DECODE_EXTEND_WINDOW = original
    from sglang.srt.runtime_context import get_context

    get_context().override_server_args().install()  # the kit installs its own


@pytest.mark.parametrize("name", CASES)
def test_kit_dense_case(name):
    kit.run_dense_attention_case(unittest.TestCase(), CASES[name], device="cpu", dtype=torch.float32)


def verify_case(page_size, backend="rocm_dflash"):
    """A DFLASH-shaped TARGET_VERIFY case: 16-token blocks over ragged prefixes.  The kit
    seeds its slot layout from the case name; its graph-eager leg rewrites prefix K/V
    through a contiguous slot map, which for some names clobbers shuffled prefixes (then
    SGLang's Triton backend fails too).  This name is one where Triton passes."""
    import dataclasses

    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    base = next(c for c in kit.make_dense_cases(backend) if c.page_size == page_size)
    return dataclasses.replace(base, name="dflash_verify", num_heads=4, num_kv_heads=2,
                               forward_mode=ForwardMode.TARGET_VERIFY, prefix_lens=(5, 20), extend_lens=(16, 16))


@pytest.mark.parametrize("page_size", [1, 16])
def test_kit_dflash_target_verify(page_size):
    from sglang.test.kits.attention_unittest.runner_modes import speculative_target_verify_runner as runner

    runner.run_dense_spec_verify_case(unittest.TestCase(), verify_case(page_size), topk=1, spec_kind="dflash",
                                      device="cpu", dtype=torch.float32)


def test_kit_dflash_target_verify_graph_metadata():
    """The kit's capture / padded-replay metadata simulation (page size 16: the kit's own
    page-1 slot layout is inconsistent in this mode)."""
    from sglang.test.kits.attention_unittest.runner_modes import speculative_target_verify_runner as runner

    for backend in ("triton", "rocm_dflash"):  # Triton first: a kit-side failure shows there
        runner.run_dense_spec_verify_cuda_graph_case(unittest.TestCase(), verify_case(16, backend), topk=1,
                                                     spec_kind="dflash", device="cpu", dtype=torch.float32)
