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
        return f"{self.mode} {self.model} b{self.batch}x{ctx} p{self.page}{extra}"


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
