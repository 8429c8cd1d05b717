"""Split-KV with the merge fused into the attention launch, and with its own second launch.

Both must equal the float64 reference on NaN-poisoned outputs; the fused one must launch no merge
kernel, leave its counters at zero after every call (the next call, or a graph replay, relies on
it), keep one set of counters per scratch buffer, and fall back to the second launch where a graph
capture would have to allocate counters.
"""

from __future__ import annotations

import pytest
import torch

from dflash_rocm_plugin import ops
from dflash_rocm_plugin.ops import _runtime, call_cache, launch_config, workspace
from tests.core.cases import build, check_against_reference


@pytest.fixture
def merges(monkeypatch):
    """Counts launches of the separate split-merge kernel."""
    kernels, _ = _runtime.kernels()
    real = kernels.merge_splits_kernel
    launched = []

    class Counting:
        def __getitem__(self, grid):
            launched.append(grid)
            return real[grid]

    monkeypatch.setattr(kernels, "merge_splits_kernel", Counting())
    call_cache.clear()  # prepared launches hold no kernel, but start every test from the checks
    yield launched
    call_cache.clear()


CASES = {
    "draft-blocks": dict(seq_lens=[300, 40, 7], q_lens=[16, 16, 3]),
    "decode": dict(seq_lens=[129, 1, 64, 200], q_lens=[1, 1, 1, 1]),
    "page-1": dict(seq_lens=[90, 33], q_lens=[16, 5], block_size=1),
    "gqa-8-heads-of-64": dict(seq_lens=[150, 20], q_lens=[16, 16], num_q_heads=16, num_kv_heads=2, head_dim=64),
}


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "second-launch"])
@pytest.mark.parametrize("splits", [2, 5, 32])
@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("causal", [False, True])
def test_both_merges_match_the_reference(merges, fused, splits, name, causal):
    case = build(**CASES[name], padding_rows=3)
    with launch_config.forced(fused_merge=fused):
        check_against_reference(case, causal=causal, num_kv_splits=splits)
    assert bool(merges) is not fused


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "second-launch"])
def test_both_merges_count_a_sink_once_and_respect_a_window(merges, fused):
    case = build([260, 70], [16, 9], num_q_heads=4, num_kv_heads=2)
    sinks = torch.tensor([0.5, -1.0, 2.0, 0.0])
    with launch_config.forced(fused_merge=fused):
        check_against_reference(case, causal=True, num_kv_splits=4, sinks=sinks, sliding_window=100)


def test_counters_are_zero_after_every_call(merges):
    given = torch.empty(1 << 20)
    for seq_lens, q_lens, splits in (([300, 40, 7], [16, 16, 3], 5), ([64] * 9, [1] * 9, 3), ([500], [16], 32)):
        case = build(seq_lens, q_lens)
        for ws in (given, None):
            ops.paged_attention(*case.args(), causal=True, num_kv_splits=splits, workspace=ws)
    assert not merges
    assert workspace._counters, "no fused merge ran"
    for counters in workspace._counters.values():
        assert int(counters.abs().sum()) == 0


def test_a_stale_counter_would_leave_rows_unmerged(merges):
    """Guards the test above: counters that are not zero before a launch do break the output."""
    case = build([300, 40], [16, 16])
    given = torch.empty(1 << 20)
    ops.paged_attention(*case.args(), causal=True, num_kv_splits=4, workspace=given)
    [counters] = [c for (dev, ptr), c in workspace._counters.items() if ptr == given.data_ptr()]
    counters[0] = 100  # as if left over from a call that never finished
    out = torch.full_like(case.q, float("nan"))
    ops.paged_attention(*case.args(), causal=True, num_kv_splits=4, workspace=given, out=out)
    assert torch.isnan(out[:16]).any()
    counters.zero_()


def test_each_scratch_buffer_has_its_own_counters(merges):
    case = build([300, 40], [16, 16])
    first, second = torch.empty(1 << 20), torch.empty(1 << 20)
    for ws in (first, second):
        ops.paged_attention(*case.args(), causal=False, num_kv_splits=3, workspace=ws)
    mine = {ptr: c for (dev, ptr), c in workspace._counters.items() if ptr in (first.data_ptr(), second.data_ptr())}
    assert len(mine) == 2
    a, b = mine.values()
    assert a.data_ptr() != b.data_ptr()


def test_a_capture_that_would_allocate_counters_merges_in_a_second_launch(merges, monkeypatch):
    case = build([300, 40, 7], [16, 16, 3], padding_rows=2)
    given = torch.empty(1 << 20)
    monkeypatch.setattr(workspace, "_capturing", lambda device: True)
    check_against_reference(case, causal=True, num_kv_splits=5, workspace=given)
    assert merges, "the fused launch ran without counters"
    assert all(ptr != given.data_ptr() for (dev, ptr) in workspace._counters)
