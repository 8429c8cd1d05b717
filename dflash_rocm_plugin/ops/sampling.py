"""``greedy_sample``: exactly ``torch.argmax(logits, -1)`` as int32, graph-safe into ``out``."""

from __future__ import annotations

import torch

from dflash_rocm_plugin.ops import _validate

LOGIT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def greedy_sample(logits: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """Token ids ``[num_rows]`` int32, equal to ``torch.argmax(logits, dim=-1)`` on every row
    (NaN rows included: torch returns the first NaN's index)."""
    _validate.tensor("logits", logits, ndim=2, dtypes=LOGIT_DTYPES)
    if out is not None:
        _validate.tensor("out", out, ndim=1, dtypes=(torch.int32,), device=logits.device)
        if out.shape[0] != logits.shape[0]:
            raise ValueError(f"out has {out.shape[0]} rows, logits has {logits.shape[0]}")
    ids = torch.argmax(logits, dim=-1)
    if out is None:
        return ids.to(torch.int32)
    out.copy_(ids)
    return out
