"""ops.paged_attention equals the float64 reference: named edge cases plus hypothesis-drawn shapes.

Outputs are NaN-poisoned before every launch, so a row the kernel forgets to write fails the
comparison; padding rows past the last sequence must stay poisoned (untouched).
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dflash_rocm_plugin import ops, reference
from dflash_rocm_plugin.ops import _runtime, launch_config
from tests.core.cases import build, check_against_reference, pin_gpu


def check(case, *, causal, dtype=torch.float32, **kw):
    assert case.q.dtype == dtype
    return check_against_reference(case, causal=causal, **kw)


# --- the DFlash shapes -------------------------------------------------------------------------

@pytest.mark.parametrize("causal", [False, True], ids=["draft-noncausal", "verify-causal"])
def test_dflash_block_of_16_over_context(causal):
    case = build([40, 57, 16], [16, 16, 16], num_q_heads=8, num_kv_heads=2, head_dim=64)
    check(case, causal=causal)


def test_noncausal_differs_from_causal():
    # Guards the test itself: if both modes agreed, the reference could not catch a mask bug.
    case = build([40], [16])
    a = ops.paged_attention(*case.args(), causal=True)
    b = ops.paged_attention(*case.args(), causal=False)
    assert (a - b).abs().max() > 1e-2


# --- named edge cases --------------------------------------------------------------------------

@pytest.mark.parametrize("causal", [False, True])
def test_single_query_decode(causal):
    check(build([1, 33, 70], [1, 1, 1]), causal=causal)


@pytest.mark.parametrize("causal", [False, True])
def test_query_covers_whole_sequence(causal):
    check(build([5, 37], [5, 37]), causal=causal)


@pytest.mark.parametrize("block_size", [1, 3, 16, 64, 128])
def test_page_sizes_and_lengths_not_multiple_of_page_or_tile(block_size):
    check(build([1, 17, 65, 130], [1, 7, 16, 9], block_size=block_size), causal=True)


@pytest.mark.parametrize("group", [1, 2, 3, 4, 8, 16])
def test_gqa_groups(group):
    check(build([20, 45], [16, 3], num_q_heads=2 * group, num_kv_heads=2), causal=False)


@pytest.mark.parametrize("head_dim", [64, 80, 96, 128, 192, 256, 264, 512])
def test_head_dims(head_dim):
    check(build([19, 40], [16, 2], num_q_heads=4, num_kv_heads=1, head_dim=head_dim), causal=False)


@pytest.mark.parametrize("layout", ["kv_interleaved", "heads_major"])
@pytest.mark.parametrize("causal", [False, True])
def test_strided_cache_views(layout, causal):
    check(build([30, 18], [16, 5], layout=layout), causal=causal)


def test_padding_rows_untouched():
    check(build([30, 18], [16, 5], padding_rows=7), causal=True)


def test_empty_query_sequences_in_batch():
    check(build([30, 12, 18], [16, 0, 5]), causal=False)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("window", [1, 4, 17])
def test_sliding_window(causal, window):
    check(build([40, 9], [16, 9]), causal=causal, sliding_window=window)


@pytest.mark.parametrize("causal", [False, True])
def test_softcap_and_custom_scale(causal):
    check(build([40, 9], [16, 3]), causal=causal, softcap=2.5, scale=0.3)


@pytest.mark.parametrize("causal", [False, True])
def test_split_kv_matches_single_pass(causal):
    case = build([300, 77, 16], [16, 1, 16], num_q_heads=8, num_kv_heads=2, head_dim=32)
    one = check(case, causal=causal, num_kv_splits=1)
    for splits in (2, 5):
        many = check(case, causal=causal, num_kv_splits=splits)
        assert (one - many).abs().max() <= 1e-5


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("block_size,splits,softcap", [(16, 1, None), (1, 1, None), (5, 3, None), (16, 2, 2.5)])
def test_overlapped_score_loop_matches_reference(causal, block_size, splits, softcap):
    """Q K^T of tile t+1 before tile t's softmax: same answer, including loops with no full tile."""
    from dflash_rocm_plugin.ops import launch_config
    case = build([300, 77, 16, 129, 64], [16, 1, 16, 16, 3], num_q_heads=8, num_kv_heads=1,
                 block_size=block_size)
    with launch_config.forced(overlap_qk=True):
        check(case, causal=causal, num_kv_splits=splits, softcap=softcap)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("block_size,splits,window,overlap", [(16, 1, None, False), (1, 3, None, True),
                                                              (5, 2, 40, False), (16, 1, 7, True)])
def test_transposed_pv_matches_reference(causal, block_size, splits, window, overlap):
    """The accumulator held as O^T (``pv_transposed``): same answer over full, masked, windowed
    and split loops, with and without the overlapped score loop, and with a padded head dim."""
    case = build([300, 77, 16, 129, 64], [16, 1, 16, 16, 3], num_q_heads=8, num_kv_heads=2, head_dim=40,
                 block_size=block_size, padding_rows=3)
    with launch_config.forced(pv_transposed=True, overlap_qk=overlap):
        check(case, causal=causal, num_kv_splits=splits, sliding_window=window)


@pytest.mark.parametrize("splits", [None, 2])
def test_heaviest_query_tiles_first_give_the_same_rows(splits):
    """Causal prefill and chunked prefill in reverse tile order (``heavy_first``, the chooser's pick
    for them): the float64 reference's rows, bit for bit those of the grid's order, padding rows and
    every tile past a sequence's end untouched."""
    case = build([300, 77, 129, 64, 5], [300, 40, 129, 1, 5], num_q_heads=8, num_kv_heads=2, head_dim=40,
                 padding_rows=3, seed=3)
    with launch_config.forced(heavy_first=True):
        reverse = check(case, causal=True, num_kv_splits=splits)
    with launch_config.forced(heavy_first=False):
        forward = check(case, causal=True, num_kv_splits=splits)
    assert torch.equal(reverse.nan_to_num(7.0), forward.nan_to_num(7.0))


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("heads", [(32, 2, 32), (4, 2, 512)], ids=["gqa16", "d512"])
def test_blocks_spanning_several_query_tiles_split_their_keys(causal, heads):
    """A 16-token block of a GQA-16 group (128-row tiles of 8 queries) or of 512-wide heads (16-row
    tiles of 8 queries at GQA 2) spans several query tiles, and the chooser splits its keys."""
    hq, hkv, d = heads
    case = build([300, 133], [16, 13], num_q_heads=hq, num_kv_heads=hkv, head_dim=d, padding_rows=3)
    launch = ops.describe_launch(num_tokens=case.q.shape[0], num_seqs=2, num_q_heads=hq, num_kv_heads=hkv,
                                 head_dim=d, page_size=16, kv_capacity=case.block_table.shape[1] * 16,
                                 causal=causal, dtype=case.q.dtype).launch
    assert launch.block_q < 16 and launch.num_splits > 1
    check(case, causal=causal)


def test_split_kv_with_more_splits_than_key_tiles():
    # Most splits own no keys at all and must contribute nothing (lse = -inf).
    check(build([10, 3], [4, 1]), causal=True, num_kv_splits=8)


def test_automatic_split_choice_small_batch_long_context():
    check(build([700], [16], num_q_heads=4, num_kv_heads=1), causal=False)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_dtypes(dtype):
    # bf16 too: under the interpreter the dots run in fp32 (its own bf16 dots are wrong).
    check(build([50, 20], [16, 16], dtype=dtype), causal=False, dtype=dtype)


def test_max_query_len_hint_gives_same_result():
    case = build([50, 20, 9], [1, 1, 1], num_q_heads=4, num_kv_heads=4)
    a = check(case, causal=True, max_query_len=1)
    b = check(case, causal=True)
    assert torch.equal(a, b) or (a - b).abs().max() <= 1e-6


def test_allocates_output_when_none_given():
    case = build([20], [4])
    out = ops.paged_attention(*case.args(), causal=True)
    assert out.shape == case.q.shape and out.dtype == case.q.dtype
    want = reference.paged_attention(*case.args(), causal=True)
    assert (out.double() - want).abs().max() <= 2e-5


def test_strided_output_view():
    case = build([20, 30], [4, 16])
    parent = torch.full((case.q.shape[0], case.q.shape[1], case.q.shape[2] * 2), float("nan"))
    out = parent[..., ::2]
    ops.paged_attention(*case.args(), causal=False, out=out)
    want = reference.paged_attention(*case.args(), causal=False)
    assert (out.double() - want).abs().max() <= 2e-5
    assert torch.isnan(parent[..., 1::2]).all()


# --- random shapes -----------------------------------------------------------------------------

@st.composite
def batches(draw):
    num_seqs = draw(st.integers(1, 4))
    seq_lens = [draw(st.integers(1, 90)) for _ in range(num_seqs)]
    q_lens = [draw(st.integers(0 if i else 1, min(s, 20))) for i, s in enumerate(seq_lens)]
    return dict(
        seq_lens=seq_lens, q_lens=q_lens,
        num_kv_heads=draw(st.sampled_from([1, 2])),
        group=draw(st.sampled_from([1, 2, 4, 8])),
        head_dim=draw(st.sampled_from([32, 64, 48])),
        block_size=draw(st.sampled_from([1, 4, 16, 32])),
        layout=draw(st.sampled_from(["contiguous", "kv_interleaved", "heads_major"])),
        causal=draw(st.booleans()),
        window=draw(st.one_of(st.none(), st.integers(1, 40))),
        softcap=draw(st.one_of(st.none(), st.floats(0.5, 30.0))),
        splits=draw(st.sampled_from([None, 1, 3])),
        padding_rows=draw(st.integers(0, 3)),
        seed=draw(st.integers(0, 2**16)),
    )


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches())
def test_random_batches_match_reference(p):
    case = build(p["seq_lens"], p["q_lens"], num_q_heads=p["num_kv_heads"] * p["group"],
                 num_kv_heads=p["num_kv_heads"], head_dim=p["head_dim"], block_size=p["block_size"],
                 layout=p["layout"], padding_rows=p["padding_rows"], seed=p["seed"])
    check(case, causal=p["causal"], sliding_window=p["window"], softcap=p["softcap"],
          num_kv_splits=p["splits"])


def test_outgrown_workspace_stays_alive_for_earlier_graphs():
    # A CUDA/HIP graph captured with the old buffer keeps launching into it.
    from dflash_rocm_plugin.ops import workspace
    dev = torch.device("cpu")
    small = workspace._get(dev, 10)
    big = workspace._get(dev, small.numel() + 1)
    assert big.data_ptr() != small.data_ptr()
    assert any(t.data_ptr() == small.data_ptr() for t in workspace._retired)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("block_size", [1, 4, 16])
def test_sliding_window_never_reads_blocks_that_left_it(causal, block_size):
    """A host frees the blocks every row of the block has left the window of (vLLM puts the null
    block there, SGLang reuses the slots): they hold NaN here and must not be read."""
    window = 9
    case = build([70, 41, 12], [16, 5, 12], block_size=block_size)
    for row, (s, q) in enumerate(zip(case.seq_lens.tolist(), [16, 5, 12])):
        gone = max(0, s - q - window + 1) // block_size  # whole pages before the first row's window
        pages = case.block_table[row, :gone].long()
        case.k_cache[pages] = float("nan")
        case.v_cache[pages] = float("nan")
    out = check(case, causal=causal, sliding_window=window)
    assert torch.isfinite(out[: int(case.query_start_loc[-1])]).all()


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("window", [64, 130, 257])
@pytest.mark.parametrize("splits", [None, 1, 3])
@pytest.mark.parametrize("block_n", [None, 16], ids=["bn-default", "bn16"])
def test_long_windows_mask_only_their_edges(causal, window, splits, block_n):
    """Windows spanning several key tiles: the whole tiles start at the last row's window, the
    window's lower edge (which moves one key per row of the block) runs in narrow tiles of its own,
    the tiles between it and the diagonal run unmasked, the edges last.  The answer is unchanged, and
    pages wholly before every row's window (NaN) are never read."""
    case = build([600, 333, 40, 17], [16, 9, 16, 1], num_q_heads=4, num_kv_heads=1)
    for row, (s, q) in enumerate(zip(case.seq_lens.tolist(), [16, 9, 16, 1])):
        gone = max(0, s - q - window + 1) // case.k_cache.shape[1]
        case.k_cache[case.block_table[row, :gone].long()] = float("nan")
        case.v_cache[case.block_table[row, :gone].long()] = float("nan")
    with launch_config.forced(**({} if block_n is None else dict(block_n=block_n))):
        out = check(case, causal=causal, sliding_window=window, num_kv_splits=splits)
    assert torch.isfinite(out[: int(case.query_start_loc[-1])]).all()


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("splits", [1, 3])
@pytest.mark.parametrize("window", [40, 70])
def test_window_edge_wider_than_one_edge_tile(causal, splits, window):
    """64-token query tiles over 16-key tiles: a window's lower edge (63 keys: it moves one key per
    token) takes four EDGE_N-key tiles below the first whole tile, in the last split only; pages before
    every row's window hold NaN and are never read."""
    assert launch_config.window_edge_keys(64, 16, False) == 16
    q_lens = [100, 64, 7]
    case = build([300, 150, 90], q_lens, num_q_heads=2, num_kv_heads=1)
    for row, (s, q) in enumerate(zip(case.seq_lens.tolist(), q_lens)):
        gone = max(0, s - q - window + 1) // case.k_cache.shape[1]
        case.k_cache[case.block_table[row, :gone].long()] = float("nan")
        case.v_cache[case.block_table[row, :gone].long()] = float("nan")
    with launch_config.forced(block_q=64, block_n=16):
        out = check(case, causal=causal, sliding_window=window, num_kv_splits=splits)
    assert torch.isfinite(out[: int(case.query_start_loc[-1])]).all()


@pytest.mark.parametrize("block_q,block_n,fp8_dots,width", [
    (16, 64, False, 16), (8, 64, False, 16), (1, 64, False, 16), (17, 64, False, 16), (18, 64, False, 32),
    (64, 64, False, 64), (128, 64, False, 64), (64, 16, False, 16), (16, 64, True, 32), (16, 16, True, 32)])
def test_window_edge_tile_width(block_q, block_n, fp8_dots, width):
    """The edge (at most block_q - 1 keys) in the fewest tiles of the narrowest width a dot takes."""
    assert launch_config.window_edge_keys(block_q, block_n, fp8_dots) == width


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("window", [2048, 2040, 100])
def test_dflash2_window_block_of_8(causal, window):
    """DFlash2: window 2048 and blocks of 8 over long contexts -- the window spans one narrow edge
    tile plus whole tiles; a window that is no multiple of the tile, and one that
    sees the whole of the shortest sequence, give the same answer as the reference."""
    case = build([2300, 2055, 64], [8, 8, 8], num_q_heads=4, num_kv_heads=1, head_dim=16)
    check(case, causal=causal, sliding_window=window)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("splits", [None, 3])
def test_gemma4_global_layer_heads(causal, splits):
    """Gemma-4's global layers: head_dim 512 (16-row tiles), GQA 8, scale 1, DFlash block."""
    case = build([90, 33], [16, 7], num_q_heads=16, num_kv_heads=2, head_dim=512)
    check(case, causal=causal, scale=1.0 / 64, num_kv_splits=splits)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("splits", [1, 3])
def test_bf16_p_rounded_by_integer_arithmetic_stays_unbiased(monkeypatch, causal, splits):
    """gfx94x converts f32 to bf16 only in software, so P is rounded to bf16 there by an integer
    add of half a bf16 step and a truncating cast (the kernel's P_INT_ROUND); l sums P unrounded,
    as on every other GPU.  Under the interpreter the dots run in fp32, so against the same run
    without it the only difference is P's rounding: it must change the rows (it ran) by no more
    than bf16 rounding does, and leave their size alone (cutting instead of rounding shrinks every
    row by ~2^-9; the add without the truncation grows them by ~3e-3)."""
    case = build([700, 300, 16], [16, 16, 16], num_q_heads=8, num_kv_heads=2, head_dim=64, dtype=torch.bfloat16)
    monkeypatch.setattr(_runtime, "gpu_arch", lambda index=None: "gfx942")
    from dflash_rocm_plugin.ops.backends import triton as triton_backend
    from dflash_rocm_plugin.ops.call import AttentionCall
    q, k, v, table, sl, qsl = case.args()
    launch = triton_backend.Launch(AttentionCall(q, k, v, table, sl, qsl, torch.empty_like(q), causal=causal,
                                                 scale=0.125, window=0, softcap=0.0, max_query_len=16,
                                                 num_kv_splits=splits, workspace=None))
    assert launch.constexprs["P_INT_ROUND"]
    out = ops.paged_attention(*case.args(), causal=causal, num_kv_splits=splits).double()
    monkeypatch.setattr(_runtime, "gpu_arch", lambda index=None: "cpu")
    exact = ops.paged_attention(*case.args(), causal=causal, num_kv_splits=splits).double()  # P not rounded
    d = out - exact
    shift = ((d * exact).sum() / (exact * exact).sum()).item()
    print(f"P rounding: rows change {(d.norm() / exact.norm()).item():.2e}, size {shift:+.2e}")
    assert 0 < (d.norm() / exact.norm()).item() < 4e-3 and abs(shift) < 1.5e-4


def _hopper_launch(monkeypatch, *, batch, q_len, hq, hkv, d, context):
    """The launch ``choose`` makes on an H200 for this call (its device facts pinned), as fields to
    force under the interpreter; the inline-PTX page ids are NVIDIA assembly, so those are off."""
    import dataclasses
    with monkeypatch.context() as m:
        pin_gpu(m, "sm_90", 227 * 1024, 132)
        cfg = launch_config.choose(num_tokens=batch * q_len, num_seqs=batch, num_kv_heads=hkv, group=hq // hkv,
                                   head_dim=d, kv_capacity=context, max_query_len=q_len, num_splits=None,
                                   device_index=0, page_size=16)
    fields = dataclasses.asdict(cfg)
    fields.update(page_ids_asm=False, mfma_nonkdim=0)
    return fields


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("heads,batch,rows", [((16, 2, 256), 3, 128), ((16, 8, 256), 3, 32),
                                              ((16, 2, 512), 2, 64)],
                         ids=["qwen3-next-128-rows", "gemma4-sliding", "gemma4-global"])
@pytest.mark.parametrize("cache_dtype", [None, torch.float8_e4m3fn], ids=["fp32", "e4m3fn"])
def test_the_hopper_wide_head_launches_match_float64(monkeypatch, causal, heads, batch, rows, cache_dtype):
    """The tiles an H200 takes for 256- and 512-wide heads (64-key tiles, a q16 block of a GQA-8
    group in 128 rows; 64-row tiles of 8 warps for 512), with their split keys, run here by the
    interpreter: ragged blocks and lengths, NaN in every unowned slot, fp8 caches too."""
    hq, hkv, d = heads
    fields = _hopper_launch(monkeypatch, batch=batch, q_len=16, hq=hq, hkv=hkv, d=d, context=4096)
    assert fields["block_m"] == rows and fields["num_splits"] > 1
    fields["num_splits"] = min(fields["num_splits"], 3)  # the same split loop over fewer keys
    seq_lens = [70 + 37 * i for i in range(batch)]
    q_lens = [16 - (i % 3) * 5 for i in range(batch)]  # 16, 11, 6 rows: full and partial tiles
    case = build(seq_lens, q_lens, num_q_heads=hq, num_kv_heads=hkv, head_dim=d, cache_dtype=cache_dtype, seed=7)
    with launch_config.forced(**fields):
        check(case, causal=causal, scale=d ** -0.5, max_query_len=16,
              k_scale=None if cache_dtype is None else torch.tensor([0.5]),
              v_scale=None if cache_dtype is None else torch.tensor([2.0]))
