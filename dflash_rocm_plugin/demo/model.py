"""The Qwen3 target, with DFlash hidden-state capture.

Capture convention (DFlash): layer id ``i`` is the OUTPUT of decoder layer ``i`` (Hugging Face
``hidden_states[i + 1]``), never its input.  Hugging Face reports the last layer's output after the
final norm, so id ``num_layers - 1`` is captured the same way.
"""

from __future__ import annotations

import torch
from torch import nn

from dflash_rocm_plugin.demo.config import TargetConfig
from dflash_rocm_plugin.demo.layers import Attend, DecoderLayer, RMSNorm, Rope


class _Body(nn.Module):
    def __init__(self, cfg: TargetConfig):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)


class Qwen3Target(nn.Module):
    def __init__(self, cfg: TargetConfig):
        super().__init__()
        self.config = cfg
        self.model = _Body(cfg)
        if not cfg.tie_word_embeddings:
            self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        self.rope = Rope(cfg.head_dim, cfg.rope_theta)

    @property
    def embed_weight(self) -> torch.Tensor:
        return self.model.embed_tokens.weight

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Final-normed hidden states -> logits (the head the draft shares)."""
        head = self.model.embed_tokens.weight if self.config.tie_word_embeddings else self.lm_head.weight
        return hidden @ head.t()

    @torch.no_grad()
    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, attend: Attend,
                capture_ids: list[int] = (), logit_rows: torch.Tensor | None = None):
        """Run flattened tokens ``input_ids [T]`` at absolute ``positions [T]``.

        Returns ``(logits, captured)``: logits for ``logit_rows`` (all rows when None), and the
        captured layer outputs concatenated in ``capture_ids`` order, ``[T, len(ids) * hidden]``
        (None when no ids are asked for).
        """
        x = self.model.embed_tokens(input_ids)
        cos_sin = self.rope.cos_sin(positions, x.dtype)
        last = self.config.num_hidden_layers - 1
        outputs: dict[int, torch.Tensor] = {}
        for i, layer in enumerate(self.model.layers):
            x = layer(x, cos_sin, attend, i)
            if i in capture_ids and i != last:
                outputs[i] = x
        x = self.model.norm(x)
        if last in capture_ids:
            outputs[last] = x
        captured = torch.cat([outputs[i] for i in capture_ids], dim=-1) if capture_ids else None
        rows = x if logit_rows is None else x[logit_rows]
        return self.logits(rows), captured
