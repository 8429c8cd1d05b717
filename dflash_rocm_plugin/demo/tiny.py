"""The tiny default models: a seeded random Qwen3 target and a DFlash draft distilled from it.

A random draft proposes noise (tau ~ 1), which would leave the accept/rollback bookkeeping
untested.  So the draft is distilled in-process, with DFlash's training recipe in miniature:
the target greedily continues random prompts; for random anchors ``t`` the draft sees the target's
captured states of positions ``< t`` as context and the block ``[x_t, MASK...]``, and learns
``x_{t+1..}`` (cross-entropy through the frozen target head, position ``k`` weighted by
``exp(-(k-1)/gamma)``).  All anchors of a sequence train at once under DFlash's block-sparse mask
(a block sees its own tokens and the context before its anchor).  Dense torch attention is used
only here, for training; decoding uses the plugin's ops.

Weights are scaled so activations are O(1) and the target's greedy choices are decisive
(top-1 logit well above top-2), so kernel round-off cannot flip an argmax.  The target's attention
output is damped (``ATTENTION_GAIN``): its next token depends mostly on the current one, with some
context dependence -- structure a 200-step distillation can learn (tau ~ 2 with block 8), where a
fully random target's chaotic continuations would leave tau ~ 1.
"""

from __future__ import annotations

import math

import torch
from torch.nn import functional as F

from dflash_rocm_plugin.demo.config import DraftConfig, TargetConfig, build_target_layer_ids
from dflash_rocm_plugin.demo.draft import DFlashDraft
from dflash_rocm_plugin.demo.model import Qwen3Target

TINY_BLOCK_SIZE = 8
DRAFT_MODES = ("distilled", "random")
ATTENTION_GAIN = 0.05


def tiny_configs(block_size: int = TINY_BLOCK_SIZE,
                 sliding_window: int | None = None) -> tuple[TargetConfig, DraftConfig]:
    target = TargetConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=4,
                          num_attention_heads=2, num_key_value_heads=1, head_dim=32)
    draft = DraftConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2,
                        num_key_value_heads=1, head_dim=32,
                        target_layer_ids=[1, 2],
                        mask_token_id=target.vocab_size - 1, block_size=block_size,
                        num_target_layers=target.num_hidden_layers, sliding_window=sliding_window)
    return target, draft


def _init_(module: torch.nn.Module, generator: torch.Generator, gain: float = 1.0) -> None:
    for name, p in module.named_parameters():
        if name.endswith("norm.weight"):
            p.data.fill_(1.0)
        elif p.ndim == 2:
            p.data.normal_(0.0, gain / math.sqrt(p.shape[1]), generator=generator)
        else:
            p.data.zero_()


def tiny_target(seed: int = 0) -> Qwen3Target:
    cfg, _ = tiny_configs()
    g = torch.Generator().manual_seed(seed)
    target = Qwen3Target(cfg)
    _init_(target, g)
    target.model.embed_tokens.weight.data.normal_(0.0, 1.0, generator=g)
    # weak attention: the next token depends mostly on the current one (a predictable target,
    # as real text mostly is), with enough context dependence to break runs of acceptance
    for layer in target.model.layers:
        layer.self_attn.o_proj.weight.data.mul_(ATTENTION_GAIN)
    # a large output head: decisive greedy choices
    target.lm_head.weight.data.normal_(0.0, 8.0 / math.sqrt(cfg.hidden_size), generator=g)
    return target.eval()


def random_prompts(num: int, vocab: int, seed: int, min_len: int = 5, max_len: int = 12,
                   exclude: int | None = None) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(num):
        n = int(torch.randint(min_len, max_len + 1, (1,), generator=g))
        ids = torch.randint(0, vocab - 1 if exclude == vocab - 1 else vocab, (n,), generator=g).tolist()
        out.append(ids)
    return out


class DenseAttention:
    """``attend`` over explicit K/V (training and tests only).

    Tokens are ``rows`` equal-length rows laid end to end; ``mask`` is the visibility of one row's
    queries over its keys, ``[Tq, Tk]`` or per row ``[rows, Tq, Tk]``.  K/V handed to ``store``
    (the draft's context) are put before the row's own keys.
    """

    def __init__(self, mask: torch.Tensor, rows: int = 1):
        self.mask, self.rows, self.prefix = mask, rows, {}

    def store(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> None:
        self.prefix[layer] = (k, v)

    def _rows(self, x: torch.Tensor) -> torch.Tensor:  # [T, H, D] -> [rows, H, T/rows, D]
        return x.view(self.rows, -1, *x.shape[1:]).transpose(1, 2)

    def __call__(self, layer, q, k, v):
        q, k, v = self._rows(q), self._rows(k), self._rows(v)
        if layer in self.prefix:
            k = torch.cat([self._rows(self.prefix[layer][0]), k], dim=2)
            v = torch.cat([self._rows(self.prefix[layer][1]), v], dim=2)
        group = q.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
        mask = self.mask if self.mask.ndim == 2 else self.mask[:, None]
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return out.transpose(1, 2).reshape(-1, *out.shape[1:2], out.shape[-1])


def _dense_target(target: Qwen3Target, seqs: torch.Tensor, capture=()):
    """Causal dense forward of equal-length sequences ``[S, L]``."""
    s, n = seqs.shape
    mask = torch.ones(n, n, dtype=torch.bool).tril()
    logits, captured = target(seqs.reshape(-1), torch.arange(n).repeat(s), DenseAttention(mask, s), list(capture))
    return logits.view(s, n, -1), captured


@torch.no_grad()
def greedy_continuations(target: Qwen3Target, prompts: torch.Tensor, new_tokens: int) -> torch.Tensor:
    seqs = prompts
    for _ in range(new_tokens):
        logits, _ = _dense_target(target, seqs)
        seqs = torch.cat([seqs, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    return seqs


def distill(draft: DFlashDraft, target: Qwen3Target, *, seed: int, steps: int = 200, num_seqs: int = 32,
            prompt_len: int = 6, new_tokens: int = 26, anchors: int = 4, lr: float = 1e-2) -> float:
    """Train ``draft`` on the target's own greedy continuations; returns the final loss."""
    cfg, block = draft.config, draft.config.block_size
    g = torch.Generator().manual_seed(seed)
    prompts = torch.randint(0, target.config.vocab_size - 1, (num_seqs, prompt_len), generator=g)
    seqs = greedy_continuations(target, prompts, new_tokens)
    _, captured = _dense_target(target, seqs, cfg.target_layer_ids)
    length = seqs.shape[1]
    captured = captured.view(num_seqs, length, -1)
    gamma = {8: 4.0, 10: 5.0, 16: 7.0}.get(block, block / 2)
    weights = torch.exp(-torch.arange(block - 1, dtype=torch.float32) / gamma)
    opt = torch.optim.Adam(draft.parameters(), lr=lr)
    batch = 16
    loss = torch.tensor(float("nan"))
    for step in range(steps):
        rows = torch.randint(0, num_seqs, (batch,), generator=g)
        t = torch.randint(prompt_len, length - block + 1, (batch, anchors), generator=g)
        # per row: context = all positions, queries = its anchors' blocks; a block sees the context
        # before its anchor and its own tokens only
        ctx_pos = torch.arange(length).repeat(batch)
        blk_pos = (t[..., None] + torch.arange(block)).reshape(-1)
        anchor = t.repeat_interleave(block, dim=1)                                    # [batch, A*B]
        sees_ctx = torch.arange(length)[None, None, :] < anchor[..., None]
        if cfg.sliding_window is not None:  # DFlash2-style: the last `window` keys of each row only
            row_pos = blk_pos.view(batch, -1)
            sees_ctx &= row_pos[..., None] - torch.arange(length)[None, None, :] < cfg.sliding_window
        blk_id = torch.arange(anchors).repeat_interleave(block)
        sees_blk = (blk_id[:, None] == blk_id[None, :]).expand(batch, -1, -1)
        attend = DenseAttention(torch.cat([sees_ctx, sees_blk], dim=2), batch)
        draft.context_kv(captured[rows].reshape(batch * length, -1), ctx_pos, attend.store)
        tokens = seqs[rows].gather(1, t.view(batch, -1)).view(-1, 1)
        block_ids = torch.cat([tokens, torch.full((tokens.shape[0], block - 1), cfg.mask_token_id)], 1)
        with torch.enable_grad():
            hidden = draft.block_hidden(block_ids.reshape(-1), blk_pos, target, attend)
            logits = draft.logits(hidden.view(-1, block, cfg.hidden_size)[:, 1:], target)
            labels = seqs[rows[:, None, None], (t[..., None] + torch.arange(1, block))].view(-1, block - 1)
            ce = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), reduction="none")
            loss = (ce.view(-1, block - 1) * weights).sum() / (weights.sum() * labels.shape[0])
            opt.zero_grad()
            loss.backward()
            opt.step()
    return float(loss.detach())


_DISTILLED: dict[tuple, dict] = {}


def tiny_draft(target: Qwen3Target, *, mode: str = "distilled", seed: int = 0,
               block_size: int = TINY_BLOCK_SIZE, steps: int = 200,
               sliding_window: int | None = None) -> DFlashDraft:
    """The tiny draft for ``tiny_target(seed)`` (distilled once per process and remembered);
    ``sliding_window``: a DFlash2-style draft, every layer windowed, distilled with that window."""
    if mode not in DRAFT_MODES:
        raise ValueError(f"draft mode must be one of {DRAFT_MODES}, got {mode!r}")
    key = (mode, seed, block_size, steps, sliding_window)
    if key in _DISTILLED:
        draft = DFlashDraft(tiny_configs(block_size, sliding_window)[1])
        draft.load_state_dict(_DISTILLED[key])
        return draft.eval()
    _, cfg = tiny_configs(block_size, sliding_window)
    draft = DFlashDraft(cfg)
    _init_(draft, torch.Generator().manual_seed(seed + 1))
    if mode == "distilled":
        for p in target.parameters():
            p.requires_grad_(False)
        distill(draft, target, seed=seed + 2, steps=steps)
    _DISTILLED[key] = {k: v.detach().clone() for k, v in draft.state_dict().items()}
    return draft.eval()
