"""Tile shapes, warps and KV-split counts, chosen from tensor shapes only.

Nothing here reads device memory, so the same shapes always give the same
launch: a CUDA/HIP graph captured once replays with identical kernels.

Two floors frame every choice (H200 numbers, bf16, Qwen3-8B heads 32q/8kv,
d=128, 16 queries): a KV byte feeds 16 x G = 64 query rows, i.e. ~64 FLOP/B,
far under the ~206 FLOP/B ridge, so the kernel is bound by unique KV bytes
over HBM bandwidth.  The tiles therefore aim at (a) reading every KV byte
once (all query rows of a KV head in one tile) and (b) enough programs in
flight to saturate memory (split-KV when batch x KV heads is small).
"""

from __future__ import annotations

import contextlib
import dataclasses

from dflash_rocm_plugin.ops import _runtime, support, tuned, workspace

# Query rows per sequence (a DFlash block) up to which a call may split its keys although its rows
# span several query tiles: 512-wide heads take 16-row tiles (2 queries of a GQA-8 group), GQA-16
# groups 128-row tiles of 8 queries.  Unsplit, a batch-1 q16 Gemma-4 global layer runs 16 programs.
SPLIT_QUERY_ROWS = 16
# Minimum keys per split (two 64-key tiles).  H200, 1 x 4K: 32 splits of 128 keys
# still beat 16 splits of 256 (0.96 vs 0.85 TB/s), so the floor is low.
MIN_KEYS_PER_SPLIT = 128
MAX_SPLITS = workspace.MAX_SPLITS
# The split count every measured rule below was chosen under; more (up to MAX_SPLITS) only where this
# many would leave three quarters of the resident program slots idle: a batch-1 decode of a 2-KV-head
# layer (Qwen3.5 / Qwen3-Next, Gemma-4 global), two programs per split.  H200, decode q1 at 64 vs 32
# splits, TB/s: Qwen3-Next 1 x 32K 1.99 vs 1.56, 1 x 16K 1.56 vs 1.31; Gemma-4 global 1 x 32K 2.35 vs
# 1.66, 1 x 16K 1.88 vs 1.46.  A q16 block of Qwen3-Next heads (four programs) loses with 64: 1 x 32K
# 1.21 vs 1.40, 1 x 8K 0.64 vs 0.84.
WAVE_SPLITS = 32
# Resident attention programs per multiprocessor for the default tile.  NVIDIA
# (BLOCK_M 64, 4 warps, 255 registers/thread): the register file holds 2.  A 128-row tile
# (8 warps, ~130 KB shared memory) leaves room for 1.
PROGRAMS_PER_SM = 2
# Unsplit programs with at least this many key tiles pipeline their page ids 5 deep even at
# page 16 (H200 v4: 256 tiles +2 %, 128 tiles +0.5 %, 16-64 tiles -0.5-2 %).  Below page 16 every
# unsplit loop does (16-256 tiles: +16-30 % at page 1), and split-KV loops never do (-1.5-4 %).
DEEP_PIPELINE_MIN_TILES = 128
# Shared memory a block may use (bytes) from which the measured NVIDIA stage counts fit:
# 3 K/V buffers of 64 x 128 bf16 plus Q, 112-116 KB per program, 2 programs on an H100/H200.
_DEEP_STAGES_SMEM = 200 * 1024


@dataclasses.dataclass(frozen=True)
class AttentionLaunch:
    block_q: int
    block_m: int
    block_n: int
    head_dim_pad: int
    num_splits: int
    num_warps: int
    num_stages: int
    # Page ids read by inline PTX so that 3 stages pipeline the K/V gather two tiles deep
    # (kernels/paged_attention.py); NVIDIA only, for short key loops.
    page_ids_asm: bool = False
    # Q K^T of the next key tile issued before this tile's softmax (kernels/paged_attention.py),
    # for tiles whose dots and exponentials, not memory, bound the loop.
    overlap_qk: bool = False
    # 32-bit cache offsets; applied only where both caches fit (checked per call from their
    # sizes and strides in ops/attention.py).
    offsets_32: bool = True
    # Warps per split-merge program (one query row x head, SPLITS x HEAD_DIM floats).  H200:
    # 1 warp makes 8 x 4K 2.47 -> 2.94 TB/s (4 warps: 4 096 near-empty 128-thread programs).
    merge_warps: int = 1
    # fp8 caches: which dots run as fp8 tensor-core dots, "none", "qk_split" (q as two fp8 parts), "qk"
    # (q joins K's format), "pv" (P joins V's), "qk_pv" (both) or "qk_pv_split" (q and P each as two fp8
    # parts) (kernels/paged_attention.py, FP8_QK, QK_SPLIT, FP8_DOTS).  ``fp8_dots_rule`` chooses
    # "qk_split", or "qk" where ``support.fp8_qk_policy`` names the call, or what a tuned entry chose
    # ("qk_pv_split" among them on gfx94x); the others are forced only: their speed and accuracy cost are
    # in benchmarks/NOTES.md.
    fp8_dots: str = "none"
    # AMD: the MFMA instruction's M/N size (Triton's ``matrix_instr_nonkdim``; 0: Triton's choice,
    # 32x32 for these dots).  16 where a warp's share of the tile's rows is under 32 (``choose``).
    mfma_nonkdim: int = 0
    # P V computed transposed (O^T = V^T P^T; kernels/paged_attention.py, PV_T): V then enters the
    # dot from registers, as Hopper's fp8 dots need for V (see the kernel).  Forced only.
    pv_transposed: bool = False
    # Query tiles run in reverse grid order (kernels/paged_attention.py, HEAVY_FIRST), so that the
    # tiles of a causal sequence that see the most keys start first.  Forced only: on the H200 it
    # moved prefill by -6 to +5 % with no rule from shapes that keeps only the gains (NOTES.md);
    # ci/rocm_validate.sh times it on AMD.
    heavy_first: bool = False


# The products each ``fp8_dots`` mode runs as fp8 dots: (Q K^T, P V).
FP8_DOT_PRODUCTS = {"none": (False, False), "qk": (True, False), "pv": (False, True), "qk_pv": (True, True),
                    "qk_split": (True, False), "qk_pv_split": (True, True)}
# Modes whose Q K^T takes q as the sum of two fp8 parts (kernels/paged_attention.py, QK_SPLIT): K's
# tiles unconverted as with "qk", q kept to a 16-bit operand's precision.
FP8_QK_SPLIT_MODES = frozenset({"qk_split", "qk_pv_split"})
# Modes whose P V takes P as the sum of two fp8 parts (the kernel's FP8_DOTS = P_SPLIT_DOTS): V's tiles
# unconverted as with "pv", P kept to a bf16 operand's precision.
FP8_PV_SPLIT_MODES = support.P_SPLIT_FP8_DOTS
# Modes that round a 16-bit operand (q, or P) to e4m3's 3 mantissa bits: their answers are further from
# the reference (benchmarks/NOTES.md, "v12 -> v13").
FP8_ROUNDING_MODES = frozenset({"qk", "pv", "qk_pv"})
FP8_DOTS_MODES = tuple(FP8_DOT_PRODUCTS)

# Which calls over an fp8 cache run Q K^T as fp8 dots (P V keeps its fp16 dot over converted V): those in
# tiles of at least FP8_QK_MIN_ROWS rows, over a cache in the GPU's own fp8 format (the tensor cores take
# no other; the interpreter decodes every format from its bytes), under 16-bit queries.  Either way K's
# tiles feed the tensor cores as they were read instead of converted (on Hopper through shared memory
# and back, on CDNA by VALU work that bounds its loop).  Tiles under 64 rows lose (too short for Hopper's
# wgmma): a q8 window draft of Qwen3-8B heads (32 rows) 1.87 -> 1.78 TB/s, a q1 decode 5-9 % slower.
#
# "qk_split" (the default): q is the sum of two fp8 parts, exact for bf16 queries, and Q K^T two fp8 dots
# per K tile, the tensor-core time of one fp16 dot.  The default's error (1.5-1.7e-3 against the float64
# reference of the dequantized cache, as with fp16 dots).  H100, e4m3fn, TB/s of fp8 bytes, against fp16
# dots: q16 Qwen3-8B heads 32 x 16K 2.06 -> 2.69 (draft) and 2.03 -> 2.66 (verify), 8 x 4K and 1 x 32K
# +2-4 %; Qwen3-32B heads +15-22 %; chunked prefill over an fp8 prefix +7-19 %.  CDNA (compiled, untimed):
# the unmasked loop's VALU -26 to -31 % on gfx942 and gfx950, as many as "qk" leaves.
#
# "qk" where ``support.fp8_qk_policy`` names the call: q joins K's format under one scale per program, one
# fp8 dot.  2-7 % faster than "qk_split" on the H100 with the same page ids (H200: 2.08 -> 2.93 draft,
# 2.10 -> 3.03 verify against fp16 dots), at a relative error of 2.0e-2 (q rounded to 3 mantissa bits, as
# each cached K already is).
# In a draft that error can only lower acceptance, never change the target's output, but it does: the
# demo's distilled pair with the draft's q so rounded accepts 0.8-1.8 % fewer tokens, about 1 % of its
# drafts flipped, a loss that grows with tau (benchmarks/draft_q_rounding_tau.py).  So it is opt-in:
# "draft" the non-causal calls, "all" the target's causal calls too, "off" (the default) none.
FP8_QK_MIN_ROWS = 64


def fp8_dots_allowed(*, native_fp8: bool, dtype, causal: bool | None, pv_split: bool = False) -> tuple[str, ...]:
    """The ``fp8_dots`` values a call may run: ("none",) unless the cache is in the GPU's own fp8 format
    (``native_fp8``, on a GPU with fp8 dots) under 16-bit queries; then also "qk_split", "qk_pv_split" where
    the GPU splits P too (``pv_split``: ``support.splits_p_for_fp8_dots``), and "qk" where
    ``support.fp8_qk_policy`` names calls of this causality.  A fact about the GPU, not about what runs
    here: the interpreter takes none of them (``fp8_dots_rule``, ``plan.fp8_dots_choices``)."""
    if not native_fp8 or dtype not in support.FP8_DOT_QUERY_DTYPES:
        return ("none",)
    allowed = ("none", "qk_split") + (("qk_pv_split",) if pv_split else ())
    if causal is not None and support.fp8_qk_covers(causal):
        allowed += ("qk",)
    return allowed


def fp8_dots_rule(*, native_fp8: bool, dtype, causal: bool | None, block_m: int, pv_split: bool = False,
                  tuned: str | None = None) -> str:
    """``fp8_dots`` for a call: among ``fp8_dots_allowed``, what a tuned entry chose for its bucket, else in
    tiles of at least FP8_QK_MIN_ROWS rows "qk" where allowed, "qk_split" otherwise; else "none".
    "qk_pv_split" only where a tuned entry chose it (``dflash-rocm tune`` checks each candidate against the
    reference first): its kernel path has run on no AMD GPU yet, and on Hopper (Triton 3.6) it computes
    non-finite rows (benchmarks/NOTES.md, "v17 -> v18")."""
    if _runtime.interpreting():
        return "none"
    allowed = fp8_dots_allowed(native_fp8=native_fp8, dtype=dtype, causal=causal, pv_split=pv_split)
    if tuned in allowed:
        return tuned
    if len(allowed) == 1 or block_m < FP8_QK_MIN_ROWS:
        return "none"
    return "qk" if "qk" in allowed else "qk_split"


def window_edge_keys(block_q: int, block_n: int, fp8_dots: bool) -> int:
    """EDGE_N: keys per tile of a window's lower edge, which spans at most ``block_q - 1`` keys.

    A power of two, the narrowest a dot takes (16 keys; 32 for fp8 dot operands) or wider up to ``block_n``.
    """
    width = 32 if fp8_dots else 16
    while width < block_q - 1 and width < block_n:
        width *= 2
    return width


# Field overrides applied by ``choose`` (benchmark sweeps only; see ``forced``).
_forced: dict = {}


@contextlib.contextmanager
def forced(**fields):
    """Within the block, every launch uses these AttentionLaunch fields (tuning sweeps)."""
    with forcing(_forced, AttentionLaunch, "launch", fields, check=_check_fp8_dots):
        yield


def _check_fp8_dots(fields: dict) -> None:
    if fields.get("fp8_dots", "none") not in FP8_DOTS_MODES:
        raise ValueError(f"fp8_dots={fields['fp8_dots']!r}: expected one of {FP8_DOTS_MODES}")


@contextlib.contextmanager
def forcing(store: dict, launch_cls, what: str, fields: dict, check=None):
    """``store`` holds ``fields`` (names of ``launch_cls``, then ``check``ed) within the block, as it held
    before after it."""
    unknown = set(fields) - {f.name for f in dataclasses.fields(launch_cls)}
    if unknown:
        raise ValueError(f"unknown {what} fields {sorted(unknown)}")
    if check is not None:
        check(fields)
    saved = dict(store)
    store.update(fields)
    try:
        yield
    finally:
        store.clear()
        store.update(saved)


def forced_fields() -> tuple:
    """The fields ``forced`` sets now, as a key."""
    return tuple(_forced.items()) if _forced else ()


def _arch_defaults(arch: str, head_dim_pad: int, block_m: int, smem: int) -> tuple[int, int, int]:
    """(BLOCK_N, num_warps, num_stages) for one architecture family."""
    if arch.startswith("gfx"):
        # CDNA3 gfx942 (MI300X) / CDNA4 gfx950 (MI355X): UNMEASURED.  Compiled offline
        # (Triton 3.9, tests/core/test_offline_compile.py; NOTES.md "AMD, compiled offline"):
        # the 64-row DFlash tile takes 253-262 VGPRs + AGPRs per lane on gfx942 at 1 stage,
        # with 16 KB of LDS; 2 stages would fit (40 KB of the 64 KB) but the stream pipeliner
        # then holds the next tile in registers.  Registers, not LDS, bound occupancy (1-2
        # waves per SIMD), so gfx942 keeps 1 stage, as AMD advises for loops with two dots.
        # gfx950 (160 KB LDS) at 2 stages: 217-223 registers, 74 KB.  BLOCK_N 64 keeps the
        # MFMA 16x16 / 32x32 shapes full.  ci/rocm_validate.sh sweeps stages, BLOCK_N 32 and
        # 8 warps on the real GPUs.
        # Head dims above 256 (Gemma-4 global layers, 512): 16-key tiles keep K and V at 16 KB
        # each, inside gfx942's 64 KB of LDS.
        block_n = 64 if head_dim_pad <= 128 else (32 if head_dim_pad <= 256 else 16)
        return block_n, 4, 2 if arch.startswith("gfx95") else 1
    if arch == "cpu":
        return (64 if head_dim_pad <= 128 else 32), 4, 1
    # NVIDIA, measured on H200 (benchmarks/NOTES.md, sweeps v1 and v2): at 32 x 16K
    # BLOCK_N 64 / 4 warps / 3 stages streams 4.28 TB/s with inline page ids
    # (3 K/V buffers, 112 KB shared memory: still 2 programs per SM); 2 stages
    # 3.93, BLOCK_N 32 3.6-4.1; in v1 BLOCK_N 128 lost 20-30 %, 8 warps 20-50 %.
    # ``choose`` deepens long loops to 5 stages.
    if head_dim_pad <= 128:
        return 64, (8 if block_m >= 128 else 4), 3
    if head_dim_pad <= 256:
        # 256-wide heads (Qwen3-Next / Qwen3.5 full attention 16q/2kv, Gemma-4 sliding 16q/8kv),
        # H200, TB/s (prefill TFLOP/s), 64-key tiles over 4 warps against 32-key tiles over 8:
        # q16 verify 16/2 32 x 16K 1.92 vs 1.02, 8 x 4K 1.21 vs 0.81, 1 x 32K 1.39 vs 0.88; Gemma-4
        # sliding q16 draft (window 1024) 3.55 vs 2.41; decode 4.09 vs 3.36 (64 x 8K) and 4.47 vs
        # 3.50; prefill 1 x 4K 296 vs 149 (benchmarks/NOTES.md, "v7 -> v8").  Two 32 KB K/V stages and
        # the Q tile need 160 KB of shared memory; smaller parts keep 32-key tiles.
        return (64, 8 if block_m >= 128 else 4, 2) if smem >= _DEEP_STAGES_SMEM else (32, 8, 2)
    return 32, 4, 2  # 512: two 32 KB K/V stages; the tile's rows and warps in ``_wide_head_rows``.


def choose(*, num_tokens: int, num_seqs: int, num_kv_heads: int, group: int, head_dim: int,
           kv_capacity: int, max_query_len: int | None, num_splits: int | None,
           device_index: int | None, page_size: int | None = None, window: int | None = None,
           dtype=None, kv_cache_dtype=None, causal: bool | None = None) -> AttentionLaunch:
    """The launch for these shapes; ``page_size`` None (unknown) is treated as 16 or more.

    ``window`` (a sliding window) bounds the keys one tile reads, whatever the capacity: the
    launch is that of a sequence of that many keys (H200, DFlash2 q8 at 32 x 16K with window
    2048: the 16K capacity's 5-stage pipeline lost 14 % against the 2K-key launch).

    Given ``dtype`` and ``causal`` (every call passes them), a tuned entry for the shape's bucket
    (``ops/tuned.py``) replaces the rules below; ``kv_cache_dtype`` None means ``dtype``.
    """
    head_dim_pad = max(16, _runtime.next_power_of_2(head_dim))
    # Query rows per tile: 64, or 128 when the group is large and the head is
    # small enough for the accumulator to stay in registers; 16 for heads above 256, whose
    # [rows, 512] fp32 accumulator would otherwise not fit in registers, unless the GPU has room
    # for a taller tile (``_wide_head_rows``).
    rows = 16 if head_dim_pad > 256 else (128 if (group >= 8 and head_dim_pad <= 128) else 64)
    arch = _runtime.gpu_arch(device_index)
    smem = _runtime.shared_memory_per_block(device_index)
    sms = _runtime.multiprocessor_count(device_index)
    wide_head_rows = _wide_head_rows(arch, head_dim_pad, smem)
    rows = wide_head_rows or _hopper_256_group_rows(arch, head_dim_pad, group, num_tokens, num_seqs, num_kv_heads,
                                                    smem, sms) or rows
    # Prefill on Hopper: long query blocks are compute-bound, and taller tiles reuse each K/V tile
    # for more rows.  H200, Qwen3-8B heads, TFLOP/s against 64-row tiles: 256 rows (8 warps,
    # 3 stages) 1 x 8K 410 vs 360, 1 x 32K 459 vs 376; 128 rows 4 x 4K 387 vs 364 (256: 370).
    # Decided by the mean query length, so the decodes of a mixed step are not put in tall tiles
    # by one long chunk beside them.
    # On AMD, 128 rows from the same 8192 (``amd_prefill_warps``).
    prefill_rows = 0
    if arch.startswith(("sm_", "gfx")) and head_dim_pad <= 128 and num_seqs > 0:
        mean_rows = min(num_tokens // num_seqs, max_query_len or num_tokens) * group
        prefill_rows = 128 if mean_rows >= 8192 else 0
        if arch.startswith("sm_") and mean_rows >= 32768:
            prefill_rows = 256
        rows = max(rows, prefill_rows)
    block_q, block_m = _tile_rows(max(1, rows // group), group, max_query_len)
    if window is not None:
        kv_capacity = min(kv_capacity, window + block_q - 1)
    block_n, num_warps, num_stages = _arch_defaults(arch, head_dim_pad, block_m, smem)
    wide_head_tile = bool(wide_head_rows) and block_m >= 32  # a decode's 16-row tile stays as it was
    if wide_head_tile:
        num_warps = 8
    if prefill_rows and arch.startswith("gfx"):
        num_warps = amd_prefill_warps(arch)
    if (arch.startswith("sm_") and block_q == 1 and block_m <= 16 and head_dim_pad <= 128
            and (page_size is None or page_size >= 16)
            and smem >= _DEEP_STAGES_SMEM):
        # Decode (one query per sequence): 128-key tiles, two deep.  H200, Qwen3-8B heads, page 16,
        # TB/s against 64-key tiles at 3 stages: 16 x 16K 4.28 vs 4.16, 1 x 32K 3.32 vs 3.15,
        # 256 x 2K 4.21 vs 4.28; 64 x 8K 4.28, its tuned entry's launch (NOTES.md, "v6 -> v7").
        block_n, num_stages = 128, 2

    explicit_splits = num_splits is not None
    short_queries = may_split(num_tokens, num_seqs, block_q)
    if num_splits is None:
        num_splits = 1
        if short_queries:
            # Fill exactly one wave of resident programs, never more: on H200
            # every measured optimum had programs x splits <= 2 x 132 (8 x 4K:
            # 4 splits 2.25 TB/s, 8 splits 1.97; 16 x 4K: 2 splits 3.10, 4 splits
            # 2.38), because a second, partial wave costs a whole tile time.  (With the v2
            # kernel and a 4-warp merge 8 x 4K peaked at 2 splits, 2.63 vs 2.43 TB/s; the
            # 1-warp merge of v3 lifts the 4 splits chosen here to 2.94.  NOTES.md.)
            # 128-row tiles on NVIDIA, H200 Qwen3-32B heads: 8 x 4K 2 splits 2.51 TB/s (4: 2.18),
            # 1 x 32K 16 splits 2.68 (32: 2.28), 4 x 8K 4 splits 2.52 (8: 2.17); the one miss,
            # 16 x 4K, runs 1 split at 2.41 where 2 reach 2.54.
            programs = max(1, num_seqs * num_kv_heads * query_tiles(num_tokens, num_seqs, block_q))
            # One program per multiprocessor: 128-row tiles on NVIDIA (shared memory), the wide-head
            # tiles of 8 warps (NVIDIA: 192 KB of shared memory; AMD: registers, gfx942's also all
            # 64 KB of LDS).
            tall = (arch.startswith("sm_") and block_m >= 128) or wide_head_tile
            per_sm = 1 if tall else PROGRAMS_PER_SM
            slots = per_sm * sms
            by_length = max(1, kv_capacity // MIN_KEYS_PER_SPLIT)
            cap = MAX_SPLITS if programs * WAVE_SPLITS * 4 <= slots else WAVE_SPLITS
            num_splits = max(1, min(slots // programs, by_length, cap))
    page_ids_asm = overlap_qk = False
    if takes_inline_ptx(arch) and not _runtime.interpreting():
        page_ids_asm = True
        tiles = -(-kv_capacity // (num_splits * block_n))
        if smem < _DEEP_STAGES_SMEM:
            # Consumer and older NVIDIA parts (~100-164 KB): two K/V buffers fit.  Unmeasured.
            num_stages = min(num_stages, 2)
        elif num_stages == 3 and num_splits == 1 and (
                (page_size is not None and page_size < 16) or tiles >= DEEP_PIPELINE_MIN_TILES):
            # Page ids and the K/V gather, both pipelined (kernels/paged_attention.py).  H200 v4,
            # TB/s, 5 stages vs inline ids at 3: page 1 32 x 16K 4.23 vs 3.63-3.68 (64-bit
            # offsets), 64 x 1K 3.09 vs 2.66 (32-bit); page 16 32 x 16K 4.33 vs 4.25, 64 x 1K 3.29 vs 3.37; split-KV
            # 8 x 4K 2.74-2.79 vs 2.84-2.89, 16 x 8K page 1 3.79 vs 3.86 (NOTES.md, v3 -> v4).
            num_stages = 5
            page_ids_asm = False
            # 128-row tiles (GQA >= 8, 8 warps, one program per SM) are bound by each tile's
            # dot -> softmax -> dot chain, not by memory.  H200 v4, Qwen3-32B heads, page 1:
            # 2.59-2.66 -> 3.08-3.22 TB/s at large batch, 1.90 -> 2.17 at 64 x 1K; at page 16 the
            # same change lost 8-18 % (3.19-3.31 -> 2.62-2.93) and on 64-row tiles 5-10 %.
            overlap_qk = block_m >= 128 and page_size is not None and page_size < 16
    if prefill_rows == 256:
        num_stages = min(num_stages, 3)  # three 64-key K/V stages beside the 256-row Q tile
    launch = AttentionLaunch(block_q, block_m, block_n, head_dim_pad, num_splits, num_warps, num_stages,
                             page_ids_asm=page_ids_asm, overlap_qk=overlap_qk)
    tuned_fp8_dots, tuned_entry = None, False
    if dtype is not None and causal is not None:
        entry = tuned.lookup(arch, heads=(group * num_kv_heads, num_kv_heads, head_dim), dtype=dtype,
                             kv_cache_dtype=kv_cache_dtype, causal=causal, num_tokens=num_tokens,
                             num_seqs=num_seqs, max_query_len=max_query_len, kv_keys=kv_capacity,
                             page_size=page_size)
        if entry is not None and entry.launch is not None:
            tuned_fp8_dots, tuned_entry = entry.launch.get("fp8_dots"), True
            launch = _tuned_launch(launch, entry.launch, arch, splits_free=short_queries and not explicit_splits,
                                   rows_free=not short_queries, group=group, max_query_len=max_query_len)
    if _forced:
        launch = dataclasses.replace(launch, **_forced)
        if "block_q" in _forced and "block_m" not in _forced:
            launch = _with_block_q(launch, _forced["block_q"], group, None)
    native_fp8 = support.is_native_fp8(kv_cache_dtype, arch)
    if "fp8_dots" not in _forced:
        rule = fp8_dots_rule(native_fp8=support.multiplies_fp8(kv_cache_dtype, arch), dtype=dtype, causal=causal,
                             block_m=launch.block_m, pv_split=support.splits_p_for_fp8_dots(arch),
                             tuned=tuned_fp8_dots)
        launch = dataclasses.replace(launch, fp8_dots=rule)
    if (launch.fp8_dots == "qk_split" and launch.num_stages == 5 and not launch.page_ids_asm and launch.block_m < 128
            and not tuned_entry and "page_ids_asm" not in _forced):
        # The deep pipeline's page ids (5 stages, ``tl.load`` ids) over an fp8 cache whose K feeds the
        # dots unconverted: inline ids leave the K/V gather as the only pipelined load and win there.
        # H100, q16 Qwen3-8B heads, page 16, 32 x 16K: 2.55 -> 2.73 TB/s draft, 2.52 -> 2.72 verify (and
        # ``dflash-rocm tune`` chose the same, 398.8 -> 377.4 us); Qwen3-32B's 128-row tiles lost 12 %.
        launch = dataclasses.replace(launch, page_ids_asm=True)
    if "merge_warps" not in _forced:
        launch = dataclasses.replace(launch, merge_warps=_merge_warps(head_dim_pad, launch.num_splits))
    if "mfma_nonkdim" not in _forced:
        # Only tiles converted from fp8 hold registers the 16x16 layout cannot spare.
        converted = native_fp8 and launch.fp8_dots not in FP8_PV_SPLIT_MODES
        launch = dataclasses.replace(launch, mfma_nonkdim=_mfma_nonkdim(arch, launch.block_m, launch.num_warps,
                                                                        converted))
    return launch


def _merge_warps(head_dim_pad: int, num_splits: int) -> int:
    """Warps of the split merge, whose program holds one (token, head)'s partial rows: one warp while
    they are at most 8192 floats (256 per lane), four above, and always for heads above 256."""
    rows = max(2, _runtime.next_power_of_2(num_splits))
    return 4 if head_dim_pad > 256 or rows * head_dim_pad > 8192 else 1


def _wide_head_rows(arch: str, head_dim_pad: int, smem: int) -> int:
    """Heads above 256 (Gemma-4 global layers, 512): query rows per tile, over 8 warps; 0 elsewhere
    (16-row tiles).  16 rows hold two queries of a GQA-8 group, so each K/V tile is read by eight
    programs of a q16 block.

    NVIDIA, measured on the H200 (q16 verify, 16 q / 2 kv heads, page 16; benchmarks/NOTES.md
    "v7 -> v8"): 64 rows over 8 warps with two 32-key stages (192 KB of shared memory, one
    program per SM) stream 1.31 TB/s at 32 x 16K against 0.87 for 16 rows over 4 warps (32 rows
    over 4 warps 1.15, over 8 warps 0.64; 128 rows do not fit), and 1.08 against 0.79 at 1 x 32K
    with 32 splits.  Parts with less shared memory keep 16 rows (unmeasured).
    AMD, compiled offline with 16-key tiles (registers per lane, LDS): gfx942 64 rows 202 / 64 KB,
    no spills (16 rows over 4 warps: 184 / 16 KB); gfx950 32 rows at 2 stages 196 / 68 KB (64 rows:
    298, more than two waves per SIMD allow).  Unmeasured on the GPUs (ci/rocm_validate.sh times
    them)."""
    if head_dim_pad <= 256:
        return 0
    if arch.startswith("gfx"):
        return 64 if arch.startswith("gfx94") else 32
    if arch.startswith("sm_") and smem >= _DEEP_STAGES_SMEM:
        return 64
    return 0


def amd_prefill_warps(arch: str) -> int:
    """Warps of AMD's 128-row prefill tile (heads up to 128 wide, 64-key tiles), compiled offline
    (Triton 3.9, bf16, Qwen3-8B heads, 1 x 8K, page 16; instructions of the unmasked key loop per
    16 query rows of a wave, VALU and LDS operations among them; registers per lane):

    * gfx950, 4 warps (32x32 MFMAs, 2 stages): 170 / 94 / 24 against the 64-row tile's 257 / 122 /
      48, at 251 registers (two waves per SIMD, as the 64-row tile's 159) and 66 KB of LDS (two
      blocks per CU).  The shape of AMD's own Triton flash-attention forward (128 x 64, 4 warps).
    * gfx942, 8 warps (16x16 MFMAs, 1 stage): 301 / 137 / 46 against 336 / 162 / 48, at 198
      registers (189); 4 warps there take 274 (one wave per SIMD; held to two, 9 spill).

    Either way each K/V tile is fetched once for 128 rows instead of 64.  Unmeasured on the GPUs
    (benchmarks/NOTES.md, "v13 -> v14"; ``ci/rocm_validate.sh`` times the tuner's prefill rows)."""
    return 8 if arch.startswith("gfx94") else 4


def _hopper_256_group_rows(arch: str, head_dim_pad: int, group: int, num_tokens: int, num_seqs: int,
                           num_kv_heads: int, smem: int, sms: int) -> int:
    """128 rows (8 warps, 64-key tiles, one program per SM) for DFlash blocks of 256-wide heads in
    GQA groups of 8 or more on Hopper, where the call still fills the GPU; 0 elsewhere.  A q16 block
    of Qwen3-Next / Qwen3.5 heads (16 q / 2 kv) then reads each K/V tile once instead of twice.
    H200, q16 verify, TB/s against 64-row tiles of 4 warps: 32 x 16K 2.55 vs 1.92, 8 x 4K 1.60 vs
    1.21; at 1 x 32K two programs of at most 32 splits leave half the SMs idle (1.08 vs 1.39), so
    calls of fewer than one program per SM at the most splits keep 64 rows.  Longer query blocks
    (prefill) keep 64 rows: measured there only."""
    if (not arch.startswith("sm_") or head_dim_pad != 256 or group < 8 or num_seqs < 1
            or num_tokens > num_seqs * SPLIT_QUERY_ROWS
            or smem < _DEEP_STAGES_SMEM):
        return 0
    return 128 if num_seqs * num_kv_heads * WAVE_SPLITS >= sms else 0


def takes_inline_ptx(arch: str) -> bool:
    """Whether kernels for ``arch`` may load page ids by inline PTX (``page_ids_asm``,
    kernels/paged_attention.py): NVIDIA only; the interpreter runs none either way."""
    return arch.startswith("sm_")


def may_split(num_tokens: int, num_seqs: int, block_q: int) -> bool:
    """Whether the chooser (or a tuned entry) may split a call's keys: every sequence's queries fit
    one tile, or number at most ``SPLIT_QUERY_ROWS`` (padding rows counted, as the launch does)."""
    return num_tokens <= num_seqs * max(block_q, SPLIT_QUERY_ROWS)


def query_tiles(num_tokens: int, num_seqs: int, block_q: int) -> int:
    """Query tiles per sequence of a call that may split, from its mean rows per sequence rounded
    up to a power of two: constant within each power-of-two bucket, so the workspace bound holds."""
    rows = _runtime.next_power_of_2(-(-num_tokens // max(1, num_seqs)))
    return max(1, -(-rows // block_q))


def _mfma_nonkdim(arch: str, block_m: int, num_warps: int, converted_fp8: bool = False) -> int:
    """AMD: 16x16 MFMAs where a warp's share of the tile's rows is under 32, else Triton's choice.

    With 32x32 MFMAs such a tile makes Triton give Q K^T and P V different warp layouts: the
    scores are computed twice and P moves between warps through LDS, 16 bits at a time.  16x16
    MFMAs give both dots one layout.  Compiled offline, the Qwen3-8B q16 tile (64 rows, 4 warps),
    hot loop per wave: gfx942 1041 -> 663 instructions, 104 -> 48 LDS operations, 262 -> 182
    registers; gfx950 757 -> 531, 82 -> 56, 225 -> 156.  128-row tiles over 4 warps keep 32x32
    (1043 vs 1070).  gfx94x over its own fp8 format keeps 32x32: there 16x16 can hold the converted
    tiles in more registers (page 1, split-KV: 235 -> 282 per lane, one wave per SIMD instead of two,
    with no software pipelining at 1 stage; page 16: 244 -> 245) for a loop 14 % shorter
    (``converted_fp8``: tiles of its own format converted for a dot; with q and P in two fp8 parts none
    is, and 16x16 takes 166-184 registers).
    Unmeasured on the GPUs (benchmarks/NOTES.md, "AMD, compiled offline").
    """
    if not arch.startswith("gfx") or block_m // num_warps >= 32 or (converted_fp8 and arch.startswith("gfx94")):
        return 0
    return 16


def _tuned_launch(launch: AttentionLaunch, fields: dict, arch: str, splits_free: bool, rows_free: bool = False,
                  group: int = 1, max_query_len: int | None = None) -> AttentionLaunch:
    """A tuned entry's fields over the rules' launch.  Its KV splits apply only where the rules
    could split too (``may_split``, no count forced), so the workspace bound
    keeps its shape; its query rows only where the call may not split (the rows would move the bound);
    inline PTX page ids only where they compile (NVIDIA, not interpreted)."""
    fields = dict(fields)
    block_q = fields.pop("block_q", None)
    if not splits_free:
        fields["num_splits"] = launch.num_splits
    fields["page_ids_asm"] = fields["page_ids_asm"] and takes_inline_ptx(arch) and not _runtime.interpreting()
    launch = dataclasses.replace(launch, **fields)
    if block_q is not None and rows_free:
        launch = _with_block_q(launch, block_q, group, max_query_len)
    return launch


def _tile_rows(block_q: int, group: int, max_query_len: int | None) -> tuple[int, int]:
    """(queries, rows) of a tile of ``block_q`` queries: no more queries than a sequence has, and
    their GQA group's rows padded to a power of two (16 at least, the dots' smallest)."""
    if max_query_len is not None:
        block_q = min(block_q, _runtime.next_power_of_2(max(1, max_query_len)))
    return block_q, max(16, _runtime.next_power_of_2(block_q * group))


def _with_block_q(launch: AttentionLaunch, block_q: int, group: int, max_query_len: int | None) -> AttentionLaunch:
    """``launch`` with tiles of ``block_q`` queries and their rows."""
    block_q, block_m = _tile_rows(block_q, group, max_query_len)
    return dataclasses.replace(launch, block_q=block_q, block_m=block_m)
