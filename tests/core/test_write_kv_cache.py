"""ops.write_kv_cache scatters exactly the slots it is given, through any cache strides,
skips negative (padding) slots, and leaves every other cache byte unchanged."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from dflash_rocm_plugin import ops, reference


def caches(layout, num_blocks, block_size, heads, dim, dtype):
    if layout == "contiguous":
        return (torch.randn(num_blocks, block_size, heads, dim).to(dtype),
                torch.randn(num_blocks, block_size, heads, dim).to(dtype))
    buf = torch.randn(num_blocks, heads, block_size, 2 * dim).to(dtype)
    return buf.transpose(1, 2).split(dim, dim=-1)


@pytest.mark.parametrize("layout", ["contiguous", "kv_interleaved"])
@pytest.mark.parametrize("slot_dtype", [torch.int32, torch.int64])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_round_trip_and_padding_skipped(layout, slot_dtype, dtype):
    k_cache, v_cache = caches(layout, 6, 4, 3, 32, dtype)
    k_before, v_before = k_cache.clone(), v_cache.clone()
    slots = torch.tensor([5, -1, 0, 23, 9, -1, 12], dtype=slot_dtype)
    # key/value as strided views of a fused projection output, as hosts pass them
    qkv = torch.randn(len(slots), 3 * 3 * 32).to(dtype)
    key = qkv[:, 96:192].view(len(slots), 3, 32)
    value = qkv[:, 192:].view(len(slots), 3, 32)
    ops.write_kv_cache(key, value, k_cache, v_cache, slots)

    k_want, v_want = k_before.clone(), v_before.clone()
    reference.write_kv_cache(key, value, k_want, v_want, slots)
    assert torch.equal(k_cache, k_want) and torch.equal(v_cache, v_want)
    # the padded tokens changed nothing
    written = {int(s) for s in slots if s >= 0}
    for slot in range(6 * 4):
        if slot not in written:
            assert torch.equal(k_cache[slot // 4, slot % 4], k_before[slot // 4, slot % 4])


def test_more_tokens_than_slots_writes_only_the_slots():
    k_cache, v_cache = caches("contiguous", 2, 2, 1, 16, torch.float32)
    before = k_cache.clone()
    key = torch.ones(5, 1, 16)
    ops.write_kv_cache(key, key, k_cache, v_cache, torch.tensor([1, 2]))
    assert torch.equal(k_cache[0, 1], key[0]) and torch.equal(k_cache[1, 0], key[1])
    assert torch.equal(k_cache[0, 0], before[0, 0]) and torch.equal(k_cache[1, 1], before[1, 1])


def test_empty_slot_mapping_is_a_no_op():
    k_cache, v_cache = caches("contiguous", 2, 2, 1, 16, torch.float32)
    before = k_cache.clone()
    ops.write_kv_cache(torch.ones(0, 1, 16), torch.ones(0, 1, 16), k_cache, v_cache,
                       torch.zeros(0, dtype=torch.int64))
    assert torch.equal(k_cache, before)


@settings(max_examples=25, deadline=None)
@given(block_size=st.sampled_from([1, 2, 16]), heads=st.integers(1, 5), dim=st.sampled_from([16, 24, 64]),
       data=st.data())
def test_random_scatter(block_size, heads, dim, data):
    num_blocks = 4
    n_slots = num_blocks * block_size
    count = data.draw(st.integers(0, n_slots))
    slots = data.draw(st.permutations(list(range(n_slots))))[:count]
    slots = [s if data.draw(st.booleans()) else -1 for s in slots]
    slot_t = torch.tensor(slots, dtype=torch.int64)
    k_cache, v_cache = caches("contiguous", num_blocks, block_size, heads, dim, torch.float32)
    k_want, v_want = k_cache.clone(), v_cache.clone()
    key, value = torch.randn(count, heads, dim), torch.randn(count, heads, dim)
    ops.write_kv_cache(key, value, k_cache, v_cache, slot_t)
    reference.write_kv_cache(key, value, k_want, v_want, slot_t)
    assert torch.equal(k_cache, k_want) and torch.equal(v_cache, v_want)
