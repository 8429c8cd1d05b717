"""``greedy_sample``: exactly ``torch.argmax(logits, -1)`` as int32, graph-safe into ``out``."""

from __future__ import annotations

import torch

from dflash_rocm_plugin.ops import _validate, backends

LOGIT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def greedy_sample(logits: torch.Tensor, out: torch.Tensor | None = None, *,
                  backend: str | None = None) -> torch.Tensor:
    """Token ids ``[num_rows]`` int32, equal to ``torch.argmax(logits, dim=-1)`` on every row:
    ties and all -inf rows give the first index, a row holding NaN gives its first NaN's index.

    Args:
        logits: ``[num_rows, vocab]`` float16/bfloat16/float32, any strides.
        out: optional int32 ``[num_rows]``, written in place and returned.
        backend: ``"auto"``, ``"torch"`` or ``"aiter"``; None takes the default from
            ``DFLASH_ROCM_GREEDY_IMPL``, read once per process (``ops.backends``).

    No host syncs, so it can be captured in a CUDA/HIP graph.  The torch path needs one int64
    ``[num_rows]`` temporary (``torch.argmax`` only writes int64; its ``out=`` refuses int32),
    taken from the caching allocator, which is legal inside a capture.  A shared preallocated
    scratch would avoid it but would race between streams.  The ``aiter`` backend (ROCm) writes
    AITER's int32 ids straight into ``out`` instead; see ``ops.backends.aiter`` for its one
    difference on rows that mix NaN and numbers.
    """
    _validate.tensor("logits", logits, ndim=2, dtypes=LOGIT_DTYPES)
    if logits.shape[1] == 0:
        raise ValueError("logits has an empty vocabulary dimension (shape [num_rows, 0])")
    if out is not None:
        _validate.tensor("out", out, ndim=1, dtypes=(torch.int32,), device=logits.device)
        if out.shape[0] != logits.shape[0]:
            raise ValueError(f"out has {out.shape[0]} rows, logits has {logits.shape[0]}")
    backends.policy(backend, backends.GREEDY_ENV, backends.GREEDY_CHOICES)  # a bad name fails now
    if logits.shape[0] > 0:
        ids = backends.run_greedy(logits, out, backend)
        if ids is not None:
            return ids
    ids = torch.argmax(logits, dim=-1)
    if out is None:
        return ids.to(torch.int32)
    out.copy_(ids)
    return out
