"""Causal prefill of whole prompts whose keys are at hand in the step's dense K/V.

A prefill step's new keys and values are also a dense ``[tokens, kv_heads, head_dim]`` tensor: the
rows the host writes into the paged cache.  A prompt with nothing cached before it has all its keys
there, so reading them instead of gathering them page by page leaves the hot loop two dots, the
softmax and one load of fixed stride; on Hopper that load is one TMA copy per tile (USE_DESC:
host-made tensor descriptors of ``new_k`` / ``new_v``; DESC_QO: the query tile and every output tile
that lies inside its sequence move by TMA too).

One program: BLOCK_M consecutive query tokens of one sequence and one query head.  Unlike the
paged kernel it does not fold the GQA group into its rows: a tile of one head keeps the causal
diagonal at BLOCK_M / BLOCK_N masked tiles, and the group's programs run side by side (heads are the
grid's fast axis), so each K/V tile comes from HBM once and from L2 for the rest of the group.

Which sequences it serves: those of at least MIN_QUERY query tokens and no keys before them
(``paged_attention_kernel`` skips the same ones under its ``EXTEND_MIN_Q``), so a mixed batch of decodes,
short blocks and whole prompts runs each sequence in one kernel, without the host reading lengths. With CHUNKS
also chunks of at least MIN_QUERY tokens whose prefix holds at most GQA times as many keys that they see
(under a window its last ``window - 1``; ``EXTEND_CHUNKS`` there): those keys come as a dense copy that
``cached_prefix_kernel`` (kernels/kv_cache.py) made from the pages just before, at rows ``GQA * qsl[s]`` on of
``pre_k`` / ``pre_v``. (Gathering the prefix from the pages here instead, one program per query head, ran
chunked prefill at 0.6-0.7x the paged kernel's rate on the H200; a copy costs one read and write of the
prefix.)

Key order per program: a chunk's prefix (all visible, its last tile masked at the prefix's end; under a window
its tiles the tile's rows see, masked), the block's keys left of the tile's first query (all visible), then the tiles on the diagonal (masked). Rows of ``new_k``
/ ``new_v`` past a sequence's tokens (the next sequence's, or padding that may hold anything) only enter
masked tiles: their scores are masked and their values zeroed before they meet a visible row. Under a sliding
window (key ``j`` visible to query ``p`` iff ``p - j < window``, as in the paged kernel) the keys start at the
window's lower edge (masked tiles up to the last row's window); no key left of the first row's window is
loaded. Sinks seed the running max and denominator.

Over an fp8 cache the rows come as the values the cache stores for them before their scale
(``cached_rows_kernel`` in kernels/kv_cache.py, in q's dtype): K's scale joins the softmax's and V's
multiplies the output, so a prompt's answer is the one the paged kernel would read from the cache.
"""

import triton
import triton.language as tl

from dflash_rocm_plugin.kernels.paged_attention import _dense_serves, _exponent_shift, _find_sequence, _prefix_kept

LOG2E = tl.constexpr(1.4426950408889634)


@triton.jit
def _softmax_pv(acc, l_i, m_i, qk, v, scale, visible, MASKED: tl.constexpr, DOT_PRECISION: tl.constexpr):
    # Base-2 online softmax; the scale rides in the exponent's FMA.  A masked tile may hide every key
    # from a row (a window's edge, or a diagonal tile under a window): its max stays -inf and the
    # exponents shift by 0 (_exponent_shift), so it adds nothing.  Every stored row sees itself.
    if MASKED:
        qk = tl.where(visible, qk, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(qk, 1) * scale)
    m_exp = _exponent_shift(m_new, MASKED)
    p = tl.math.exp2(qk * scale - m_exp[:, None])
    alpha = tl.math.exp2(m_i - m_exp)
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = acc * alpha[:, None]
    acc = tl.dot(p.to(v.dtype), v, acc, input_precision=DOT_PRECISION)
    return acc, l_i, m_new


@triton.jit
def _block_tile(acc, l_i, m_i, q, n0, q_start, q_len, q_tok, new_k, new_v, stride_nkt, stride_nvt, kv_col,
                scale, window, dims, BLOCK_N: tl.constexpr, DIAGONAL: tl.constexpr,
                WINDOW_EDGE: tl.constexpr, USE_WINDOW: tl.constexpr,
                USE_DESC: tl.constexpr, UPCAST: tl.constexpr, DOT_PRECISION: tl.constexpr,
                PREFIX_END: tl.constexpr = False):
    # Keys n0 .. n0 + BLOCK_N - 1 of the block itself (rows q_start + n0 ... of new_k / new_v); key i of
    # the block is query token i.  Only a DIAGONAL tile can reach past the sequence's tokens; a WINDOW_EDGE
    # tile lies left of the block's first query and only the window hides some of its keys.  A chunk's
    # prefix comes through here too, as q_len keys ending just before the block's first: only a PREFIX_END
    # tile reaches past them, or under a window meets the window's edge.
    keys = n0 + tl.arange(0, BLOCK_N)
    key_ok = keys < q_len
    if USE_DESC:
        k = new_k.load([q_start + n0, kv_col]).T
        v = new_v.load([q_start + n0, kv_col])
        if DIAGONAL or PREFIX_END:
            v = tl.where(key_ok[:, None], v, 0.0)  # the next sequence's rows, or padding
    else:
        rows = (q_start + keys).to(tl.int64)
        k_ptrs = new_k + rows[None, :] * stride_nkt + kv_col + dims[:, None]
        v_ptrs = new_v + rows[:, None] * stride_nvt + kv_col + dims[None, :]
        if DIAGONAL or PREFIX_END:
            k = tl.load(k_ptrs, mask=key_ok[None, :], other=0.0)
            v = tl.load(v_ptrs, mask=key_ok[:, None], other=0.0)
        else:
            k = tl.load(k_ptrs)
            v = tl.load(v_ptrs)
    if UPCAST:
        k = k.to(tl.float32)
        v = v.to(tl.float32)
    qk = tl.dot(q, k, input_precision=DOT_PRECISION)
    if PREFIX_END:
        visible = key_ok[None, :]
        if USE_WINDOW:  # key n of the prefix is q_len - n keys before the block's first
            visible = visible & ((q_tok[:, None] + q_len - keys[None, :]) < window)
    else:
        visible = keys[None, :] <= q_tok[:, None]
        if USE_WINDOW:
            in_window = (q_tok[:, None] - keys[None, :]) < window
            visible = (visible & in_window) if DIAGONAL else in_window
    return _softmax_pv(acc, l_i, m_i, qk, v, scale, visible, DIAGONAL or WINDOW_EDGE or PREFIX_END, DOT_PRECISION)


@triton.jit
def extend_attention_kernel(
    q_ptr, q_desc, new_k, new_v, out_ptr, out_desc, seq_lens_ptr, query_start_loc_ptr, sinks_ptr,
    k_scale_ptr, v_scale_ptr, pre_k, pre_v,
    scale, window, num_seqs,
    stride_qt, stride_qh, stride_nkt, stride_nvt, stride_ot, stride_oh, k_scale_stride, v_scale_stride, stride_pt,
    HEAD_DIM: tl.constexpr, GQA: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    MIN_QUERY: tl.constexpr, CHUNKS: tl.constexpr, USE_WINDOW: tl.constexpr, USE_SINKS: tl.constexpr,
    USE_K_SCALE: tl.constexpr, USE_V_SCALE: tl.constexpr,
    USE_DESC: tl.constexpr, DESC_QO: tl.constexpr, UPCAST: tl.constexpr, DOT_PRECISION: tl.constexpr,
):
    head = tl.program_id(0)
    # The last tiles of a causal sequence see the most keys; the GPU starts programs in grid
    # order, so they start first and the short ones fill the last wave.
    tile = tl.num_programs(1) - 1 - tl.program_id(1)
    seq = _find_sequence(query_start_loc_ptr, tile, num_seqs, BLOCK_M)
    q_start = tl.load(query_start_loc_ptr + seq)
    q_len = tl.load(query_start_loc_ptr + seq + 1) - q_start
    local_tile = tile - (q_start // BLOCK_M + seq)
    if local_tile * BLOCK_M >= q_len:
        return
    prefix = tl.load(seq_lens_ptr + seq) - q_len
    if not _dense_serves(q_len, prefix, window, MIN_QUERY, GQA, CHUNKS, USE_WINDOW):
        return  # the paged kernel serves it
    kept = _prefix_kept(prefix, window, USE_WINDOW)  # its copy's rows
    kv_head = head // GQA
    kv_col = kv_head * HEAD_DIM

    q_tok = local_tile * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = q_tok < q_len
    dims = tl.arange(0, HEAD_DIM)
    q_rows = (q_start + q_tok).to(tl.int64)
    first_row = q_start + local_tile * BLOCK_M
    if DESC_QO:
        # Rows past the sequence (the next one's, or padding) come along; they are never stored.
        q = q_desc.load([first_row, head * HEAD_DIM])
    else:
        q = tl.load(q_ptr + q_rows[:, None] * stride_qt + head * stride_qh + dims[None, :],
                    mask=row_ok[:, None], other=0.0)
    if UPCAST:
        q = q.to(tl.float32)
    scale = scale * LOG2E
    if USE_K_SCALE:
        # A zero scale (every key 0, so every score 0) is held at the smallest normal float: the masked
        # scores meet the scale after -inf (_softmax_pv), and 0 * -inf would be NaN.
        k_scale = tl.load(k_scale_ptr + kv_head * k_scale_stride)
        scale = scale * tl.where(k_scale == 0.0, 1.1754943508222875e-38, k_scale)

    if USE_SINKS:
        # The sink is one more logit with no value: it seeds the running max and the denominator.
        m_i = tl.zeros([BLOCK_M], tl.float32) + tl.load(sinks_ptr + head).to(tl.float32) * LOG2E
        l_i = tl.full([BLOCK_M], 1.0, tl.float32)
    else:
        m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
        l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)

    diag = local_tile * BLOCK_M
    if CHUNKS:
        # The prefix's copy, its rows from GQA * q_start on.
        pre_row = GQA * q_start
        if USE_WINDOW:
            # The last window - 1 keys, each tile masked: from the first the tile's first row sees.
            for n0 in range(tl.maximum(diag + kept - window + 1, 0) // BLOCK_N * BLOCK_N, kept, BLOCK_N):
                acc, l_i, m_i = _block_tile(acc, l_i, m_i, q, n0, pre_row, kept, q_tok, pre_k, pre_v, stride_pt,
                                            stride_pt, kv_col, scale, window, dims, BLOCK_N, False, False,
                                            True, USE_DESC, UPCAST, DOT_PRECISION, True)
        else:
            # Every key visible to every row; the last tile masked where the prefix ends.
            pre_full = kept // BLOCK_N * BLOCK_N
            for n0 in range(0, pre_full, BLOCK_N):
                acc, l_i, m_i = _block_tile(acc, l_i, m_i, q, n0, pre_row, kept, q_tok, pre_k, pre_v, stride_pt,
                                            stride_pt, kv_col, scale, window, dims, BLOCK_N, False, False,
                                            False, USE_DESC, UPCAST, DOT_PRECISION)
            if pre_full < kept:
                acc, l_i, m_i = _block_tile(acc, l_i, m_i, q, pre_full, pre_row, kept, q_tok, pre_k, pre_v,
                                            stride_pt, stride_pt, kv_col, scale, window, dims, BLOCK_N, False,
                                            False, False, USE_DESC, UPCAST, DOT_PRECISION, True)

    full_lo = 0
    if USE_WINDOW:
        # Keys every row of the tile sees start at its last row's window; from its first row's window
        # up to there is the edge, masked.  Tiles stay BLOCK_N-aligned, so both ranges are whole tiles.
        full_lo = diag - (tl.maximum(diag - tl.maximum(diag + BLOCK_M - window, 0), 0) // BLOCK_N) * BLOCK_N
        for n0 in range((tl.maximum(diag - window + 1, 0) // BLOCK_N) * BLOCK_N, full_lo, BLOCK_N):
            acc, l_i, m_i = _block_tile(acc, l_i, m_i, q, n0, q_start, q_len, q_tok, new_k, new_v, stride_nkt,
                                        stride_nvt, kv_col, scale, window, dims, BLOCK_N, False, True,
                                        USE_WINDOW, USE_DESC, UPCAST, DOT_PRECISION)
    for n0 in range(full_lo, diag, BLOCK_N):
        acc, l_i, m_i = _block_tile(acc, l_i, m_i, q, n0, q_start, q_len, q_tok, new_k, new_v, stride_nkt,
                                    stride_nvt, kv_col, scale, window, dims, BLOCK_N, False, False,
                                    USE_WINDOW, USE_DESC, UPCAST, DOT_PRECISION)
    for n0 in range(diag, tl.minimum(diag + BLOCK_M, q_len), BLOCK_N):
        acc, l_i, m_i = _block_tile(acc, l_i, m_i, q, n0, q_start, q_len, q_tok, new_k, new_v, stride_nkt,
                                    stride_nvt, kv_col, scale, window, dims, BLOCK_N, True, False,
                                    USE_WINDOW, USE_DESC, UPCAST, DOT_PRECISION)

    o = acc / l_i[:, None]
    if USE_V_SCALE:
        o = o * tl.load(v_scale_ptr + kv_head * v_scale_stride)
    o = o.to(out_ptr.dtype.element_ty)
    o_ptrs = out_ptr + q_rows[:, None] * stride_ot + head * stride_oh + dims[None, :]
    if DESC_QO:
        # A TMA store writes the whole tile: only a tile of the sequence's own rows takes it.
        if local_tile * BLOCK_M + BLOCK_M <= q_len:
            out_desc.store([first_row, head * HEAD_DIM], o)
        else:
            tl.store(o_ptrs, o, mask=row_ok[:, None])
    else:
        tl.store(o_ptrs, o, mask=row_ok[:, None])
