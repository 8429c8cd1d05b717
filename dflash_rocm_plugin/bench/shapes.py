"""The benchmark grid: DFlash draft (non-causal) and verify (causal) attention over a paged cache.

Both Qwen3-8B and Qwen3-4B use 32 query heads, 8 KV heads and head_dim 128 (their HF configs),
so one head layout covers both; ``--model`` keeps them apart in the output anyway.  Qwen3-32B
(64/8) and Qwen3-30B-A3B (32/4) have GQA groups of 8: 128-row tiles of 8 warps.
"""

from __future__ import annotations

import dataclasses

MODELS = {
    # name: (num_q_heads, num_kv_heads, head_dim)
    "qwen3-8b": (32, 8, 128),
    "qwen3-4b": (32, 8, 128),
    "qwen3-32b": (64, 8, 128),
    "qwen3-30b-a3b": (32, 4, 128),
    # gpt-oss-120b / -20b: 64 q / 8 kv heads of 64; sinks, window 128 on alternate layers.
    "gpt-oss-120b": (64, 8, 64),
    # Gemma-4 26B-A4B: global layers 16 q / 2 kv heads of 512; sliding-window layers 16 q / 8 kv of 256.
    "gemma-4-global": (16, 2, 512),
    "gemma-4-sliding": (16, 8, 256),
    # Qwen3-Next-80B-A3B (and the Qwen3.5 hybrids' full-attention layers): 16 q / 2 kv heads of 256.
    "qwen3-next": (16, 2, 256),
}
# Cache element types: bytes per element (fp8: the GPU's own format, with per-tensor scales).
KV_BYTES = {"bf16": 2, "fp8": 1}
MODES = {"draft": False, "verify": True}  # mode -> causal

# (batch, context) pairs: the target shapes first, then the rest of 1-64 x 1K-32K.
TARGET_SHAPES = [(32, 16384), (64, 8192), (1, 32768), (8, 4096)]
DEFAULT_SHAPES = TARGET_SHAPES + [(1, 1024), (1, 4096), (8, 16384), (32, 4096), (64, 1024)]
TARGET_BANDWIDTH_TBS = {(32, 16384): 3.8, (64, 8192): 3.8, (1, 32768): 2.0, (8, 4096): 2.5}


@dataclasses.dataclass(frozen=True)
class Shape:
    model: str
    mode: str
    batch: int
    context: int      # KV length per sequence, the 16-token block included
    page: int
    q_len: int = 16
    kv: str = "bf16"            # cache element type (KV_BYTES); "bf16" means the query dtype
    window: int | None = None   # sliding window (key j visible from p iff p - j < window)
    sinks: bool = False
    workload: str = "q16"       # a WORKLOADS name: what the call stands for in a serving step

    @property
    def causal(self) -> bool:
        return MODES[self.mode]

    @property
    def keys_read(self) -> int:
        """Keys one sequence's call reads: all of them, or the window the block spans."""
        return self.context if self.window is None else min(self.context, self.window + self.q_len - 1)

    @property
    def plain(self) -> bool:
        """No fp8, window or sinks: every peer can run it."""
        return self.kv == "bf16" and self.window is None and not self.sinks

    @property
    def heads(self) -> tuple[int, int, int]:
        return MODELS[self.model]

    def flop(self) -> int:
        """Multiply-adds x 2 of Q K^T and P V over the (query, key) pairs the call attends."""
        hq, _, d = self.heads
        pairs = 0
        for p in range(self.context - self.q_len, self.context):
            hi = p + 1 if self.causal else self.context
            lo = max(0, p - self.window + 1) if self.window else 0
            pairs += max(0, hi - lo)
        return 4 * self.batch * hq * d * pairs

    def kv_bytes(self, element_size: int | None = None) -> int:
        """Unique K and V bytes one call must read: every key it sees, of every sequence, once
        (in the cache's element size unless given)."""
        _, hkv, d = self.heads
        size = KV_BYTES[self.kv] if element_size is None else element_size
        return 2 * self.batch * self.keys_read * hkv * d * size

    @property
    def label(self) -> str:
        ctx = f"{self.context // 1024}K" if self.context % 1024 == 0 else str(self.context)
        extra = "".join([f" {self.kv}" if self.kv != "bf16" else "", f" w{self.window}" if self.window else "",
                         " sinks" if self.sinks else "", f" q{self.q_len}" if self.q_len != 16 else ""])
        # The q16 block, of any heads, is named by its mode; the target's other calls by what they are.
        what = self.mode if self.workload in ("q16", "gqa8") else self.workload
        return f"{what} {self.model} b{self.batch}x{ctx} p{self.page}{extra}"


def parse_pairs(text: str) -> list[tuple[int, int]]:
    """'32x16K,1x32768' -> [(32, 16384), (1, 32768)]."""
    pairs = []
    for item in filter(None, (t.strip() for t in text.split(","))):
        b, c = item.lower().split("x")
        c = int(c[:-1]) * 1024 if c.endswith("k") else int(c)
        pairs.append((int(b), c))
    return pairs


def grid(models, modes, pairs, pages, q_len=16, kv="bf16", window=None, sinks=False) -> list[Shape]:
    return [Shape(m, mode, b, c, p, q_len, kv, window, sinks) for m in models for mode in modes
            for (b, c) in pairs for p in pages]


@dataclasses.dataclass(frozen=True)
class Workload:
    """The other attention calls ``--attention-backend rocm_dflash`` puts on the plugin (the target's
    prefill, chunked prefill and decode; the q16 block of GQA-8 heads), with the goals they are held to."""
    name: str
    about: str
    model: str
    modes: tuple
    cells: tuple                # (batch, context, q_len); q_len None: the whole context (prefill)
    tbs: dict = dataclasses.field(default_factory=dict)    # (batch, context) -> unique KV TB/s needed
    tflops: float | None = None                            # TFLOP/s needed at every cell
    at_least: dict = dataclasses.field(default_factory=dict)  # peer -> cells (batch, context) not to lose at

    def shapes(self, pages, kv: str = "bf16", window=None, sinks: bool = False,
               model: str | None = None) -> list[Shape]:
        """The workload's cells for its own model's heads, or for ``model``'s (gpt-oss prefill, say)."""
        return [Shape(model or self.model, mode, b, c, p, c if q is None else q, kv, window, sinks,
                      workload=self.name) for mode in self.modes for (b, c, q) in self.cells for p in pages]


K = 1024
WORKLOADS = {w.name: w for w in (
    Workload("prefill", "prefill, no prefix (q = context), causal", "qwen3-8b", ("verify",),
             ((1, 8 * K, None), (4, 4 * K, None), (16, K, None), (1, 32 * K, None)),
             at_least={"sdpa_cudnn": ((1, 8 * K), (4, 4 * K), (1, 32 * K)),
                       "sdpa_flash": ((1, 8 * K), (4, 4 * K), (16, K), (1, 32 * K))}),
    Workload("chunked", "chunked prefill: 2K new over 6K cached, 8K new over 24K, causal", "qwen3-8b",
             ("verify",), ((4, 8 * K, 2 * K), (1, 32 * K, 8 * K)), tflops=500.0),
    Workload("decode", "plain decode, one query per sequence", "qwen3-8b", ("verify",),
             ((64, 8 * K, 1), (16, 16 * K, 1), (256, 2 * K, 1), (1, 32 * K, 1)),
             tbs={(64, 8 * K): 4.2, (16, 16 * K): 4.2, (1, 32 * K): 2.8}),
    Workload("gqa8", "the q16 block with Qwen3-32B heads (GQA 8)", "qwen3-32b", ("draft", "verify"),
             ((32, 16 * K, 16), (8, 4 * K, 16), (1, 32 * K, 16)),
             tbs={(32, 16 * K): 3.8, (8, 4 * K): 2.8, (1, 32 * K): 2.5}),
)}
# The q16 block of Qwen3-8B heads timed as one call after an L2 flush (what a layer pays).
ONE_CALL_TBS = {(8, 4 * K): 2.8, (1, 4 * K): 1.0}

