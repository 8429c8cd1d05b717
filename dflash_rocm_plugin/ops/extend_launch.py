"""The dense-K/V prefill kernel's launch (kernels/extend_attention.py), chosen from shapes only: which
calls' whole prompts read their keys from the host's new K/V rows instead of the pages, in what tiles.
The paged kernel's launch, which serves every other row, is ``launch_config``'s."""

from __future__ import annotations

import contextlib
import dataclasses

from dflash_rocm_plugin.ops import _runtime, launch_config, support


@dataclasses.dataclass(frozen=True)
class ExtendLaunch:
    """The dense-K/V prefill kernel's launch (kernels/extend_attention.py)."""
    block_m: int        # query tokens of one head per program; sequences shorter than this stay paged
    block_n: int
    num_warps: int
    num_stages: int
    use_desc: bool      # Hopper and later: the block's K/V tiles by TMA copies
    qo_desc: bool = False  # ... and its query tile and (whole tiles') output by TMA copies too
    # Chunks whose prefix holds at most GQA times their tokens in keys they see (under a sliding window its
    # last window - 1) too, reading a dense copy of those that a first kernel makes (kernels/kv_cache.py,
    # ``cached_prefix_kernel``).
    chunks: bool = False


_forced_extend: dict = {}


@contextlib.contextmanager
def forced_extend(**fields):
    """Within the block, every dense-K/V prefill launch uses these ExtendLaunch fields (tuning sweeps), also
    where ``choose_extend`` would keep a call's prompts paged for its heads and cache (not for its lengths)."""
    with launch_config.forcing(_forced_extend, ExtendLaunch, "extend launch", fields):
        yield


def forced_extend_fields() -> tuple:
    """The fields ``forced_extend`` sets now, as a key."""
    return tuple(_forced_extend.items()) if _forced_extend else ()


# Host bound on query rows per sequence from which a call on a GPU runs its whole prompts dense: the
# dense launch is a second launch (a 1 x 2K prompt's eager call: 73 us of host time against the paged
# call's 61, both under the GPU's 90 / 127 us; H200), hidden behind the GPU from prompts of about this
# length on ...
DENSE_MIN_QUERY_LEN = 2048
# ... and from prompts of this length on Hopper when the step has at least SHORT_PROMPTS_MIN_TOKENS
# query rows (several such prompts keep the GPU busy for longer than the host takes), in 128 x 64 tiles.
SHORT_PROMPTS_MIN_QUERY_LEN = 1024
SHORT_PROMPTS_MIN_TOKENS = 4096
# Sliding windows up to this many keys take 64-row tiles: a tile of B rows loads about B + window keys
# for the window each row sees, so 128-row tiles spend half their dots on masked keys at a 128-key window.
SMALL_WINDOW = 256


def choose_extend(*, head_dim: int, max_query_len: int | None, device_index: int | None,
                  window: int = 0, num_tokens: int = 0, kv_cache_dtype=None,
                  tuned: dict | bool | None = None) -> ExtendLaunch | None:
    """The dense-K/V prefill launch for a call of ``num_tokens`` query rows whose host bounds its query
    rows per sequence by ``max_query_len``, or None: a call without a bound, or under
    ``DENSE_MIN_QUERY_LEN`` on a GPU (decode, q16 blocks, short prefill chunks; on Hopper, steps of
    ``SHORT_PROMPTS_MIN_TOKENS`` rows go dense from ``SHORT_PROMPTS_MIN_QUERY_LEN``).  Its prompts of at
    least ``block_m`` tokens run dense, and its chunks of that many tokens over a prefix of at most GQA
    times as many keys they see (under a window its last ``window - 1``).

    H200, causal prefill, TFLOP/s, TMA tiles against the paged kernel's rules in one process
    (benchmarks/NOTES.md, "v14 -> v15").  Qwen3-8B heads (32 / 8 of 128): 128 x 128, 8 warps, 3 stages
    576 / 503 / 298 / 580 at 1 x 8K / 4 x 4K / 16 x 1K / 1 x 32K (paged 426 / 390 / 291 / 489); 128 x 64,
    4 warps, 2 stages 472 / 456 / 311 / 486; 4 stages do not fit.  Pointer loads, 128 x 128, 8 warps,
    3 stages: 497 / 430 / 269 / 507 (NVIDIA before Hopper).  Qwen3-Next / Qwen3.5 full-attention heads
    (16 / 2 of 256): 128 x 64, 8 warps, 2 stages 545 / 552 / 515 / 534 at 1 x 8K / 2 x 8K / 4 x 4K / 1 x 32K
    (paged 302 / 317 / 300 / 279; 64 x 64, 4 warps, 3 stages 562 / 555 / 493 / 542; 3 stages of 128 rows
    do not fit).  AMD (no TMA): the 128-row tile of the paged kernel's prefill
    (``launch_config.amd_prefill_warps``), 1 stage on gfx942 and 2 on gfx950, 32-key tiles for 256-wide
    heads (LDS); unmeasured.

    Windows up to ``SMALL_WINDOW``: 64 x 64 tiles, 4 warps.  H200, gpt-oss heads (64 / 8 of 64) with sinks and
    a 128-key window, TFLOP/s of visible keys at 1 x 8K / 4 x 4K / 1 x 32K: 64 x 64 at 3 stages 108 / 103 /
    113; 128 x 128 at 8 warps 59 / 56 / 61; 128 x 64 at 4 warps 84 / 83 / 87; the paged kernel 92 / 95 / 95.
    Gemma-4's sliding layers (16 / 8 of 256, a 512-key window) keep 128 x 64 (249 / 278 / 267; 64 x 64 262 /
    245 / 274; paged 166 / 166 / 174).

    Over a cache whose fp8 codes the paged kernel multiplies (``support.multiplies_fp8``), windowed wide heads stay
    paged ("v20 -> v21"): there the pages' Q K^T runs on fp8 dots, while the dense kernel multiplies 16-bit copies
    of the rows, made by a pass of their own (``cached_rows_kernel``) that a window's few keys per row do not repay;
    forced fields (sweeps) still run the dense launch. H100, Gemma-4 sliding layers over e4m3fn, TFLOP/s, pages
    against dense in one process: whole prompts 282 / 284 / 300 against 215 / 227 / 230 at 1 x 8K / 4 x 4K / 1 x 32K
    (over bf16 the dense kernel wins, 270 / 293 / 292 against 167 / 167 / 175), chunks 210 / 211 against 206 / 210
    at 4 x 2K over 6K / 1 x 8K over 24K. Not 256-wide full attention (Qwen3.5 over e4m3fn: dense 540 / 504 / 525
    against the pages' 397 / 400 / 406) nor gpt-oss's 64-wide windowed heads (dense 93 / 91 / 98 against 87 / 88 /
    90).

    Chunks over a prefix (``chunks``; "v19 -> v20"): H100, chunked prefill 4 x 2K over 6K / 1 x 8K over 24K,
    TFLOP/s against the same chunks from the pages in one process: Qwen3-8B heads 541 / 566 (451 / 467), over
    an fp8 cache 554 / 569 (343 / 370), Qwen3-32B heads 520 / 558 (433 / 467).

    Hopper's tiles also load the query tile and store whole output tiles by TMA (``qo_desc``; "v15 -> v16"):
    538 / 465 / 564 at 1 x 8K / 4 x 4K / 1 x 32K against 526 / 476 / 548 without.  Short prompts: 16 x 1K
    (host bound 1024, 16K rows) in 128 x 64 tiles of 4 warps at 2 stages 354, in 128 x 128 tiles 310, the
    pages 295 (cuDNN 478); 128 x 64 loses on long prompts (495 / 481 / 512), so it serves only host bounds
    under ``DENSE_MIN_QUERY_LEN``.

    ``tuned``: the ``dense`` part of a tuned entry for the call's bucket (``ops/tuned_file.py``, measured on
    this GPU by ``dflash-rocm tune --prefill``): False keeps its prompts paged, fields replace the tile; the
    host bound on query rows still decides which calls may run dense.  Forced fields win over both.
    """
    arch = _runtime.gpu_arch(device_index)
    least = DENSE_MIN_QUERY_LEN
    wide = head_dim > 128
    if arch == "cpu":  # the interpreter: small tiles keep tests quick
        cfg = ExtendLaunch(32, 16, 4, 1, False)
        least = cfg.block_m
    elif arch.startswith("gfx"):
        cfg = ExtendLaunch(128, 32 if wide else 64, launch_config.amd_prefill_warps(arch),
                           2 if arch.startswith("gfx95") else 1, False)
    else:
        tma = int(arch[3:]) >= 90
        cfg = ExtendLaunch(128, 64, 8, 2, tma, tma) if wide else ExtendLaunch(128, 128, 8, 3, tma, tma)
        if (tma and not wide and max_query_len is not None and num_tokens >= SHORT_PROMPTS_MIN_TOKENS
                and SHORT_PROMPTS_MIN_QUERY_LEN <= max_query_len < least):
            cfg = ExtendLaunch(128, 64, 4, 2, True, True)
            least = SHORT_PROMPTS_MIN_QUERY_LEN
    # A chunk's prefix copy holds GQA rows per query token, K and V: no more memory than the call's q and
    # out, so a long prefix under a short chunk stays paged.  On gfx94x a 256-wide window tile takes 252 of
    # the 256 registers a lane has; its windowed prefix's masks spill one (tests/core/test_offline_compile.py).
    cfg = dataclasses.replace(cfg, chunks=not (window and wide and arch.startswith("gfx94")))
    if 0 < window <= SMALL_WINDOW and arch != "cpu":
        cfg = dataclasses.replace(cfg, block_m=64, block_n=min(cfg.block_n, 64), num_warps=4,
                                  num_stages=3 if cfg.use_desc else cfg.num_stages)
    paged = bool(window) and wide and support.multiplies_fp8(kv_cache_dtype, arch)
    if _forced_extend:
        cfg = dataclasses.replace(cfg, **_forced_extend)
    elif tuned is False or (tuned is None and paged):
        return None
    elif tuned:
        cfg = dataclasses.replace(cfg, **tuned)
    if max_query_len is None or max_query_len < max(least, cfg.block_m):
        return None
    return cfg
