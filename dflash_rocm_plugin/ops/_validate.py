"""Argument checks that run before any launch: clear errors, no device syncs."""

from __future__ import annotations

import torch

ATTENTION_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
INDEX_DTYPES = (torch.int32,)
MIN_HEAD_DIM, MAX_HEAD_DIM = 16, 256
MAX_GQA_GROUP = 64


def _names(dtypes) -> str:
    return ", ".join(str(d).replace("torch.", "") for d in dtypes)


def tensor(name: str, t, *, ndim: int | None = None, dtypes=None, device=None) -> None:
    if not isinstance(t, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if ndim is not None and t.dim() != ndim:
        raise ValueError(f"{name} must have {ndim} dimensions, got shape {tuple(t.shape)}")
    if dtypes is not None and t.dtype not in dtypes:
        raise ValueError(f"{name} has dtype {t.dtype}; supported: {_names(dtypes)}")
    if device is not None and t.device != device:
        raise ValueError(f"{name} is on {t.device} but q is on {device}; all tensors must share one device")


def head_dim(name: str, d: int) -> None:
    if not (MIN_HEAD_DIM <= d <= MAX_HEAD_DIM and d % 8 == 0):
        raise ValueError(
            f"{name} is {d}; supported head dims are multiples of 8 from {MIN_HEAD_DIM} to "
            f"{MAX_HEAD_DIM} (e.g. 64, 80, 96, 128, 192, 256)")


def heads(num_q_heads: int, num_kv_heads: int) -> int:
    if num_kv_heads < 1 or num_q_heads % num_kv_heads:
        raise ValueError(
            f"num_q_heads ({num_q_heads}) must be a multiple of the cache's num_kv_heads ({num_kv_heads})")
    group = num_q_heads // num_kv_heads
    if group > MAX_GQA_GROUP:
        raise ValueError(f"GQA group {group} is above the supported maximum {MAX_GQA_GROUP}")
    return group


def positive_float(name: str, v) -> float:
    try:
        f = float(v)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a positive number, got {v!r}") from None
    if not f > 0.0 or f != f or f == float("inf"):
        raise ValueError(f"{name} must be a positive finite number, got {v!r}")
    return f


def positive_int(name: str, v) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ValueError(f"{name} must be a positive int, got {v!r}")
    return v
