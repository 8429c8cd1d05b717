"""What ``dflash-rocm tune`` sweeps: the shape classes the hosts call, their buckets, and the launch
fields tried on each architecture family.

Shape classes: DFlash draft (non-causal) and verify (causal) blocks of 16 and 8 queries (DFlash and
DFlash2 drafts), decode (one query), and, optionally, chunked prefill (2 048-query chunks over a
longer cache) and prefill (the whole prompt).  Every shape is measured at the top of its bucket (the
power-of-two sizes the chooser's lookup rounds up to), so an entry is timed where it is hardest.

The search is coordinate descent from the default launch: KV splits (blocks short enough to split)
or, for prefill and chunked prefill, the query rows of a tile, then tile x warps x stages at the
best of those, then the two loop flags (over an fp8 cache each with every Q K^T dot the call may run:
16-bit, q as two fp8 parts, and q rounded into fp8 where ``DFLASH_ROCM_FP8_QK`` names the calls), then
the split counts next to the best.  Its length does
not depend on what is measured, so ``--dry-run`` counts it.
"""

from __future__ import annotations

import dataclasses
import itertools

from dflash_rocm_plugin.bench.shapes import DEFAULT_SHAPES, Shape
from dflash_rocm_plugin import ops

# name: (mode, query rows per sequence; None: the whole context)
CLASSES = {
    "draft-q16": ("draft", 16), "verify-q16": ("verify", 16),
    "draft-q8": ("draft", 8), "verify-q8": ("verify", 8),
    "decode": ("verify", 1),
    "chunked-prefill": ("verify", 2048),
    "prefill": ("verify", None),
}
DEFAULT_CLASSES = ("draft-q16", "verify-q16", "decode", "draft-q8", "verify-q8")
PREFILL_CLASSES = ("chunked-prefill", "prefill")
# (batch, context) pairs of each class when --shapes is not given: the bench's grid for blocks and
# decode; prompts short enough that the float32 reference fits beside them.
DEFAULT_PAIRS = {"chunked-prefill": [(1, 16384), (4, 8192)], "prefill": [(1, 8192), (4, 4096)]}
BLOCK_PAIRS = list(DEFAULT_SHAPES)
DEFAULT_PAGES = (16, 1)
# Rough seconds per candidate (compile, reference check, graph and flushed timing) and per bucket
# (inputs and the float32 reference), for --dry-run and the budget.
SECONDS_PER_CANDIDATE = {"sm": 2.5, "gfx": 4.0, "cpu": 30.0}
SECONDS_PER_BUCKET = 4.0


@dataclasses.dataclass(frozen=True)
class TuneShape(Shape):
    """A bench shape of any head layout (``layout``: q heads, kv heads, head_dim)."""
    layout: tuple = (32, 8, 128)
    klass: str = "draft-q16"

    @property
    def heads(self) -> tuple[int, int, int]:
        return self.layout

    @property
    def label(self) -> str:
        ctx = f"{self.context // 1024}K" if self.context % 1024 == 0 else str(self.context)
        return f"{self.klass} b{self.batch}x{ctx} p{self.page}"


@dataclasses.dataclass(frozen=True)
class Space:
    """Launch-field values tried on one architecture family."""
    splits: tuple = (1, 2, 4, 8, 16, 32, 64)
    tiles: tuple = ()                    # (block_n, num_warps, num_stages)
    page_ids_asm: tuple = (False,)
    overlap_qk: tuple = (False, True)
    rows: tuple = ()                     # query rows per tile tried where queries span several tiles
    # The dense-K/V prefill kernel's (block_m, block_n, num_warps, num_stages) tried on whole prompts, beside
    # the prompts read from the pages (block_n <= block_m: the kernel's diagonal starts at a multiple of both).
    dense_tiles: tuple = ()


def space_for(arch: str) -> Space:
    if arch.startswith("sm_"):
        # H200 v1-v4 (benchmarks/NOTES.md): BLOCK_N 32-128, 4/8 warps, 2-5 stages all won somewhere.
        # Prefill: 64-256 rows (H200 v7: 256 rows won at 1 x 8K and 1 x 32K, 128 at 4 x 4K).
        # Dense prefill: the tiles of H200 v15 and H100 v16 (ops/extend_launch.py).
        return Space(tiles=tuple(itertools.product((32, 64, 128), (4, 8), (2, 3, 4, 5))),
                     page_ids_asm=(False, True) if ops.takes_inline_ptx(arch) else (False,), rows=(64, 128, 256),
                     dense_tiles=((128, 128, 8, 3), (128, 64, 8, 2), (128, 64, 4, 2), (64, 64, 4, 3),
                                  (256, 64, 8, 3)))
    if arch.startswith("gfx"):
        # CDNA3/4: 1-3 stages (registers bound occupancy past that), no inline PTX; prefill rows as on
        # Hopper (AMD's own Triton attention kernels run 128-256-row tiles; unmeasured here).
        # Dense prefill: 128 rows at the chooser's warps, 64 rows, 32-128-key tiles, 1-2 stages (no TMA).
        return Space(tiles=tuple(itertools.product((32, 64, 128), (4, 8), (1, 2, 3))), rows=(64, 128, 256),
                     dense_tiles=((128, 64, 8, 1), (128, 64, 4, 2), (128, 32, 8, 2), (128, 128, 8, 1),
                                  (64, 64, 4, 1), (64, 64, 4, 2)))
    # The interpreter: a token sweep, for checking the machinery.
    return Space(splits=(1, 2), tiles=((16, 4, 1), (32, 4, 1)), overlap_qk=(False,), dense_tiles=((16, 16, 4, 1),))


def family(arch: str) -> str:
    return "sm" if arch.startswith("sm_") else "gfx" if arch.startswith("gfx") else "cpu"


def buckets(classes, layout, pages, pairs=None, kv: str = "bf16") -> list[TuneShape]:
    """The shapes to tune, target shapes first: pair by pair, each class, each page size."""
    rows = []
    for klass in classes:
        mode, q_len = CLASSES[klass]
        for i, (batch, context) in enumerate(pairs or DEFAULT_PAIRS.get(klass, BLOCK_PAIRS)):
            q = context if q_len is None else q_len
            if q > context:
                continue
            for j, page in enumerate(pages):
                rows.append(((i, list(classes).index(klass), j),
                             TuneShape("tune", mode, batch, context, page, q, kv, layout=tuple(layout), klass=klass)))
    return [shape for _, shape in sorted(rows, key=lambda r: r[0])]


def split_counts(space: Space, kv_keys: int, block_n: int) -> list[int]:
    """The split counts worth trying over ``kv_keys`` keys: each split reads at least one key tile."""
    return [n for n in space.splits if n == 1 or n * block_n <= kv_keys]


def row_choices(space: Space, group: int, q_len: int) -> list[tuple[int, int]]:
    """(block_q, num_warps) of each row count tried: 8 warps from 128 rows, no more queries per tile
    than a sequence has."""
    out = []
    for rows in space.rows:
        block_q = min(max(1, rows // group), 1 << max(0, q_len - 1).bit_length())
        choice = (block_q, 8 if block_q * group >= 128 else 4)
        if choice not in out:
            out.append(choice)
    return out


def candidate_count(space: Space, can_split: bool, kv_keys: int, block_n: int, group: int = 1,
                    q_len: int = 1, fp8_dots: int = 1) -> int:
    """How many launches the search times for one bucket (the default excluded); ``fp8_dots``: how many
    values of it are tried with each pair of flags."""
    first = len(split_counts(space, kv_keys, block_n)) if can_split else len(row_choices(space, group, q_len))
    flags = len(space.page_ids_asm) * len(space.overlap_qk) * fp8_dots
    return first + len(space.tiles) + flags + (2 if can_split else 0)


def prompt_candidate_count(space: Space) -> int:
    """How many launches ``search.tune_prompts`` times for one prefill bucket: the default, the pages and
    each dense tile."""
    return 2 + len(space.dense_tiles) if space.dense_tiles else 0
