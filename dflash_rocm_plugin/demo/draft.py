"""The DFlash draft: a small Qwen3 stack that denoises ``[anchor, MASK x (B-1)]`` in one non-causal pass.

Per draft step (paper, and the z-lab reference ``dflash.model``):
  * context feature of each newly committed token: ``hidden_norm(fc(concat(captured target layers)))``;
  * every draft layer projects that feature with ITS OWN ``k_proj``/``v_proj`` (+ ``k_norm``, RoPE at
    the token's absolute position) into extra K/V kept in the draft's cache -- the feature never goes
    through the draft's q_proj, o_proj or MLP;
  * the block tokens, embedded with the TARGET's embedding, run the layers attending non-causally to
    all context K/V plus the whole block; logits come from the TARGET's head.
The draft owns no embedding and no lm_head.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import nn

from dflash_rocm_plugin.demo.config import DraftConfig
from dflash_rocm_plugin.demo.layers import Attend, DecoderLayer, RMSNorm, Rope
from dflash_rocm_plugin.demo.model import Qwen3Target


class DFlashDraft(nn.Module):
    def __init__(self, cfg: DraftConfig):
        super().__init__()
        self.config = cfg
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.num_hidden_layers))
        self.fc = nn.Linear(len(cfg.target_layer_ids) * cfg.hidden_size, cfg.hidden_size, bias=False)
        self.hidden_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.rope = Rope(cfg.head_dim, cfg.rope_theta)

    def context_kv(self, captured: torch.Tensor, positions: torch.Tensor,
                   store: Callable[[int, torch.Tensor, torch.Tensor], None]) -> None:
        """Project captured target states ``[T, n*hidden]`` into every layer's K/V and ``store`` them."""
        ctx = self.hidden_norm(self.fc(captured))
        cos_sin = self.rope.cos_sin(positions, ctx.dtype)
        for i, layer in enumerate(self.layers):
            store(i, *layer.self_attn.kv(ctx, cos_sin))

    def block_hidden(self, block_ids: torch.Tensor, positions: torch.Tensor, target: Qwen3Target,
                     attend: Attend) -> torch.Tensor:
        """Final-normed hidden states of the block tokens ``[T]`` (``attend`` must be non-causal)."""
        x = target.model.embed_tokens(block_ids) * self.config.input_embedding_scale
        cos_sin = self.rope.cos_sin(positions, x.dtype)
        for i, layer in enumerate(self.layers):
            x = layer(x, cos_sin, attend, i)
        return self.norm(x)

    def logits(self, hidden: torch.Tensor, target: Qwen3Target) -> torch.Tensor:
        logits = target.logits(hidden) * self.config.output_multiplier
        cap = self.config.final_logit_softcapping
        if cap:
            logits = torch.tanh(logits / cap) * cap
        return logits
