"""Split-KV scratch space: allocated before graph capture, reused after.

The split path needs fp32 partial outputs and log-sum-exps.  Hosts reserve the
largest size they will launch with (``reserve``) during start-up; later calls
only take views.  Growing inside a CUDA/HIP graph capture would bake a
temporary allocation into the graph, so it is refused with an error that says
what to reserve.
"""

from __future__ import annotations

import threading

import torch

_lock = threading.Lock()
_buffers: dict[torch.device, torch.Tensor] = {}
# A graph captured earlier keeps the address of the buffer it launched with, so a
# buffer that is outgrown is kept alive rather than freed.
_retired: list[torch.Tensor] = []


def elements(num_splits: int, num_tokens: int, num_q_heads: int, head_dim: int) -> int:
    return num_splits * num_tokens * num_q_heads * (head_dim + 1)


def _capturing(device: torch.device) -> bool:
    return device.type == "cuda" and torch.cuda.is_current_stream_capturing()


def reserve(device, num_tokens: int, num_q_heads: int, head_dim: int, num_splits: int = 32) -> None:
    """Make sure split-KV launches up to this size never allocate."""
    _get(torch.device(device), elements(num_splits, num_tokens, num_q_heads, head_dim))


def _get(device: torch.device, numel: int) -> torch.Tensor:
    with _lock:
        buf = _buffers.get(device)
        if buf is None or buf.numel() < numel:
            if _capturing(device):
                raise RuntimeError(
                    f"split-KV workspace of {numel} floats is needed inside a graph capture but only "
                    f"{0 if buf is None else buf.numel()} are reserved; call "
                    "dflash_rocm_plugin.ops.reserve_workspace(...) with the largest batch before capture")
            if buf is not None:
                _retired.append(buf)
                numel = max(numel, 2 * buf.numel())  # grow geometrically: few retired buffers
            buf = torch.empty(numel, dtype=torch.float32, device=device)
            _buffers[device] = buf
        return buf


def partials(device: torch.device, num_splits: int, num_tokens: int, num_q_heads: int,
             head_dim: int, given: torch.Tensor | None = None):
    """Views (out [S, T, H, D], lse [S, T, H]) over the workspace."""
    n_out = num_splits * num_tokens * num_q_heads * head_dim
    n_lse = num_splits * num_tokens * num_q_heads
    if given is not None:
        if given.dtype != torch.float32 or given.device != device or not given.is_contiguous():
            raise ValueError("workspace must be a contiguous float32 tensor on q's device")
        if given.numel() < n_out + n_lse:
            raise ValueError(f"workspace holds {given.numel()} floats; this launch needs {n_out + n_lse}")
        buf = given
    else:
        buf = _get(device, n_out + n_lse)
    out = buf[:n_out].view(num_splits, num_tokens, num_q_heads, head_dim)
    lse = buf[n_out:n_out + n_lse].view(num_splits, num_tokens, num_q_heads)
    return out, lse
