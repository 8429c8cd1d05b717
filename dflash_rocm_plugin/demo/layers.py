"""Qwen3 building blocks shared by the target and the DFlash draft.

Parameter names follow Hugging Face's Qwen3 modules so published state dicts load unchanged.
Attention itself is a callback ``attend(layer, q, k, v) -> out`` on flattened tokens
(``[T, heads, head_dim]``): the demo passes one that runs ``dflash_rocm_plugin.ops`` over a paged
cache; distillation and tests pass a dense one.
"""

from __future__ import annotations

from typing import Callable, Protocol

import torch
from torch import nn
from torch.nn import functional as F


class Attend(Protocol):
    def __call__(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor: ...


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # float32 statistics, as Qwen3 was trained with.
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x32.to(x.dtype)


class Rope:
    """Neox-style rotary embedding at absolute positions."""

    def __init__(self, head_dim: int, theta: float):
        # on the CPU explicitly: models are built on the meta device before loading
        exps = torch.arange(0, head_dim, 2, dtype=torch.int64, device="cpu").float() / head_dim
        self.inv_freq = 1.0 / (theta ** exps)

    def cos_sin(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        freqs = positions.float()[:, None] * self.inv_freq.to(positions.device)[None, :]
        emb = torch.cat([freqs, freqs], dim=-1)
        return emb.cos().to(dtype)[:, None, :], emb.sin().to(dtype)[:, None, :]

    @staticmethod
    def apply(x: torch.Tensor, cos_sin: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        cos, sin = cos_sin
        half = x.shape[-1] // 2
        rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
        return x * cos + rotated * sin


class Attention(nn.Module):
    def __init__(self, hidden: int, heads: int, kv_heads: int, head_dim: int, eps: float, bias: bool):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, head_dim
        self.q_proj = nn.Linear(hidden, heads * head_dim, bias=bias)
        self.k_proj = nn.Linear(hidden, kv_heads * head_dim, bias=bias)
        self.v_proj = nn.Linear(hidden, kv_heads * head_dim, bias=bias)
        self.o_proj = nn.Linear(heads * head_dim, hidden, bias=bias)
        self.q_norm = RMSNorm(head_dim, eps)
        self.k_norm = RMSNorm(head_dim, eps)

    def kv(self, x: torch.Tensor, cos_sin) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys (k_norm, then RoPE) and values of tokens ``x [T, hidden]``."""
        k = self.k_norm(self.k_proj(x).view(-1, self.kv_heads, self.head_dim))
        v = self.v_proj(x).view(-1, self.kv_heads, self.head_dim)
        return Rope.apply(k, cos_sin), v

    def forward(self, x: torch.Tensor, cos_sin, attend: Callable, layer: int) -> torch.Tensor:
        q = Rope.apply(self.q_norm(self.q_proj(x).view(-1, self.heads, self.head_dim)), cos_sin)
        k, v = self.kv(x, cos_sin)
        out = attend(layer, q, k, v)
        return self.o_proj(out.reshape(x.shape[0], -1))


class MLP(nn.Module):
    def __init__(self, hidden: int, intermediate: int):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, intermediate, bias=False)
        self.up_proj = nn.Linear(hidden, intermediate, bias=False)
        self.down_proj = nn.Linear(intermediate, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    """Pre-norm Qwen3 decoder layer (GQA attention with q/k norms, SwiGLU MLP)."""

    def __init__(self, cfg):
        super().__init__()
        self.self_attn = Attention(cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads,
                                   cfg.head_dim, cfg.rms_norm_eps, cfg.attention_bias)
        self.mlp = MLP(cfg.hidden_size, cfg.intermediate_size)
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def forward(self, x: torch.Tensor, cos_sin, attend: Callable, layer: int) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos_sin, attend, layer)
        return x + self.mlp(self.post_attention_layernorm(x))
