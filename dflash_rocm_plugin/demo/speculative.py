"""Batched greedy DFlash speculative decoding, and the independent target-only greedy run.

One DFlash step for every unfinished sequence ``s`` (bonus token ``b`` at position ``start``):
  1. draft cache: store context K/V of the tokens committed since the last step;
  2. draft: one non-causal forward of ``[b, MASK x (n-1)]`` at ``start..start+n-1`` (n = block size,
     smaller only when fewer tokens remain) -> n-1 draft tokens (argmax of rows 1..n-1);
  3. target: one causal forward of ``[b, d1..d(n-1)]`` (the verify), capturing DFlash layers;
  4. accept the longest prefix with ``d_j == argmax(target row j-1)``, then the target's own token at
     the first mismatch (or after the last draft): ``a + 1`` tokens; tau counts them (bonus included).
Rejected positions need no rollback in a paged cache: next step's writes start at the new
``start`` and every attention call only reads ``seq_len`` keys.

A sliding-window (DFlash2-style) draft attends over the last ``window`` keys of each block row;
after each step its cache evicts (NaN-poisons) the pages no later block can see.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Callable

import torch

from dflash_rocm_plugin import ops
from dflash_rocm_plugin.demo.draft import DFlashDraft
from dflash_rocm_plugin.demo.model import Qwen3Target
from dflash_rocm_plugin.demo.paged_cache import PagedKVCache

FAULTS = ("none", "skip-verify")

Progress = Callable[[int, int], None]


@dataclasses.dataclass
class Generation:
    tokens: list[list[int]]          # generated tokens of each sequence (prompt excluded)
    seconds: float
    acceptance: list[list[int]] = dataclasses.field(default_factory=list)  # tokens per step, per sequence

    @property
    def num_tokens(self) -> int:
        return sum(len(t) for t in self.tokens)

    @property
    def tau(self) -> float:
        steps = [a for seq in self.acceptance for a in seq]
        return sum(steps) / len(steps) if steps else float("nan")

    @property
    def tokens_per_second(self) -> float:
        return self.num_tokens / self.seconds if self.seconds > 0 else float("inf")


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _new_cache(num_layers, cfg, num_seqs, max_len, page_size, device, dtype, seed) -> PagedKVCache:
    pages = PagedKVCache.pages_needed(num_seqs, max_len, page_size)
    return PagedKVCache(num_layers, pages, page_size, cfg.num_key_value_heads, cfg.head_dim,
                        dtype, device, seed=seed)


def _prefill(target: Qwen3Target, cache: PagedKVCache, prompts: list[list[int]], capture_ids):
    n = len(prompts)
    batch = cache.batch(list(range(n)), [0] * n, [len(p) for p in prompts], causal=True)
    ids = torch.tensor([t for p in prompts for t in p], dtype=torch.long, device=cache.device)
    last_rows = (batch.query_start_loc[1:] - 1).long()
    logits, captured = target(ids, batch.positions, batch, capture_ids, logit_rows=last_rows)
    return ops.greedy_sample(logits).tolist(), captured, batch.query_start_loc.tolist()


@torch.no_grad()
def target_greedy(target: Qwen3Target, prompts: list[list[int]], max_new_tokens: int, *,
                  page_size: int = 16, seed: int = 0, progress: Progress | None = None) -> Generation:
    """Plain greedy decoding of the target, one token per forward, on its own paged cache."""
    device, dtype = target.embed_weight.device, target.embed_weight.dtype
    cfg = target.config
    cache = _new_cache(cfg.num_hidden_layers, cfg, len(prompts), max(map(len, prompts)) + max_new_tokens,
                       page_size, device, dtype, seed + 1)
    _sync(device)
    t0 = time.perf_counter()
    first, _, _ = _prefill(target, cache, prompts, [])
    out = [[t] for t in first]
    seqs = list(range(len(prompts)))
    for step in range(1, max_new_tokens):
        batch = cache.batch(seqs, [len(p) + step - 1 for p in prompts], [1] * len(seqs), causal=True)
        ids = torch.tensor([o[-1] for o in out], dtype=torch.long, device=device)
        logits, _ = target(ids, batch.positions, batch)
        for o, t in zip(out, ops.greedy_sample(logits).tolist()):
            o.append(t)
        if progress:
            progress(step + 1, max_new_tokens)
    _sync(device)
    return Generation([o[:max_new_tokens] for o in out], time.perf_counter() - t0)


@torch.no_grad()
def dflash_greedy(target: Qwen3Target, draft: DFlashDraft, prompts: list[list[int]], max_new_tokens: int,
                  *, block_size: int | None = None, page_size: int = 16, seed: int = 0, fault: str = "none",
                  progress: Progress | None = None) -> Generation:
    """Greedy DFlash speculative decoding of all prompts as one batch.

    ``fault='skip-verify'`` accepts every draft token unchecked: a deliberately wrong decoder, used
    to show that the lossless check catches it.
    """
    if fault not in FAULTS:
        raise ValueError(f"fault must be one of {FAULTS}, got {fault!r}")
    dcfg = draft.config
    block = block_size or dcfg.block_size
    if block < 2:
        raise ValueError(f"block_size must be >= 2, got {block}")
    device, dtype = target.embed_weight.device, target.embed_weight.dtype
    capture = list(dcfg.target_layer_ids)
    max_len = max(map(len, prompts)) + max_new_tokens + block
    tcache = _new_cache(target.config.num_hidden_layers, target.config, len(prompts), max_len, page_size,
                        device, dtype, seed + 2)
    dcache = _new_cache(dcfg.num_hidden_layers, dcfg, len(prompts), max_len, page_size, device, dtype, seed + 3)

    _sync(device)
    t0 = time.perf_counter()
    first, captured, qsl = _prefill(target, tcache, prompts, capture)
    out = [[t] for t in first]
    start = [len(p) for p in prompts]                        # position of each sequence's bonus token
    pending = [captured[qsl[i]:qsl[i + 1]] for i in range(len(prompts))]   # context not yet in the draft
    accepted: list[list[int]] = [[] for _ in prompts]

    while True:
        act = [s for s in range(len(prompts)) if len(out[s]) < max_new_tokens]
        if not act:
            break
        # 1. context K/V of newly committed tokens (positions start - len(pending) .. start - 1)
        ctx = dcache.batch(act, [start[s] - len(pending[s]) for s in act], [len(pending[s]) for s in act],
                           causal=False)
        draft.context_kv(torch.cat([pending[s] for s in act]), ctx.positions, ctx.store)
        # 2. one non-causal draft forward over each block
        n = [min(block, max_new_tokens - len(out[s]) + 1) for s in act]
        blk = dcache.batch(act, [start[s] for s in act], n, causal=False, sliding_window=dcfg.sliding_window)
        block_ids = [[out[s][-1]] + [dcfg.mask_token_id] * (k - 1) for s, k in zip(act, n)]
        hidden = draft.block_hidden(torch.tensor(sum(block_ids, []), device=device), blk.positions, target, blk)
        qsl = blk.query_start_loc.tolist()
        rows = torch.tensor([r for i in range(len(act)) for r in range(qsl[i] + 1, qsl[i + 1])], device=device)
        drafts = ops.greedy_sample(draft.logits(hidden[rows], target)).tolist()
        # 3. causal verify of [bonus, drafts] by the target
        ver = tcache.batch(act, [start[s] for s in act], n, causal=True)
        verify_ids = []
        for i, k in enumerate(n):
            block_ids[i][1:] = drafts[qsl[i] - i: qsl[i + 1] - i - 1]
            verify_ids += block_ids[i]
        logits, captured = target(torch.tensor(verify_ids, device=device), ver.positions, ver, capture)
        posterior = ops.greedy_sample(logits).tolist()
        # 4. accept
        for i, s in enumerate(act):
            guess, truth = block_ids[i][1:], posterior[qsl[i]:qsl[i + 1]]
            a = 0
            while a < len(guess) and (fault == "skip-verify" or guess[a] == truth[a]):
                a += 1
            produced = min(a + 1, max_new_tokens - len(out[s]))
            out[s] += (guess[:a] + [truth[a]])[:produced]
            accepted[s].append(produced)
            pending[s] = captured[qsl[i]:qsl[i] + a + 1]
            start[s] += a + 1
            if dcfg.sliding_window is not None:
                # The next block's first row, at start[s], sees keys from start[s] - window + 1.
                dcache.evict_before(s, start[s] - dcfg.sliding_window + 1)
        if progress:
            progress(min(len(o) for o in out), max_new_tokens)
    _sync(device)
    return Generation(out, time.perf_counter() - t0, accepted)
