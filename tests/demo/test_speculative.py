"""Batched DFlash decoding is lossless for any batch composition: random ragged prompts, block
sizes and page sizes (hypothesis), plus named edge cases (one new token; a block longer than the
remaining budget; page size 1), always equal token for token to the target-only run, with every
generated token after the first accounted to exactly one verify step."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dflash_rocm_plugin.demo import speculative

prompt = st.lists(st.integers(0, 126), min_size=1, max_size=9)


def _check(target, draft, prompts, max_new, block, page):
    spec = speculative.dflash_greedy(target, draft, prompts, max_new, block_size=block, page_size=page)
    base = speculative.target_greedy(target, prompts, max_new, page_size=page)
    assert spec.tokens == base.tokens
    assert all(len(t) == max_new for t in spec.tokens)
    assert all(sum(a) == max_new - 1 for a in spec.acceptance)
    assert all(1 <= x <= block for a in spec.acceptance for x in a)
    return spec


@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(prompts=st.lists(prompt, min_size=1, max_size=3), block=st.integers(2, 9), page=st.integers(1, 8),
       max_new=st.integers(2, 8))
def test_lossless_for_random_batches(tiny_pair, prompts, block, page, max_new):
    _check(*tiny_pair, prompts, max_new, block, page)


@pytest.mark.parametrize("max_new,block,page", [(1, 8, 4), (3, 8, 1), (5, 2, 16)])
def test_edge_cases(tiny_pair, max_new, block, page):
    spec = _check(*tiny_pair, [[1, 2, 3], [100]], max_new, block, page)
    if max_new == 1:
        assert spec.acceptance == [[], []]


def test_unknown_fault_is_rejected(tiny_pair):
    with pytest.raises(ValueError, match="fault must be one of"):
        speculative.dflash_greedy(*tiny_pair, [[1]], 2, fault="bogus")
