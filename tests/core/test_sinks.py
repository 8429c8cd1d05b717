"""Attention sinks: a per-head logit that joins the softmax denominator once and adds no value.

Against the float64 reference (``reference.paged_attention(..., sinks=)``) on named cases --
causal and not, sliding window, page 1/3/16, 1 and 16 queries, forced KV splits, softcap, the
overlapped score loop -- and on hypothesis-drawn batches.  Under split-KV the sink must be counted
once, by the merge's inputs, never once per split: large sinks and many splits make a per-split
sink fail the comparison by far more than the tolerance.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dflash_rocm_plugin import ops, reference
from tests.core.cases import build, check_against_reference


def sinks_for(case, seed=0, spread=2.0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(case.q.shape[1], generator=g) * spread).to(dtype)


@pytest.mark.parametrize("causal", [False, True], ids=["draft", "verify"])
@pytest.mark.parametrize("block_size", [1, 3, 16])
@pytest.mark.parametrize("q_len", [1, 16])
def test_sinks_match_reference(causal, block_size, q_len):
    case = build([40, 23, 70], [q_len, min(q_len, 23), q_len], num_q_heads=8, num_kv_heads=2,
                 block_size=block_size)
    check_against_reference(case, causal=causal, sinks=sinks_for(case))


@pytest.mark.parametrize("causal", [False, True])
def test_sinks_with_sliding_window_and_softcap(causal):
    case = build([64, 30], [16, 7], num_q_heads=8, num_kv_heads=1)
    check_against_reference(case, causal=causal, sinks=sinks_for(case, 1), sliding_window=9, softcap=3.0)


@pytest.mark.parametrize("splits", [2, 5, 8])
@pytest.mark.parametrize("causal", [False, True])
def test_sink_joins_the_denominator_once_under_split_kv(causal, splits):
    case = build([300, 77], [16, 1], num_q_heads=4, num_kv_heads=2)
    # Sinks well above the scores: counting one per split would change every row by a lot.
    check_against_reference(case, causal=causal, sinks=sinks_for(case, 2, spread=0.5) + 3.0,
                            num_kv_splits=splits)


def test_sinks_in_the_overlapped_score_loop():
    from dflash_rocm_plugin.ops import launch_config
    case = build([300, 77, 16], [16, 1, 16], num_q_heads=8, num_kv_heads=1)
    with launch_config.forced(overlap_qk=True):
        check_against_reference(case, causal=True, sinks=sinks_for(case, 3), num_kv_splits=2)


def test_minus_infinity_sinks_are_no_sinks():
    """vLLM pads the sinks of absent heads with -inf: those rows equal attention without sinks."""
    case = build([40, 9], [16, 3])
    sinks = torch.full((case.q.shape[1],), float("-inf"))
    with_sinks = check_against_reference(case, causal=True, sinks=sinks)
    without = check_against_reference(case, causal=True)
    valid = int(case.query_start_loc[-1])
    torch.testing.assert_close(with_sinks[:valid], without[:valid], atol=1e-6, rtol=0)


def test_sinks_in_the_model_dtype():
    case = build([40, 9], [16, 3], dtype=torch.float16)
    check_against_reference(case, causal=False, sinks=sinks_for(case, 4, dtype=torch.float16))


def test_a_sink_really_changes_the_output():
    """Guards the tests above: with sinks of this size the answer moves well past the tolerance."""
    case = build([40], [16])
    a = ops.paged_attention(*case.args(), causal=False)
    b = ops.paged_attention(*case.args(), causal=False, sinks=sinks_for(case) + 2.0)
    assert (a - b).abs().max() > 1e-2


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_random_batches_with_sinks(data):
    num_seqs = data.draw(st.integers(1, 3))
    seq_lens = [data.draw(st.integers(1, 80)) for _ in range(num_seqs)]
    q_lens = [data.draw(st.integers(1, min(s, 16))) for s in seq_lens]
    kv_heads, group = data.draw(st.sampled_from([1, 2])), data.draw(st.sampled_from([1, 4, 8]))
    case = build(seq_lens, q_lens, num_q_heads=kv_heads * group, num_kv_heads=kv_heads,
                 block_size=data.draw(st.sampled_from([1, 4, 16])), seed=data.draw(st.integers(0, 999)))
    check_against_reference(case, causal=data.draw(st.booleans()),
                            sinks=sinks_for(case, data.draw(st.integers(0, 99)), spread=3.0),
                            sliding_window=data.draw(st.one_of(st.none(), st.integers(1, 30))),
                            softcap=data.draw(st.one_of(st.none(), st.floats(1.0, 20.0))),
                            num_kv_splits=data.draw(st.sampled_from([None, 1, 3])))


def test_reference_sink_formula():
    """The reference itself: out = sum e^s v / (sum e^s + e^sink), on one row by hand."""
    case = build([3], [1], num_q_heads=1, num_kv_heads=1, head_dim=16)
    sink = torch.tensor([0.7])
    out = reference.paged_attention(*case.args(), causal=True, sinks=sink)[0, 0]
    k = case.k_cache[case.block_table[0, 0].long(), :3, 0].double()
    v = case.v_cache[case.block_table[0, 0].long(), :3, 0].double()
    e = torch.exp((k @ case.q[0, 0].double()) * 16 ** -0.5)
    torch.testing.assert_close(out, (e[:, None] * v).sum(0) / (e.sum() + torch.exp(torch.tensor(0.7, dtype=torch.float64))))
