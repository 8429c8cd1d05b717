"""Paged attention for a short block of queries per sequence, causal or not.

One program owns every query row of one sequence that maps to one KV head: the
BLOCK_Q query tokens of its tile times the GQA group, folded into BLOCK_M rows.
A 16-token DFlash block with 32 query / 8 KV heads is therefore a single
64-row tile per KV head, and each K/V byte of the sequence is streamed once.

Grid: (query tiles, KV heads, KV splits).  The number of query tiles comes
from an upper bound (``num_tokens // BLOCK_Q + num_seqs``) so the launch never
needs the host to read device values; surplus programs exit at once.  With
more than one split each program covers a slice of the key range and writes a
partial result plus its log-sum-exp; ``merge_splits_kernel`` combines them.

Masking, with ``p`` the absolute position of a query row
(``seq_len - q_len + row``):
  * keys at or past ``seq_len`` are never seen;
  * CAUSAL: key ``j`` is visible iff ``j <= p``;
  * sliding window ``W``: key ``j`` is visible iff ``p - j < W``.
Softmax runs in base 2 with the scale folded into the exponent.

Optional per-call features, all compile-time switches so the plain kernel is unchanged:
  * attention sinks: a learned per-head logit (in the units of the scaled scores) joins the
    softmax denominator once and adds no value.  It seeds the running max and sum of split 0
    (``m = sink``, ``l = 1``); other splits start empty, so the merge counts it exactly once.
  * fp8 caches (e4m3fn, e4m3fnuz) with per-tensor or per-KV-head scales: ``k_scale`` is folded
    into the softmax scale and ``v_scale`` applied to the finished row (one program serves one
    KV head, so both are scalars here).  Tiles are converted to the dot dtype after loading.
  * UPCAST_DOTS: dots in fp32 (the Triton interpreter's bf16 dots are wrong).
  * FP16_DOTS: dots in fp16 for fp8 caches under bf16 queries (see the kernel).
  * FP8_DOTS (opt-in launch field ``fp8_dots``): P V of an fp8 cache dots in fp8 on the tensor
    cores, P scaled by P8_SCALE into V's format, V not converted; 1: P rounded into it (3 mantissa
    bits), 2: P as the sum of two fp8 parts and two dots over the same V tile (P_SPLIT_DOTS).
    FP8_QK (the same codes; opt-in, ``ops.fp8_qk_policy``, or the launch field): Q K^T
    in fp8, q joining the cache's format under one scale per program, K not converted; alone or
    with FP8_DOTS.  Costs accuracy (P, and q, keep 3 mantissa
    bits).  With QK_SPLIT (launch field ``fp8_dots="qk_split"``) q is the sum of two fp8 parts and
    Q K^T two fp8 dots over the same K tile: K still unconverted, q's precision that of bf16.
  * PV_T (launch field ``pv_transposed``): the accumulator holds O^T, so V is the A operand of
    its dot (see ``_softmax_pv``).
  * P_INT_ROUND: bf16 P is rounded by integer arithmetic where the GPU has no f32 -> bf16
    conversion (gfx94x; see ``_softmax_pv``).
  * HEAVY_FIRST (launch field ``heavy_first``): query tiles in reverse grid order.
  * EXTEND_MIN_Q: prompts of at least that many tokens with nothing cached before them are left
    to ``extend_attention_kernel``, which reads their keys from the host's dense new K/V; with
    EXTEND_CHUNKS also chunks of that many tokens over a prefix of at most GQA times as many keys
    (which it reads from a dense copy; under a window only the prefix's last window - 1 keys count).

The key loop runs in two phases (as in Triton's fused-attention tutorial): the
tiles every row of the program may fully see run without any mask; the few
tiles at the causal diagonal, the sequence end or a window edge run masked.
A sliding window's lower edge moves one key per query token, so it is at most
BLOCK_Q - 1 keys wide: it gets tiles of its own width (EDGE_N keys,
``ops.launch_config.window_edge_keys``) instead of a BLOCK_N-key tile that is mostly masked.
The kernel is bound by HBM bandwidth (about 64 FLOP per K/V byte with a
GQA-4 group of 16 tokens), so the hot loop must do little besides two dots
and the exponentials while the next tiles stream in (``num_stages``).

Four launch-time choices serve that streaming:
  * num_stages=5 with ``tl.load`` page ids (NVIDIA, unsplit key loops at pages
    under 16 or of many tiles): Triton's software pipeliner treats the
    block-table read as the first load of an indirect chain (ids -> K/V gather
    -> dots) and splits the stages between them.  At 5 stages the ids of tile
    i+3 are copied into shared memory while the K/V of tile i+2 are gathered
    with ids that landed a step earlier, so two K/V tiles are in flight and no
    warp waits on an id.  At 3 stages the chain leaves one: the K/V of step
    i+1 are issued after step i's dots and every step starts by draining all
    copies.
  * PAGE_IDS_ASM (NVIDIA, split-KV and short page-16 loops, and page-16 fp8 loops
    whose K feeds the dots unconverted): reading the page
    ids with an inline ``ld.global.nc`` (an op the pipeliner does not convert)
    leaves the K/V gather as the loop's only pipelined load, so 3 stages
    already keep two K/V tiles in flight with a shorter prologue.  The read
    itself sits right before the address arithmetic that consumes it and
    queues behind the K/V copies in L1, which costs 15-30 % in unsplit loops
    at page 1, where every key of a tile has its own id.
  * OFFSETS_32: when every element of both caches lies within 2^31 of its base
    (checked on the host), the per-key ``page * stride`` products run in
    32-bit instead of 64-bit integer arithmetic.
  * OVERLAP_QK: 128-row tiles (GQA 8) hold one program per multiprocessor
    and are bound by each tile's dot -> softmax -> dot chain rather than by
    memory; issuing the next tile's Q K^T before this tile's softmax lets the
    tensor cores and the exponentials run at the same time.
"""

import triton
import triton.language as tl

from dflash_rocm_plugin.kernels import fp8


@triton.jit
def _prefix_kept(prefix, window, USE_WINDOW: tl.constexpr):
    # The keys of a sequence's prefix that some query of its block sees: under a window its last window - 1.
    kept = prefix
    if USE_WINDOW:
        kept = tl.minimum(prefix, window - 1)
    return kept


@triton.jit
def _dense_serves(q_len, prefix, window, MIN_QUERY: tl.constexpr, GQA: tl.constexpr, CHUNKS: tl.constexpr,
                  USE_WINDOW: tl.constexpr):
    # Whether kernels/extend_attention.py serves a sequence of q_len query tokens over prefix cached keys
    # (the paged kernel then skips it): a whole prompt of at least MIN_QUERY tokens, and with CHUNKS a chunk
    # of that many whose kept prefix fits the GQA rows per query token that kernels/kv_cache.py copies it to.
    if CHUNKS:
        serves = (q_len >= MIN_QUERY) & (_prefix_kept(prefix, window, USE_WINDOW) <= GQA * q_len)
    else:
        serves = (q_len >= MIN_QUERY) & (prefix == 0)
    return serves


@triton.jit
def _find_sequence(query_start_loc_ptr, tile, num_seqs, BLOCK_Q: tl.constexpr, ROWS: tl.constexpr = 1):
    # Sequence i owns tiles starting at ROWS * qsl[i] // BLOCK_Q + i (ROWS rows per token): an upper
    # bound on the tiles of all earlier sequences, so tiles never overlap.
    lo = 0
    hi = num_seqs
    while lo < hi:
        mid = (lo + hi) // 2
        first_tile = ROWS * tl.load(query_start_loc_ptr + mid) // BLOCK_Q + mid
        if first_tile <= tile:
            lo = mid + 1
        else:
            hi = mid
    return lo - 1


@triton.jit
def _exponent_shift(m_new, MASKED: tl.constexpr):
    """The running max the exponents subtract: in a masked tile a row that has seen no key yet keeps
    m = -inf, shifted by 0 instead so that exp2(-inf - -inf) never produces NaN."""
    if MASKED:
        m_new = tl.where(m_new == float("-inf"), 0.0, m_new)
    return m_new


@triton.jit
def _tanh(x):
    # Portable across CUDA, HIP and the interpreter (no libdevice).
    e = tl.exp(-2.0 * tl.abs(x))
    t = (1.0 - e) / (1.0 + e)
    return tl.where(x >= 0, t, -t)


@triton.jit
def _kv_offsets(
    key, key_ok, kv_end, bt_row, kv_head,
    stride_ks, stride_kh, stride_kb, stride_vs, stride_vh, stride_vb, stride_btb,
    PAGE_SIZE: tl.constexpr, MASKED: tl.constexpr, PAGE_IDS_ASM: tl.constexpr, OFFSETS_32: tl.constexpr,
):
    """Element offsets of each key's K and V row for this KV head (keys may span pages)."""
    # Repeated block-table entries of one page hit L1, so this costs no HBM.
    if MASKED:
        page = tl.load(bt_row + (key // PAGE_SIZE) * stride_btb, mask=key_ok, other=0)
        in_page = key % PAGE_SIZE
    else:
        # An unmasked tile's keys lie in [0, seq_len): unsigned, dividing by the page size is a
        # shift (signed division adds a sign fix-up per key).
        ukey = key.to(tl.uint32)
        in_page = (ukey % PAGE_SIZE).to(tl.int32)
        if PAGE_IDS_ASM:
            # Not a tl.load, so the pipeliner streams K/V two tiles ahead (module docstring).  Nor
            # is it predicated: the pipeliner runs it for the tiles after the loop's last too (whose
            # K/V loads it masks off), so the key is held inside the sequence -- past its
            # block-table row lies the next row or, for the table's last row, possibly unmapped memory.
            in_row = tl.maximum(tl.minimum(key, kv_end - 1), 0).to(tl.uint32) // PAGE_SIZE
            page = tl.inline_asm_elementwise(
                "ld.global.nc.b32 $0, [$1];", "=r,l", [bt_row + in_row.to(tl.int32) * stride_btb],
                dtype=tl.int32, is_pure=True, pack=1)
        else:
            page = tl.load(bt_row + (ukey // PAGE_SIZE).to(tl.int32) * stride_btb)
    if not OFFSETS_32:
        page = page.to(tl.int64)
    k_off = page * stride_kb + in_page * stride_ks + kv_head * stride_kh
    v_off = page * stride_vb + in_page * stride_vs + kv_head * stride_vh
    return k_off, v_off


# Natural-log units to the base-2 exponents the softmax runs in.
LOG2E = tl.constexpr(1.4426950408889634)

# P (at most 1) times this as an fp8 dot operand: e4m3's subnormals then reach p = 2^-16, and both
# formats (largest 448 and 240) hold it.  Undone once on the finished rows.
P8_SCALE = tl.constexpr(128.0)
# FP8_DOTS' code for P as the sum of two fp8 parts (1: P rounded into V's format).
P_SPLIT_DOTS = tl.constexpr(2)


@triton.jit
def _dot_operand(x, like, SOFT_FP8: tl.constexpr):
    """A loaded K or V tile in the dot's dtype (that of ``like``)."""
    if SOFT_FP8:
        x = fp8.decode_e4m3(x, SOFT_FP8 == 2)
    if x.dtype == tl.float8e4b8 and like.dtype == tl.float16:
        # gfx942 (the only GPU converting e4m3fnuz) has no fp8 -> fp16 instruction: the direct cast
        # goes fp8 -> f32 pairs, then one f32 -> f16 per element and a pack.  Every e4m3fnuz value
        # is exact in fp16, so truncating is exact and packs two per instruction: half the VALU work.
        return x.to(tl.float32).to(tl.float16, fp_downcast_rounding="rtz")
    return x.to(like.dtype)


@triton.jit
def _scores(q, q_lo, k_cache_ptr, k_off, key_ok, dims, dim_ok, stride_kd, scale, softcap,
            MASKED: tl.constexpr, USE_SOFTCAP: tl.constexpr, DOT_PRECISION: tl.constexpr,
            SOFT_FP8: tl.constexpr, QK_SPLIT: tl.constexpr):
    """Q K^T of one key tile: raw products (``_softmax_pv`` scales them inside the exponent's FMA),
    or with a softcap already capped and scaled into the base-2 exponent domain."""
    # K is read as [D, N] so the dot needs no transpose; each key's D values
    # are contiguous, so the load stays coalesced along dims.
    if MASKED:
        k = tl.load(k_cache_ptr + k_off[None, :] + dims[:, None] * stride_kd,
                    mask=key_ok[None, :] & dim_ok[:, None], other=0.0)
    else:
        k = tl.load(k_cache_ptr + k_off[None, :] + dims[:, None] * stride_kd,
                    mask=dim_ok[:, None], other=0.0)
    k_op = _dot_operand(k, q, SOFT_FP8)
    if QK_SPLIT:
        # q = q + q_lo in two fp8 dots over the same K tile (the smaller part first).
        s = tl.dot(q_lo, k_op, input_precision=DOT_PRECISION)
        s = tl.dot(q, k_op, s, input_precision=DOT_PRECISION)
    else:
        s = tl.dot(q, k_op, input_precision=DOT_PRECISION)
    if USE_SOFTCAP:
        s = softcap * _tanh(s * (scale / softcap)) * LOG2E
    return s


@triton.jit
def _score_scale(scale, USE_SOFTCAP: tl.constexpr):
    """What ``_scores``' result still needs to be multiplied by to be base-2 exponents."""
    if USE_SOFTCAP:
        return 1.0
    return scale * LOG2E


@triton.jit
def _softmax_pv(acc, l_i, m_i, s, s_scale, pv_like, v_cache_ptr, v_off, key_ok, dims, dim_ok, stride_vd,
                MASKED: tl.constexpr, DOT_PRECISION: tl.constexpr, SOFT_FP8: tl.constexpr,
                FP8_DOTS: tl.constexpr, PV_T: tl.constexpr, P_INT_ROUND: tl.constexpr):
    """Online-softmax update of (acc, l, m) by one tile of scores and its V rows, the base-2
    exponents being ``s * s_scale``; without FP8_DOTS, P and V dot in the dtype of ``pv_like``
    (the queries before FP8_QK)."""
    # The scale is positive, so the row max of the products is the scaled max of the row, and
    # each exponent is one FMA: one multiply per score fewer where the loop is ALU-bound (CDNA's
    # VALU; Hopper's compute-bound 128-row tiles).  Masked tiles come scaled (s_scale = 1).
    m_new = tl.maximum(m_i, tl.max(s, 1) * s_scale)
    m_new_safe = _exponent_shift(m_new, MASKED)
    p = tl.math.exp2(s * s_scale - m_new_safe[:, None])
    alpha = tl.math.exp2(m_i - m_new_safe)
    l_i = l_i * alpha + tl.sum(p, 1)
    if P_INT_ROUND:
        # P rounded to bf16 by integer arithmetic, to nearest with ties away from zero: gfx94x has
        # no f32 -> bf16 instruction and rounds to nearest-even in five per value, this in one add
        # (half a bf16 step) before the truncating cast below, which keeps the upper half.
        p = (p.to(tl.uint32, bitcast=True) + 0x8000).to(tl.float32, bitcast=True)
    if MASKED:
        v = tl.load(v_cache_ptr + v_off[:, None] + dims[None, :] * stride_vd,
                    mask=key_ok[:, None] & dim_ok[None, :], other=0.0)
    else:
        v = tl.load(v_cache_ptr + v_off[:, None] + dims[None, :] * stride_vd,
                    mask=dim_ok[None, :], other=0.0)
    p_lo = p  # the low part of P's two fp8 parts with FP8_DOTS == P_SPLIT_DOTS, else unread
    if FP8_DOTS:
        p8 = p * P8_SCALE
        p_op, v_op = p8.to(v.dtype), v
        if FP8_DOTS == P_SPLIT_DOTS:
            # As q with QK_SPLIT: P8_SCALE is a power of two, so the remainder of P's nearest e4m3
            # value (at most half its step) holds P's next 4 significant bits: 8 in all, a bf16 P's
            # precision, while the remainder stays a normal e4m3 value (p of 2^-8 and up).
            p_lo = (p8 - p_op.to(tl.float32)).to(v.dtype)
    else:
        if P_INT_ROUND:
            # (P V dots in bf16 on the GPU; the interpreter's in fp32 take the rounded values too.)
            p_op = p.to(tl.bfloat16, fp_downcast_rounding="rtz").to(pv_like.dtype)
        else:
            p_op = p.to(pv_like.dtype)
        v_op = _dot_operand(v, pv_like, SOFT_FP8)
    if PV_T:
        # acc holds O^T = V^T P^T: V is then the A operand, which Hopper's wgmma takes from
        # registers, where an fp8 B operand must lie K-major in shared memory (a transposing
        # copy that also stops V's loads from pipelining).
        acc = acc * alpha[None, :]
        if FP8_DOTS == P_SPLIT_DOTS:
            acc = tl.dot(tl.trans(v_op), tl.trans(p_lo), acc, input_precision=DOT_PRECISION)
        acc = tl.dot(tl.trans(v_op), tl.trans(p_op), acc, input_precision=DOT_PRECISION)
    else:
        acc = acc * alpha[:, None]
        if FP8_DOTS == P_SPLIT_DOTS:
            acc = tl.dot(p_lo, v_op, acc, input_precision=DOT_PRECISION)
        acc = tl.dot(p_op, v_op, acc, input_precision=DOT_PRECISION)
    return acc, l_i, m_new


@triton.jit
def _attend_tile(
    acc, l_i, m_i, q, q_lo, q_pv, t, tile_base, kv_begin, kv_end, q_pos, window,
    k_cache_ptr, v_cache_ptr, bt_row, kv_head, scale, softcap,
    stride_ks, stride_kh, stride_kd, stride_kb,
    stride_vs, stride_vh, stride_vd, stride_vb, stride_btb,
    dims, dim_ok,
    BLOCK_N: tl.constexpr, PAGE_SIZE: tl.constexpr, MASKED: tl.constexpr,
    CAUSAL: tl.constexpr, USE_WINDOW: tl.constexpr, USE_SOFTCAP: tl.constexpr,
    DOT_PRECISION: tl.constexpr, PAGE_IDS_ASM: tl.constexpr, OFFSETS_32: tl.constexpr,
    SOFT_FP8: tl.constexpr, FP8_DOTS: tl.constexpr, PV_T: tl.constexpr, P_INT_ROUND: tl.constexpr,
    QK_SPLIT: tl.constexpr,
):
    """One BLOCK_N-key step of the online softmax for all BLOCK_M query rows.

    MASKED=False is the hot loop: every key of the tile exists and is visible to
    every row, so no per-element compare/select and no -inf guards are needed.
    """
    key = tile_base + t * BLOCK_N + tl.arange(0, BLOCK_N)
    key_ok = key < kv_end
    if USE_WINDOW:
        key_ok = key_ok & (key >= kv_begin)  # an edge tile may start below the window
    k_off, v_off = _kv_offsets(key, key_ok, kv_end, bt_row, kv_head, stride_ks, stride_kh, stride_kb,
                               stride_vs, stride_vh, stride_vb, stride_btb,
                               PAGE_SIZE, MASKED, PAGE_IDS_ASM, OFFSETS_32)
    s = _scores(q, q_lo, k_cache_ptr, k_off, key_ok, dims, dim_ok, stride_kd, scale, softcap,
                MASKED, USE_SOFTCAP, DOT_PRECISION, SOFT_FP8, QK_SPLIT)
    s_scale = _score_scale(scale, USE_SOFTCAP)
    if MASKED:
        visible = key_ok[None, :]
        if CAUSAL:
            visible = visible & (key[None, :] <= q_pos[:, None])
        if USE_WINDOW:
            visible = visible & ((q_pos[:, None] - key[None, :]) < window)
        # Scaled before -inf goes in: a zero scale (a zero k_scale) must not make 0 * -inf.
        s = tl.where(visible, s * s_scale, float("-inf"))
        s_scale = 1.0
    return _softmax_pv(acc, l_i, m_i, s, s_scale, q_pv, v_cache_ptr, v_off, key_ok, dims, dim_ok, stride_vd,
                       MASKED, DOT_PRECISION, SOFT_FP8, FP8_DOTS, PV_T, P_INT_ROUND)


@triton.jit
def _attend_full_tiles_overlapped(
    acc, l_i, m_i, q, q_lo, q_pv, tile_lo, full_hi, tile_base, kv_begin, kv_end,
    k_cache_ptr, v_cache_ptr, bt_row, kv_head, scale, softcap,
    stride_ks, stride_kh, stride_kd, stride_kb,
    stride_vs, stride_vh, stride_vd, stride_vb, stride_btb,
    dims, dim_ok,
    BLOCK_N: tl.constexpr, PAGE_SIZE: tl.constexpr, USE_SOFTCAP: tl.constexpr,
    DOT_PRECISION: tl.constexpr, PAGE_IDS_ASM: tl.constexpr, OFFSETS_32: tl.constexpr,
    SOFT_FP8: tl.constexpr, FP8_DOTS: tl.constexpr, PV_T: tl.constexpr, P_INT_ROUND: tl.constexpr,
    QK_SPLIT: tl.constexpr,
):
    """The unmasked tiles [tile_lo, full_hi) with Q K^T of tile t+1 issued before tile t's softmax.

    The scores of the next tile are independent of this tile's softmax, so the
    tensor cores compute them while the exponentials run (OVERLAP_QK).  The
    prologue scores a tile even when the range is empty (then any existing
    tile, its missing keys read from page 0) and the result is dropped.
    """
    cols = tl.arange(0, BLOCK_N)
    key = tile_base + tl.minimum(tile_lo, tl.maximum(full_hi - 1, 0)) * BLOCK_N + cols
    key_ok = (key < kv_end) & (key >= kv_begin)
    k_off, _ = _kv_offsets(key, key_ok, kv_end, bt_row, kv_head, stride_ks, stride_kh, stride_kb,
                           stride_vs, stride_vh, stride_vb, stride_btb, PAGE_SIZE, True, False, OFFSETS_32)
    s = _scores(q, q_lo, k_cache_ptr, k_off, key_ok, dims, dim_ok, stride_kd, scale, softcap,
                False, USE_SOFTCAP, DOT_PRECISION, SOFT_FP8, QK_SPLIT)
    s_scale = _score_scale(scale, USE_SOFTCAP)
    for t in range(tile_lo, full_hi):
        key_next = tile_base + tl.minimum(t + 1, full_hi - 1) * BLOCK_N + cols
        k_off, _ = _kv_offsets(key_next, None, kv_end, bt_row, kv_head, stride_ks, stride_kh, stride_kb,
                               stride_vs, stride_vh, stride_vb, stride_btb,
                               PAGE_SIZE, False, PAGE_IDS_ASM, OFFSETS_32)
        s_next = _scores(q, q_lo, k_cache_ptr, k_off, None, dims, dim_ok, stride_kd, scale, softcap,
                         False, USE_SOFTCAP, DOT_PRECISION, SOFT_FP8, QK_SPLIT)
        _, v_off = _kv_offsets(tile_base + t * BLOCK_N + cols, None, kv_end, bt_row, kv_head, stride_ks, stride_kh,
                               stride_kb, stride_vs, stride_vh, stride_vb, stride_btb,
                               PAGE_SIZE, False, PAGE_IDS_ASM, OFFSETS_32)
        acc, l_i, m_i = _softmax_pv(acc, l_i, m_i, s, s_scale, q_pv, v_cache_ptr, v_off, None, dims, dim_ok,
                                    stride_vd, False, DOT_PRECISION, SOFT_FP8, FP8_DOTS, PV_T, P_INT_ROUND)
        s = s_next
    return acc, l_i, m_i


@triton.jit
def paged_attention_kernel(
    q_ptr, k_cache_ptr, v_cache_ptr, out_ptr,
    block_table_ptr, seq_lens_ptr, query_start_loc_ptr,
    partial_out_ptr, partial_lse_ptr,
    sinks_ptr, k_scale_ptr, v_scale_ptr, k_scale_stride, v_scale_stride,
    scale, softcap, window, num_seqs,
    stride_qt, stride_qh, stride_qd,
    stride_kb, stride_ks, stride_kh, stride_kd,
    stride_vb, stride_vs, stride_vh, stride_vd,
    stride_ot, stride_oh, stride_od,
    stride_bts, stride_btb,
    stride_pos, stride_pot, stride_poh,
    stride_pls, stride_plt,
    HEAD_DIM: tl.constexpr, HEAD_DIM_PAD: tl.constexpr,
    GQA: tl.constexpr, BLOCK_Q: tl.constexpr, BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr, PAGE_SIZE: tl.constexpr,
    CAUSAL: tl.constexpr, USE_WINDOW: tl.constexpr, EDGE_N: tl.constexpr, USE_SOFTCAP: tl.constexpr,
    NUM_SPLITS: tl.constexpr, DOT_PRECISION: tl.constexpr,
    PAGE_IDS_ASM: tl.constexpr, OFFSETS_32: tl.constexpr, OVERLAP_QK: tl.constexpr,
    USE_SINKS: tl.constexpr, USE_K_SCALE: tl.constexpr, USE_V_SCALE: tl.constexpr,
    SOFT_FP8: tl.constexpr, UPCAST_DOTS: tl.constexpr, FP16_DOTS: tl.constexpr, FP8_DOTS: tl.constexpr,
    FP8_QK: tl.constexpr, QK_SPLIT: tl.constexpr, PV_T: tl.constexpr, P_INT_ROUND: tl.constexpr,
    HEAVY_FIRST: tl.constexpr, EXTEND_MIN_Q: tl.constexpr, EXTEND_CHUNKS: tl.constexpr,
):
    tile = tl.program_id(0)
    if HEAVY_FIRST:
        # A causal sequence's last query tiles see the most keys.  The GPU starts programs in
        # grid order, so these start first and the short ones fill the last wave's gaps.
        tile = tl.num_programs(0) - 1 - tile
    kv_head = tl.program_id(1)
    split = tl.program_id(2)

    seq = _find_sequence(query_start_loc_ptr, tile, num_seqs, BLOCK_Q)
    q_start = tl.load(query_start_loc_ptr + seq)
    q_len = tl.load(query_start_loc_ptr + seq + 1) - q_start
    local_tile = tile - (q_start // BLOCK_Q + seq)
    if local_tile * BLOCK_Q >= q_len:
        return
    seq_len = tl.load(seq_lens_ptr + seq)
    if EXTEND_MIN_Q:
        if _dense_serves(q_len, seq_len - q_len, window, EXTEND_MIN_Q, GQA, EXTEND_CHUNKS, USE_WINDOW):
            return  # kernels/extend_attention.py serves it from dense K/V
    first_pos = seq_len - q_len

    # Row r of the tile is query token r // GQA of this tile, query head
    # kv_head * GQA + r % GQA: the whole GQA group shares each K/V tile.
    rows = tl.arange(0, BLOCK_M)
    q_tok = local_tile * BLOCK_Q + rows // GQA
    head = kv_head * GQA + rows % GQA
    row_ok = (q_tok < q_len) & (rows < BLOCK_Q * GQA)
    q_pos = first_pos + q_tok
    dims = tl.arange(0, HEAD_DIM_PAD)
    dim_ok = dims < HEAD_DIM

    q_rows = (q_start + q_tok).to(tl.int64) * stride_qt + head * stride_qh
    q = tl.load(q_ptr + q_rows[:, None] + dims[None, :] * stride_qd,
                mask=row_ok[:, None] & dim_ok[None, :], other=0.0)
    if UPCAST_DOTS:
        q = q.to(tl.float32)
    if FP16_DOTS:
        # fp8 tiles convert to fp16 in one instruction per pair (bf16 takes a second step), and
        # fp16 holds every e4m3 value and P exactly; q is saturated into fp16's range.
        q = tl.minimum(tl.maximum(q.to(tl.float32), -65504.0), 65504.0).to(tl.float16)
    q_pv = q  # P V's dot dtype, unless FP8_DOTS
    q_lo = q  # the low part of q's two fp8 parts with QK_SPLIT, else unread
    if FP8_QK:
        # One scale for the program's rows: e4m3 keeps 3 mantissa bits at any magnitude of its
        # range, so rows of different size share it; it joins the softmax scale.
        q32 = q.to(tl.float32)
        q_amax = tl.max(tl.max(tl.abs(q32), 1), 0)
        fp8_max = 448.0  # e4m3fn; e4m3fnuz: 240
        if FP8_QK == 2:
            fp8_max = 240.0
        q_step = tl.where(q_amax > 0.0, q_amax / fp8_max, 1.0)
        if QK_SPLIT:
            # q as the sum of two fp8 parts, so that K still feeds the dots as it was read and q
            # keeps the precision of a 16-bit operand: with a power-of-two step q / step is exact,
            # its nearest e4m3 value holds the top 4 significant bits and the remainder (at most
            # half an e4m3 step, a multiple of the 16-bit step) the next 4, also exactly, down to
            # e4m3's subnormals (bf16 queries: exact within 2^-17 of the program's largest element).
            # Rounding up to a power of two in the bits: a carry from a nonzero mantissa.
            q_step = ((q_step.to(tl.int32, bitcast=True) + 0x007FFFFF) & 0x7F800000).to(tl.float32, bitcast=True)
            q32 = q32 / q_step
            q = q32.to(k_cache_ptr.dtype.element_ty)
            q_lo = (q32 - q.to(tl.float32)).to(k_cache_ptr.dtype.element_ty)
        else:
            q = (q32 / q_step).to(k_cache_ptr.dtype.element_ty)
        scale = scale * q_step
    if USE_K_SCALE:
        # Dequantized K is k * k_scale (stride 0: per tensor, 1: per KV head): fold it into the
        # softmax scale.  v_scale is applied to the finished rows.
        scale = scale * tl.load(k_scale_ptr + kv_head * k_scale_stride)

    # Key range of this tile: [kv_begin, kv_end).  Keys in [full_begin, full_end) are visible to
    # every row, so those tiles skip the mask entirely; only the tiles at the causal diagonal and
    # the sequence end run masked, and a window's lower edge [kv_begin, full_begin) (it moves by
    # one key per row, so it is at most BLOCK_Q - 1 keys wide) runs masked in EDGE_N-key tiles of
    # its own.  Key tile t starts at key tile_base + t * BLOCK_N.
    tile_first_pos = first_pos + local_tile * BLOCK_Q
    kv_end = seq_len
    full_end = seq_len
    if CAUSAL:
        kv_end = tl.minimum(seq_len, tile_first_pos + BLOCK_Q)
        full_end = tl.minimum(seq_len, tile_first_pos + 1)
    kv_begin = 0
    tile_base = 0
    n_edge = 0
    if USE_WINDOW:
        kv_begin = tl.maximum(0, tile_first_pos - window + 1)   # the first row's window
        tile_last_pos = tl.minimum(tile_first_pos + BLOCK_Q - 1, seq_len - 1)
        full_begin = tl.maximum(kv_begin, tile_last_pos - window + 1)  # ... the last row's
        # The BLOCK_N-key tiles start at the last row's window: a window that is a multiple of
        # BLOCK_N then ends in whole tiles, as a sequence of that many keys does.  Keys that fit in
        # one tile take one masked tile ending at kv_end instead (no edge tile beside it).
        one_tile = kv_end - kv_begin <= BLOCK_N
        tile_base = tl.where(one_tile, kv_end - BLOCK_N, full_begin)
        n_edge = tl.where(one_tile, 0, tl.cdiv(full_begin - kv_begin, EDGE_N))
    num_kv_tiles = tl.cdiv(kv_end - tile_base, BLOCK_N)
    num_full_tiles = tl.maximum(full_end - tile_base, 0) // BLOCK_N
    if USE_WINDOW:
        num_full_tiles = tl.where(one_tile, 0, num_full_tiles)
    tile_lo = 0
    tile_hi = num_kv_tiles
    if NUM_SPLITS > 1:
        # The edge runs in the last split, which has the fewest whole tiles, and takes the place of
        # one there: it waits on its own loads after the pipelined loop has drained, which costs
        # more than a pipelined tile, so a split with a full share and the edge would finish last.
        slots = num_kv_tiles
        if USE_WINDOW:
            slots += (n_edge > 0).to(tl.int32)
            n_edge = tl.where(split == NUM_SPLITS - 1, n_edge, 0)
        per_split = tl.cdiv(slots, NUM_SPLITS)
        tile_lo = split * per_split
        tile_hi = tl.minimum(tile_lo + per_split, num_kv_tiles)
    # This split's tiles: unmasked [tile_lo, full_hi), masked [full_hi, tile_hi); the last split
    # also the window's edge.
    full_hi = tl.maximum(tile_lo, tl.minimum(tile_hi, num_full_tiles))

    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    if USE_SINKS:
        # The sink is one more logit, e^{sink}, with no value: it seeds split 0's running max and
        # sum so that the merge of the splits counts it exactly once.
        sink = tl.load(sinks_ptr + head, mask=row_ok, other=float("-inf")).to(tl.float32) * LOG2E
        m_i = tl.where(split == 0, sink, m_i)
        l_i = tl.where(split == 0, 1.0, l_i)
    if PV_T:
        acc = tl.zeros([HEAD_DIM_PAD, BLOCK_M], tl.float32)
    else:
        acc = tl.zeros([BLOCK_M, HEAD_DIM_PAD], tl.float32)
    bt_row = block_table_ptr + seq.to(tl.int64) * stride_bts

    if OVERLAP_QK:
        acc, l_i, m_i = _attend_full_tiles_overlapped(
            acc, l_i, m_i, q, q_lo, q_pv, tile_lo, full_hi, tile_base, kv_begin, kv_end,
            k_cache_ptr, v_cache_ptr, bt_row, kv_head, scale, softcap,
            stride_ks, stride_kh, stride_kd, stride_kb,
            stride_vs, stride_vh, stride_vd, stride_vb, stride_btb,
            dims, dim_ok, BLOCK_N, PAGE_SIZE, USE_SOFTCAP, DOT_PRECISION, PAGE_IDS_ASM, OFFSETS_32, SOFT_FP8,
            FP8_DOTS, PV_T, P_INT_ROUND, QK_SPLIT)
    else:
        for t in range(tile_lo, full_hi):
            acc, l_i, m_i = _attend_tile(
                acc, l_i, m_i, q, q_lo, q_pv, t, tile_base, kv_begin, kv_end, q_pos, window,
                k_cache_ptr, v_cache_ptr, bt_row, kv_head, scale, softcap,
                stride_ks, stride_kh, stride_kd, stride_kb,
                stride_vs, stride_vh, stride_vd, stride_vb, stride_btb,
                dims, dim_ok, BLOCK_N, PAGE_SIZE, False, CAUSAL, USE_WINDOW, USE_SOFTCAP, DOT_PRECISION,
                PAGE_IDS_ASM, OFFSETS_32, SOFT_FP8, FP8_DOTS, PV_T, P_INT_ROUND, QK_SPLIT)
    # The masked tiles run last, so that the unmasked loop's pipeline starts at once (the online
    # softmax does not depend on the order of tiles): the diagonal's and the sequence end's ...
    for t in range(full_hi, tile_hi):
        acc, l_i, m_i = _attend_tile(
            acc, l_i, m_i, q, q_lo, q_pv, t, tile_base, kv_begin, kv_end, q_pos, window,
            k_cache_ptr, v_cache_ptr, bt_row, kv_head, scale, softcap,
            stride_ks, stride_kh, stride_kd, stride_kb,
            stride_vs, stride_vh, stride_vd, stride_vb, stride_btb,
            dims, dim_ok, BLOCK_N, PAGE_SIZE, True, CAUSAL, USE_WINDOW, USE_SOFTCAP, DOT_PRECISION,
            PAGE_IDS_ASM, OFFSETS_32, SOFT_FP8, FP8_DOTS, PV_T, P_INT_ROUND, QK_SPLIT)
    # ... and the window's lower edge, in EDGE_N-key tiles ending where the BLOCK_N-key tiles start.
    if USE_WINDOW:
        for e in range(0, n_edge):
            acc, l_i, m_i = _attend_tile(
                acc, l_i, m_i, q, q_lo, q_pv, e, tile_base - n_edge * EDGE_N, kv_begin, kv_end, q_pos, window,
                k_cache_ptr, v_cache_ptr, bt_row, kv_head, scale, softcap,
                stride_ks, stride_kh, stride_kd, stride_kb,
                stride_vs, stride_vh, stride_vd, stride_vb, stride_btb,
                dims, dim_ok, EDGE_N, PAGE_SIZE, True, CAUSAL, USE_WINDOW, USE_SOFTCAP, DOT_PRECISION,
                PAGE_IDS_ASM, OFFSETS_32, SOFT_FP8, FP8_DOTS, PV_T, P_INT_ROUND, QK_SPLIT)

    if PV_T:
        acc = tl.trans(acc)
    has_keys = l_i > 0.0
    acc = acc / tl.where(has_keys, l_i, 1.0)[:, None]
    if FP8_DOTS:
        acc = acc * (1.0 / P8_SCALE)
    if USE_V_SCALE:
        acc = acc * tl.load(v_scale_ptr + kv_head * v_scale_stride)
    store_mask = row_ok[:, None] & dim_ok[None, :]
    tok = (q_start + q_tok).to(tl.int64)
    if NUM_SPLITS == 1:
        o_ptrs = out_ptr + tok[:, None] * stride_ot + head[:, None] * stride_oh + dims[None, :] * stride_od
        tl.store(o_ptrs, acc.to(out_ptr.dtype.element_ty), mask=store_mask)
    else:
        lse = tl.where(has_keys, m_i + tl.math.log2(tl.where(has_keys, l_i, 1.0)), float("-inf"))
        po = (partial_out_ptr + split * stride_pos + tok[:, None] * stride_pot
              + head[:, None] * stride_poh + dims[None, :])
        tl.store(po, acc, mask=store_mask)
        pl = partial_lse_ptr + split * stride_pls + tok * stride_plt + head
        tl.store(pl, lse, mask=row_ok)


@triton.jit
def merge_splits_kernel(
    out_ptr, partial_out_ptr, partial_lse_ptr, query_start_loc_ptr, num_seqs,
    stride_ot, stride_oh, stride_od,
    stride_pos, stride_pot, stride_poh,
    stride_pls, stride_plt,
    HEAD_DIM: tl.constexpr, HEAD_DIM_PAD: tl.constexpr,
    NUM_SPLITS: tl.constexpr, SPLITS_PAD: tl.constexpr,
):
    tok = tl.program_id(0)
    head = tl.program_id(1)
    # Rows past the last sequence are padding: the first kernel never wrote them.
    if tok >= tl.load(query_start_loc_ptr + num_seqs):
        return
    splits = tl.arange(0, SPLITS_PAD)
    split_ok = splits < NUM_SPLITS
    dims = tl.arange(0, HEAD_DIM_PAD)
    dim_ok = dims < HEAD_DIM
    tok64 = tok.to(tl.int64)
    lse = tl.load(partial_lse_ptr + splits * stride_pls + tok64 * stride_plt + head,
                  mask=split_ok, other=float("-inf"))
    m = tl.max(lse, 0)
    m_safe = tl.where(m == float("-inf"), 0.0, m)
    w = tl.math.exp2(lse - m_safe)
    part = tl.load(partial_out_ptr + splits[:, None] * stride_pos + tok64 * stride_pot
                   + head * stride_poh + dims[None, :],
                   mask=split_ok[:, None] & dim_ok[None, :], other=0.0)
    total = tl.sum(w, 0)
    o = tl.sum(part * w[:, None], 0) / tl.where(total > 0.0, total, 1.0)
    tl.store(out_ptr + tok64 * stride_ot + head * stride_oh + dims * stride_od,
             o.to(out_ptr.dtype.element_ty), mask=dim_ok)
