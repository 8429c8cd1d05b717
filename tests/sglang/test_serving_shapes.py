"""The KV layouts a serving SGLang hands the backend, through its metadata paths, against SGLang's own
``TritonAttnBackend`` on the same ForwardBatch and the float64 reference:

* radix cache: requests whose prefix is another request's cached prefix -- the SAME physical slots
  in both ``req_to_token`` rows (whole pages when the page size is > 1) -- extended (causal) and
  verified (causal target, non-causal DFLASH draft) in one batch;
* retraction: a decode step, then a request is retracted (its slots freed, poisoned with NaN and
  partly handed to another request's new tokens) and later re-prefilled from scratch in new slots
  while the others keep decoding: every step matches, and nothing reads a freed slot;
* mixed chunked prefill (``--enable-mixed-chunk``, ``ForwardMode.MIXED``): prefill chunks and
  decode tokens (one new token over a long prefix) of different requests in one batch.

Outputs start NaN-poisoned, unowned slots hold NaN, and the KV pool after each forward must equal
Triton's bit for bit.
"""

import random

import pytest
import torch
from sglang.srt.model_executor.forward_batch_info import ForwardMode

import harness as h

EXTEND, DECODE, VERIFY, MIXED = ForwardMode.EXTEND, ForwardMode.DECODE, ForwardMode.TARGET_VERIFY, ForwardMode.MIXED
SHAPE = dict(num_q_heads=4, num_kv_heads=2, head_dim=32, dtype=torch.float32)


def _free_pages(runner, seed):
    free = list(range(1, runner.token_to_kv_pool.size // runner.page_size))
    random.Random(seed).shuffle(free)
    return free


def _slots_of(pages, length, page):
    pos = torch.arange(length)
    return torch.tensor(pages, dtype=torch.int64)[pos // page] * page + pos % page


def _set_row(runner, row, slots):
    runner.req_to_token_pool.req_to_token[row].zero_()
    runner.req_to_token_pool.req_to_token[row, : len(slots)] = slots.to(torch.int32)


def _case(runner, shape, mode, prefix, new, slots, rows, *, seed):
    """A harness Case over given slots: prefix K/V drawn once per physical slot (shared slots are
    written once, as a radix cache holds them), every other slot left as the pool has it."""
    case = h.Case(mode, list(prefix), list(new))
    case.rows, case.slots = list(rows), list(slots)
    for row, s in zip(rows, slots):
        _set_row(runner, row, s)
    gen = torch.Generator().manual_seed(seed)
    pool = runner.token_to_kv_pool
    kbuf, vbuf = pool.get_key_buffer(0), pool.get_value_buffer(0)
    d, hkv = shape.head_dim, shape.num_kv_heads
    written = set()
    for s, p in zip(slots, prefix):
        for slot in s[:p].tolist():
            if slot not in written and kbuf[slot].isnan().any():
                kbuf[slot] = torch.randn((hkv, d), generator=gen).to(shape.dtype)
                vbuf[slot] = torch.randn((hkv, d), generator=gen).to(shape.dtype)
            written.add(slot)
    t = sum(new)
    case.q = torch.randn((t, shape.num_q_heads, d), generator=gen).to(shape.dtype)
    case.k = torch.randn((t, hkv, d), generator=gen).to(shape.dtype)
    case.v = torch.randn((t, hkv, d), generator=gen).to(shape.dtype)
    return case


def _forward_batch(runner, case, mode):
    fb = h.forward_batch(runner, case if mode != MIXED else _as(case, EXTEND))
    fb.forward_mode = mode
    return fb


def _as(case, mode):
    other = h.Case(mode, case.prefix, case.new, case.slots, case.rows, case.q, case.k, case.v)
    return other


def _check(runner, shape, case, *, encoder_only=False, mode=None):
    """Plugin vs Triton vs float64 on ``case``; leaves the pool as the plugin wrote it (== Triton's)."""
    mode = mode or case.mode
    layer = h.make_layer(shape, encoder_only=encoder_only)
    start = h.snapshot(runner)
    plugin = h.run(h.make_backend("rocm_dflash", runner), layer, _forward_batch(runner, case, mode),
                   case.q, case.k, case.v)
    plugin_pool = h.snapshot(runner)
    h.restore(runner, start)
    triton = h.run(h.make_backend("triton", runner), layer, _forward_batch(runner, case, mode),
                   case.q, case.k, case.v, poison_out=False)
    triton_pool = h.snapshot(runner)
    assert not plugin.isnan().any(), "a NaN was read (a freed or unowned slot) or a row left unwritten"
    ref = h.expected(runner, case, shape, causal=not encoder_only)
    tol = h.tolerance(shape.dtype)
    torch.testing.assert_close(plugin.double(), ref, atol=tol, rtol=tol)
    torch.testing.assert_close(plugin.double(), triton.double(), atol=tol, rtol=tol)
    for a, b in zip(plugin_pool, triton_pool):
        assert torch.equal(a.nan_to_num(7.0), b.nan_to_num(7.0))
    return plugin


def _poisoned_runner(shape):
    runner = h.make_runner(shape)
    pool = runner.token_to_kv_pool
    pool.get_key_buffer(0).fill_(float("nan"))
    pool.get_value_buffer(0).fill_(float("nan"))
    return runner


@pytest.mark.parametrize("page_size", [1, 16])
@pytest.mark.parametrize("mode, new, encoder_only", [
    (EXTEND, [5, 9, 3], False), (VERIFY, [16, 16, 16], False), (VERIFY, [16, 16, 16], True)],
    ids=["extend", "verify_causal", "verify_draft_non_causal"])
def test_radix_shared_prefix(page_size, mode, new, encoder_only):
    shape = h.Shape(page_size=page_size, **SHAPE)
    runner = _poisoned_runner(shape)
    free = _free_pages(runner, seed=page_size)
    shared = 32  # two whole pages at page size 16: the unit a paged radix cache shares
    prefix = [shared + 5, shared, 11]  # r0: the shared prefix + its own tail; r1: exactly it; r2: unrelated
    total = [p + n for p, n in zip(prefix, new)]
    pages0 = [free.pop() for _ in range(-(-total[0] // page_size))]
    pages1 = pages0[: shared // page_size] + [free.pop() for _ in range(-(-(total[1] - shared) // page_size))]
    pages2 = [free.pop() for _ in range(-(-total[2] // page_size))]
    slots = [_slots_of(p, t, page_size) for p, t in zip((pages0, pages1, pages2), total)]
    assert torch.equal(slots[0][:shared], slots[1][:shared])  # one copy of the prefix, two readers
    case = _case(runner, shape, mode, prefix, new, slots, [1, 2, 3], seed=7 + page_size)
    _check(runner, shape, case, encoder_only=encoder_only)


def test_retraction_then_recompute_in_new_slots():
    shape = h.Shape(page_size=1, **SHAPE)
    runner = _poisoned_runner(shape)
    free = _free_pages(runner, seed=3)

    def take(n):
        return torch.tensor([free.pop() for _ in range(n)], dtype=torch.int64)

    s0, s1, s2 = take(20 + 3), take(27 + 1), take(14 + 1)
    # step 1: all three decode
    _check(runner, shape, _case(runner, shape, DECODE, [20, 27, 14], [1, 1, 1], [s0[:21], s1, s2], [1, 2, 3],
                                seed=1))
    # request 1 is retracted: its slots are freed (poisoned), and six go to request 2's next tokens
    pool = runner.token_to_kv_pool
    pool.get_key_buffer(0)[s1] = float("nan")
    pool.get_value_buffer(0)[s1] = float("nan")
    s2 = torch.cat([s2, s1[:6]])
    # step 2: request 0 decodes while request 2 extends six tokens into request 1's old slots
    _check(runner, shape, _case(runner, shape, EXTEND, [21, 15], [1, 6], [s0[:22], s2], [1, 3], seed=2))
    # step 3: request 1 is back, recomputed from scratch (28 tokens) in fresh slots, beside two decodes
    f1, s2 = take(28), torch.cat([s2, take(1)])
    _check(runner, shape, _case(runner, shape, EXTEND, [22, 0, 21], [1, 28, 1], [s0[:23], f1, s2], [1, 2, 3],
                                seed=3))
    # step 4: every request verifies a DFLASH draft block (non-causal) over what steps 1-3 wrote
    rows = [torch.cat([s0[:23], take(16)]), torch.cat([f1, take(16)]), torch.cat([s2, take(16)])]
    _check(runner, shape, _case(runner, shape, VERIFY, [23, 28, 22], [16, 16, 16], rows, [1, 2, 3], seed=4),
           encoder_only=True)


@pytest.mark.parametrize("page_size", [1, 16])
def test_mixed_chunked_prefill_batch(page_size):
    shape = h.Shape(page_size=page_size, **SHAPE)
    runner = h.make_runner(shape)
    # two prefill chunks (one continuing an earlier chunk, one fresh) and two decodes in one batch
    case = h.build_case(runner, shape, EXTEND, [32, 0, 45, 17], [24, 19, 1, 1], seed=11 + page_size)
    _check(runner, shape, _as(case, EXTEND), mode=MIXED)
