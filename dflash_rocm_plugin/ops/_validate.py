"""Argument checks that run before any launch: clear errors, no device syncs."""

from __future__ import annotations

import torch

from dflash_rocm_plugin.ops import support

ATTENTION_DTYPES = support.DTYPES
INDEX_DTYPES = (torch.int32,)


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
    problem = support.head_dim_problem(d)
    if problem:
        raise ValueError(f"{name}: {problem}")


def heads(name: str, num_q_heads: int, num_kv_heads: int) -> int:
    problem = support.heads_problem(num_q_heads, num_kv_heads)
    if problem:
        raise ValueError(f"{name}: {problem}")
    return num_q_heads // num_kv_heads


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


def kv_scales(k_scale, v_scale, cache_dtype, num_kv_heads: int, device) -> None:
    """K/V scales: None, or float32 of 1 / num_kv_heads elements on ``device``, for fp8 caches."""
    for name, value in (("k_scale", k_scale), ("v_scale", v_scale)):
        problem = support.kv_scale_problem(value, cache_dtype, num_kv_heads)
        if problem:
            raise ValueError(f"{name} {problem}")
        if value is not None:
            tensor(name, value, device=device)
