"""paged_attention(new_keys=, new_values=): whole causal prompts, and chunks over a prefix of at most GQA
times their tokens, read their keys from the dense new K/V (kernels/extend_attention.py; a chunk's prefix
from a dense copy of the pages), the rest of the batch from the pages; equal to the float64 reference.

Outputs are NaN-poisoned, unowned cache slots, the new K/V's padding rows and every buffer the call fills
for the dense kernel hold NaN, and guard tests feed new K/V that differ from the cache, so a path that is
never taken (or reads the wrong rows) fails.
"""

from __future__ import annotations

import json

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dflash_rocm_plugin import ops, reference
from dflash_rocm_plugin.ops import extend_launch
from dflash_rocm_plugin.ops.backends import triton_extend
from tests.core.cases import build, poisoned_like, tolerance
from tests.core.conftest import clear_tuned_caches

# The interpreter's launch (extend_launch.choose_extend): blocks of at least this many queries go dense.
LONG = extend_launch.choose_extend(head_dim=32, max_query_len=1 << 20, device_index=None).block_m


def new_kv(case, spare_rows=3):
    """Each query token's K/V as the cache holds them, [num_tokens + spare_rows, Hkv, D]; padding and
    spare rows NaN (a kernel that reads past a sequence's tokens fails)."""
    _, block_size, hkv, d = case.k_cache.shape
    rows = case.q.shape[0] + spare_rows
    keys = torch.full((rows, hkv, d), float("nan"), dtype=case.q.dtype)
    values = keys.clone()
    qsl = case.query_start_loc.tolist()
    for s, seq_len in enumerate(case.seq_lens.tolist()):
        n = qsl[s + 1] - qsl[s]
        pos = torch.arange(seq_len - n, seq_len)
        pages = case.block_table[s, pos // block_size].long()
        keys[qsl[s]:qsl[s + 1]] = case.k_cache[pages, pos % block_size]
        values[qsl[s]:qsl[s + 1]] = case.v_cache[pages, pos % block_size]
    return keys, values


def run(case, keys=None, values=None, **kw):
    keys, values = (keys, values) if keys is not None else new_kv(case)
    out = poisoned_like(case.q)
    max_q = int((case.query_start_loc[1:] - case.query_start_loc[:-1]).max())
    ops.paged_attention(*case.args(), causal=kw.pop("causal", True), out=out, max_query_len=max_q,
                        new_keys=keys, new_values=values, **kw)
    return out


def check(case, *, causal=True, **kw):
    out = run(case, causal=causal, **kw)
    ref_kw = {k: v for k, v in kw.items() if k in ("scale", "sliding_window", "softcap", "sinks", "k_scale", "v_scale")}
    want = reference.paged_attention(*case.args(), causal=causal, **ref_kw)
    valid = int(case.query_start_loc[-1])
    err = (out[:valid].double() - want[:valid]).abs().max().item()
    assert err <= tolerance(case.q.dtype), f"max abs error {err:.3e}"
    assert torch.isnan(out[valid:]).all(), "padding rows past query_start_loc[-1] were written"
    return out


@pytest.fixture(autouse=True)
def poisoned_buffers(monkeypatch):
    """The buffers the call fills for the dense kernel (fp8 rows, prefix copies) start as NaN: a row read
    that no kernel wrote fails."""
    monkeypatch.setattr(triton_extend, "_buffer",
                        lambda shape, like: torch.full(shape, float("nan"), dtype=like.dtype, device=like.device))


@pytest.fixture
def extend_launches(monkeypatch):
    """Counts the dense kernel's launches."""
    calls = []
    real = triton_extend.launch

    def counting(*args, **kw):
        calls.append(args[0])
        return real(*args, **kw)
    monkeypatch.setattr(triton_extend, "launch", counting)
    return calls


# --- named cases ---------------------------------------------------------------------------------

def test_prefill_without_prefix(extend_launches):
    check(build([37], [37], num_q_heads=4, num_kv_heads=2, head_dim=32))
    assert extend_launches, "the dense path did not run"


@pytest.mark.parametrize("seq_lens", [[LONG], [2 * LONG], [LONG + 1], [2 * LONG - 1, LONG, 3 * LONG + 5]],
                         ids=["one-tile", "two-tiles", "tile-plus-one", "mixed-lengths"])
def test_prefill_lengths_at_tile_edges(seq_lens):
    check(build(seq_lens, seq_lens))


@pytest.mark.parametrize("prefix", [1, 15, 16, 17, 40, 64])
def test_chunk_over_a_prefix(prefix, extend_launches):
    # Prefixes under, at and over the interpreter's 16-key tiles, up to GQA (2) x the chunk: the dense path
    # reads a copy of them (its last tile masked where the prefix ends), beside a whole prompt.
    check(build([prefix + 45, prefix + LONG, 50], [45, LONG, 50], block_size=16))
    assert extend_launches


@pytest.mark.parametrize("group", [1, 2, 4])
@pytest.mark.parametrize("over", [0, 1], ids=["prefix-at-the-bound", "one-key-past-it"])
def test_chunk_prefix_bound_is_gqa_times_the_chunk(group, over):
    # At the bound the chunk goes dense, one key past it paged (its copy would outgrow its rows): the
    # guard skews the new values, which only the dense path reads.
    q_len = LONG + 3
    case = build([group * q_len + over + q_len, 40], [q_len, 40], num_q_heads=2 * group, num_kv_heads=2)
    check(case)
    keys, values = new_kv(case)
    honest, skewed = run(case, keys, values), run(case, keys, values * 2.0)
    assert torch.equal(skewed[:q_len], honest[:q_len]) == bool(over)


@pytest.mark.parametrize("block_size", [1, 3, 16, 64])
def test_chunks_over_prefixes_on_page_sizes(block_size):
    check(build([LONG + 40, 3 * LONG, 2 * LONG + 70], [LONG, 2 * LONG, LONG + 5], block_size=block_size,
                num_q_heads=8, num_kv_heads=2))


@pytest.mark.parametrize("qo_desc", [False, True], ids=["kv-tiles", "q-kv-out-tiles"])
def test_chunks_over_prefixes_on_tma_tiles(qo_desc):
    case = build([1, LONG + 21, 2 * LONG + 9, 90, 3 * LONG + 70], [1, LONG, 2 * LONG + 9, 45, 2 * LONG],
                 num_q_heads=4, num_kv_heads=2)
    with extend_launch.forced_extend(use_desc=True, qo_desc=qo_desc):
        check(case, sinks=torch.tensor([0.5, -1.0, 2.0, 0.0]))
        check(case, sliding_window=LONG + 9)


def test_chunks_stay_paged_when_forced(extend_launches):
    case = build([LONG + 20, 50], [LONG, 50])
    keys, values = new_kv(case)
    with extend_launch.forced_extend(chunks=False):
        check(case)
        honest, skewed = run(case, keys, values), run(case, keys, values * 2.0)
    assert torch.equal(skewed[:LONG], honest[:LONG])
    assert extend_launches


@pytest.mark.parametrize("window", [1, 2, 15, 16, 17, LONG, LONG + 1, 3 * LONG, 500])
def test_chunks_under_windows_read_the_windows_part_of_their_prefix(window, extend_launches):
    # Windows under, at and over the 16-key tiles: a chunk copies only its prefix's last window - 1 keys, so
    # a prefix far past GQA x the chunk still goes dense once the window is short (the third chunk); the
    # edge runs through the copy's tiles, masked, and on into the block's own keys.
    case = build([LONG + 20, 2 * LONG + 9 + 40, 300 + LONG, 3 * LONG], [LONG, 2 * LONG + 9, LONG, 3 * LONG],
                 num_q_heads=4, num_kv_heads=2)
    check(case, sliding_window=window)
    keys, values = new_kv(case)
    honest, skewed = run(case, keys, values, sliding_window=window), run(case, keys, values * 2.0,
                                                                         sliding_window=window)
    third = slice(3 * LONG + 9, 4 * LONG + 9)
    assert torch.equal(skewed[third], honest[third]) == (window - 1 > 2 * LONG), "the third chunk's path"
    assert extend_launches


def test_gpt_oss_chunks_with_sinks_in_both_layer_kinds(extend_launches):
    # gpt-oss: sinks everywhere, every other layer a window; chunks over prefixes longer than the window.
    case = build([2 * LONG + 100, 3 * LONG + 7 + 60, 70], [2 * LONG, 3 * LONG + 7, 70], num_q_heads=16,
                 num_kv_heads=2, head_dim=64)
    sinks = torch.randn(16, generator=torch.Generator().manual_seed(5))
    check(case, sinks=sinks)
    check(case, sinks=sinks, sliding_window=LONG + 3)
    assert len(extend_launches) == 2


def test_mixed_batch_of_decodes_blocks_and_prefill_chunks(extend_launches):
    # Short sequences stay on the paged kernel, long ones go dense: every row is written once.
    check(build([1, 40, 90, 33, 70, 16], [1, 16, 60, 33, 1, 16], num_q_heads=8, num_kv_heads=2))
    assert extend_launches


def test_padding_rows_stay_untouched():
    check(build([50, 20], [50, 20], padding_rows=5))


@pytest.mark.parametrize("group", [1, 2, 4, 8])
def test_gqa_groups(group):
    check(build([70, 40], [70, 35], num_q_heads=2 * group, num_kv_heads=2))


@pytest.mark.parametrize("head_dim", [32, 64, 128, 256])
def test_head_dims(head_dim):
    check(build([45], [45], num_q_heads=2, num_kv_heads=1, head_dim=head_dim))


@pytest.mark.parametrize("block_size", [1, 3, 16, 64])
def test_page_sizes(block_size):
    check(build([100, 47], [40, 47], block_size=block_size))


@pytest.mark.parametrize("layout", ["kv_interleaved", "heads_major"])
def test_strided_cache_views(layout):
    check(build([80, 50], [50, 50], layout=layout))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision(dtype):
    check(build([70, 40], [70, 40], dtype=dtype))


@pytest.mark.parametrize("qo_desc", [False, True], ids=["kv-tiles", "q-kv-out-tiles"])
def test_tma_descriptor_tiles(qo_desc):
    # The Hopper path: the block's tiles by tensor descriptors (the interpreter runs them too); a prompt's
    # last, partial tile stores its rows by pointers (a descriptor would write the next prompt's).
    with extend_launch.forced_extend(use_desc=True, qo_desc=qo_desc):
        check(build([1, 70, 45, 33, 64], [1, 60, 45, 33, 64], num_q_heads=4, num_kv_heads=2), sinks=torch.zeros(4))
        check(build([2 * LONG + 5, LONG], [2 * LONG + 5, LONG], num_q_heads=4, num_kv_heads=2), sliding_window=20)


def test_scale_is_applied():
    check(build([50], [50]), scale=0.3)


def test_new_keys_are_what_the_dense_path_reads():
    # Guards the tests above: new K/V that differ from the cache change the whole long prompt's rows and
    # a chunk's within its prefix bound (the prefix from the pages, its own rows from them), not a short
    # prompt's nor a chunk's over a longer prefix (both read the pages).
    case = build([50, 20, 90, 140], [50, 20, 45, 40])
    keys, values = new_kv(case)
    honest = run(case, keys, values)
    skewed = run(case, keys, values * 2.0)
    assert (skewed[:50] - 2.0 * honest[:50]).abs().max() < 1e-4
    assert torch.equal(skewed[50:70], honest[50:70])
    assert not torch.equal(skewed[70:115], honest[70:115])
    assert torch.equal(skewed[115:], honest[115:])


# --- windows, sinks and softcaps (gpt-oss, Gemma-4's sliding layers) -----------------------------

@pytest.mark.parametrize("window", [1, 15, 16, 17, LONG - 1, LONG, LONG + 1, 3 * LONG - 1, 500])
def test_sliding_windows_at_tile_edges(window, extend_launches):
    # Windows under, at and over the interpreter's 16-key tiles and 32-row blocks: the edge ranges
    # start mid-tile, some rows see no key of an edge tile, a window past the prompt hides nothing.
    check(build([3 * LONG + 7, LONG + 5, 2 * LONG], [3 * LONG + 7, LONG + 5, 2 * LONG]), sliding_window=window)
    assert extend_launches


@pytest.mark.parametrize("sink_scale", [0.0, 3.0, 30.0, -30.0], ids=["zero", "mild", "dominant", "negligible"])
def test_sinks(sink_scale, extend_launches):
    sinks = torch.linspace(-1.0, 1.0, 8) * sink_scale
    check(build([2 * LONG + 3, LONG], [2 * LONG + 3, LONG], num_q_heads=8, num_kv_heads=2), sinks=sinks)
    assert extend_launches


def test_gpt_oss_layers_sinks_with_and_without_the_window(extend_launches):
    # gpt-oss: 64-wide heads, GQA 8, sinks on every layer, a 128-key window on every other one
    # (here a window shorter than the prompts, as 128 is at serving lengths).
    case = build([3 * LONG, 2 * LONG + 9], [3 * LONG, 2 * LONG + 9], num_q_heads=16, num_kv_heads=2, head_dim=64)
    sinks = torch.randn(16, generator=torch.Generator().manual_seed(3))
    check(case, sinks=sinks)
    check(case, sinks=sinks, sliding_window=LONG + 3)
    assert len(extend_launches) == 2


def test_window_and_sinks_beside_paged_rows(extend_launches):
    # A windowed step of decodes and chunks over a prefix (paged) beside whole prompts (dense).
    check(build([1 + 60, 40, 2 * LONG, 30 + LONG, 3 * LONG], [1, 16, 2 * LONG, LONG, 3 * LONG], num_q_heads=4,
                num_kv_heads=2), sliding_window=LONG + 5, sinks=torch.tensor([0.5, -1.0, 2.0, 0.0]))
    assert extend_launches


# --- calls that stay on the paged kernel ---------------------------------------------------------

@pytest.mark.parametrize("kw", [dict(causal=False), dict(softcap=20.0), dict(softcap=20.0, sliding_window=40)],
                         ids=["noncausal", "softcap", "softcap-window"])
def test_features_the_dense_path_leaves_to_pages(kw, extend_launches):
    # A DFlash draft block reads its context from the pages; no target of this round caps its scores.
    check(build([60, 45], [60, 45]), **kw)
    assert not extend_launches


def test_short_blocks_stay_paged(extend_launches):
    check(build([40, 33], [16, 16]))
    assert not extend_launches


def tuned_dense(tmp_path, monkeypatch, case, dense, *, causal=True):
    """A user tuned file for the interpreter ("cpu") whose one entry, for ``case``'s bucket, sets ``dense``."""
    _, block_size, hkv, d = case.k_cache.shape
    lens = (case.query_start_loc[1:] - case.query_start_loc[:-1]).tolist()
    q, batch, context, page = ops.tuned_bucket(num_tokens=sum(lens), num_seqs=len(lens), max_query_len=max(lens),
                                               kv_keys=case.block_table.shape[1] * block_size, page_size=block_size)
    dtype = str(case.q.dtype).removeprefix("torch.")
    entry = dict(heads=[case.q.shape[1], hkv, d], dtype=dtype, kv_cache_dtype=dtype, causal=causal, q=q,
                 batch=batch, context=context, page=page, dense=dense)
    path = tmp_path / "cpu.json"
    path.write_text(json.dumps(ops.tuned_document("cpu", [entry], device="test")))
    monkeypatch.setenv(ops.TUNED_CONFIGS_ENV, str(path))
    clear_tuned_caches()


def test_a_tuned_entry_keeps_its_bucket_s_prompts_paged(tmp_path, monkeypatch, tuned_caches_cleared, extend_launches):
    case = build([37, 40], [37, 40])
    tuned_dense(tmp_path, monkeypatch, case, False)
    check(case)
    assert not extend_launches
    other = build([70, 40], [70, 40])  # another bucket (query rows): the rule's dense launch
    check(other)
    assert extend_launches


def test_a_tuned_entry_sets_its_bucket_s_dense_tiles(tmp_path, monkeypatch, tuned_caches_cleared, extend_launches):
    case = build([37, 40], [37, 40])
    tiles = dict(block_m=16, block_n=16, num_warps=4, num_stages=1)
    tuned_dense(tmp_path, monkeypatch, case, tiles)
    check(case)
    (prepared,) = extend_launches
    assert {k: getattr(prepared.cfg, k) for k in tiles} == tiles
    with ops.forced_extend(block_m=32):  # forced fields (sweeps) win over the file
        check(case)
    assert extend_launches[-1].cfg.block_m == 32


def test_a_tuned_dense_entry_leaves_windowed_calls_and_short_blocks_to_the_rules(tmp_path, monkeypatch,
                                                                                 tuned_caches_cleared, extend_launches):
    case = build([37, 40], [37, 40])
    tuned_dense(tmp_path, monkeypatch, case, dict(block_m=16, block_n=16, num_warps=4, num_stages=1))
    check(case, sliding_window=24)  # no lookup under a window: the rule's tile
    assert extend_launches[-1].cfg.block_m == LONG
    short = build([40, 33], [16, 16])
    tuned_dense(tmp_path, monkeypatch, short, dict(block_m=16, block_n=16, num_warps=4, num_stages=1))
    count = len(extend_launches)
    check(short)  # the host bound on query rows still decides which calls may go dense
    assert len(extend_launches) == count


# --- fp8 caches: the prompts read the host's rows rounded as the cache stores them -------------------

FP8_MAX = {torch.float8_e4m3fn: 448.0, torch.float8_e4m3fnuz: 240.0}
E4M3FN, E4M3FNUZ = torch.float8_e4m3fn, torch.float8_e4m3fnuz
SCALES = {None: (None, None), "tensor": ([0.02], [0.004]), "head": ([0.02, 0.011], [0.004, 0.0023]),
          "saturating": ([0.001], [0.0005])}   # most values past the format's largest: stored saturated


def fp8_case(fmt, scales, *, dtype=torch.float32, heads=(4, 2)):
    """A case whose caches hold ``(x / scale).clamp(+-max).to(fmt)`` of values ``x`` in q's ``dtype`` (what
    ``write_kv_cache`` stores, byte for byte: tests/core/test_fp8.py), and the host's own rows of its query
    tokens: ``x`` itself, unrounded.  A whole prompt, a chunk over a prefix and a prompt of one tile."""
    case = build([2 * LONG + 3, 40 + LONG, LONG], [2 * LONG + 3, LONG, LONG], num_q_heads=heads[0],
                 num_kv_heads=heads[1])
    # Away from the scales' 1.0, and the values a host of that dtype would write.
    case.k_cache, case.v_cache = (case.k_cache * 3.0).to(dtype).float(), (case.v_cache * 0.5).to(dtype).float()
    keys, values = new_kv(case)
    k_scale, v_scale = (None if s is None else torch.tensor(s) for s in SCALES[scales])

    def stored(cache, scale):
        x = cache if scale is None else cache / scale.view(1, 1, -1, 1)
        return x.clamp(-FP8_MAX[fmt], FP8_MAX[fmt]).to(fmt)
    case.k_cache, case.v_cache = stored(case.k_cache, k_scale), stored(case.v_cache, v_scale)
    case.q = case.q.to(dtype)
    return case, keys.to(dtype), values.to(dtype), dict(k_scale=k_scale, v_scale=v_scale)


@pytest.mark.parametrize("scales", [None, "tensor", "head", "saturating"])
@pytest.mark.parametrize("fmt", [E4M3FN, E4M3FNUZ], ids=["e4m3fn", "e4m3fnuz"])
def test_fp8_prompts_read_their_rows_as_the_cache_stores_them(fmt, scales, extend_launches):
    # Against the float64 reference of the dequantized cache: a row rounded otherwise than the cache
    # holds it would be off by up to 1/16 of its value, far past the fp32 tolerance.
    case, keys, values, kw = fp8_case(fmt, scales)
    check(case, keys=keys, values=values, **kw)
    assert extend_launches, "the dense path did not run"


@pytest.mark.parametrize("fmt", [E4M3FN, E4M3FNUZ], ids=["e4m3fn", "e4m3fnuz"])
def test_fp8_prompts_with_windows_sinks_and_16_bit_queries(fmt, extend_launches):
    case, keys, values, kw = fp8_case(fmt, "head", dtype=torch.bfloat16, heads=(8, 2))
    check(case, keys=keys, values=values, sliding_window=LONG + 3, sinks=torch.linspace(-1.0, 2.0, 8), **kw)
    assert extend_launches


def test_fp8_zero_k_scale_gives_uniform_attention_not_nan(extend_launches):
    # Every key reads as 0 (the scale is 0; the cache saturated), so every visible key weighs the same:
    # the masked scores must not turn into 0 * -inf.
    case, keys, values, kw = fp8_case(E4M3FN, "tensor")
    kw["k_scale"] = torch.tensor([0.0])
    case.k_cache = (case.k_cache.float().sign() * 448.0).to(E4M3FN)   # x / 0, saturated
    out = check(case, keys=keys, values=values, **kw)
    assert torch.isfinite(out[:int(case.query_start_loc[-1])]).all() and extend_launches


def test_fp8_rows_are_what_the_dense_path_reads(extend_launches):
    # Guards the fp8 tests: values that round to other codes change the whole prompts' rows, and the
    # chunk's, whose prefix (from the cache, unchanged) keeps them from doubling.
    case, keys, values, kw = fp8_case(E4M3FN, None)
    honest = run(case, keys, values, **kw)
    skewed = run(case, keys, values * 2.0, **kw)   # twice the codes but for the subnormals' rounding
    chunk = slice(2 * LONG + 3, 3 * LONG + 3)
    for rows in (slice(0, chunk.start), slice(chunk.stop, None)):
        assert (skewed[rows] - 2.0 * honest[rows]).abs().max() < 1e-2
    assert (skewed[chunk] - 2.0 * honest[chunk]).abs().max() > 1e-1
    assert not torch.equal(skewed[chunk], honest[chunk])
    assert len(extend_launches) == 2


@pytest.mark.parametrize("fmt", [E4M3FN, E4M3FNUZ], ids=["e4m3fn", "e4m3fnuz"])
def test_fp8_chunks_read_their_prefix_as_the_cache_holds_it(fmt):
    # Long prefixes (several tiles, one partial), per-head scales, bf16 queries: the copy decodes the
    # cache's bytes in its own format, unscaled, and the attention scales them as it does the rows.
    case, keys, values, kw = fp8_case(fmt, "head", dtype=torch.bfloat16, heads=(8, 2))
    check(case, keys=keys, values=values, sinks=torch.linspace(-1.0, 2.0, 8), **kw)


# --- bad input -----------------------------------------------------------------------------------

@pytest.mark.parametrize("bad, match", [
    (lambda k: k[:, :1], "new_keys has shape"),
    (lambda k: k[:10], "new_keys has shape"),
    (lambda k: k.to(torch.float16), "new_keys"),
    (lambda k: k[None], "new_keys"),
])
def test_malformed_new_keys_are_refused_before_launch(bad, match, extend_launches):
    case = build([40], [40])
    keys, values = new_kv(case)
    with pytest.raises(ValueError, match=match):
        ops.paged_attention(*case.args(), causal=True, max_query_len=40, new_keys=bad(keys), new_values=values)
    assert not extend_launches


def test_one_of_the_pair_alone_is_refused():
    case = build([40], [40])
    keys, _ = new_kv(case)
    with pytest.raises(ValueError, match="new_keys and new_values"):
        ops.paged_attention(*case.args(), causal=True, max_query_len=40, new_keys=keys)


# --- random shapes -------------------------------------------------------------------------------

@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_random_batches(data):
    n = data.draw(st.integers(1, 4))
    q_lens = data.draw(st.lists(st.integers(1, 2 * LONG + 7), min_size=n, max_size=n))
    prefixes = data.draw(st.lists(st.integers(0, 40), min_size=n, max_size=n))
    group = data.draw(st.sampled_from([1, 2, 4]))
    block_size = data.draw(st.sampled_from([1, 16, 32]))
    kw = {}
    if data.draw(st.booleans()):
        kw["sliding_window"] = data.draw(st.integers(1, 3 * LONG))
    if data.draw(st.booleans()):
        kw["sinks"] = torch.randn(2 * group, generator=torch.Generator().manual_seed(data.draw(st.integers(0, 9))))
    check(build([q + p for q, p in zip(q_lens, prefixes)], q_lens, num_q_heads=2 * group, num_kv_heads=2,
                block_size=block_size, seed=data.draw(st.integers(0, 99))), **kw)


def test_prepared_calls_keep_the_dense_launch_and_only_for_calls_that_pass_rows(extend_launches):
    from dflash_rocm_plugin.ops import call_cache
    call_cache.clear()
    case = build([50, 20], [50, 20])
    first = run(case)
    again = run(case)
    assert call_cache.size() == 1 and len(extend_launches) == 2
    assert torch.equal(first, again)
    out = ops.paged_attention(*case.args(), causal=True, max_query_len=50)  # no rows: a key of its own
    assert call_cache.size() == 2 and len(extend_launches) == 2
    assert (out - first).abs().max() < 1e-5
