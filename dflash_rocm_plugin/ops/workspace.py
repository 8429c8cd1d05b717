"""Split-KV scratch space: fp32 partial outputs and log-sum-exps of each split.

Hosts own theirs: they size one buffer with ``ops.workspace_floats`` at start-up and pass it to
every call, so captured CUDA/HIP graphs never allocate.  Callers that pass none (demos,
benchmarks, tests) get a per-device buffer grown on demand; growing inside a graph capture would
bake a temporary allocation into the graph, so it is refused with an error that says what to pass.
"""

from __future__ import annotations

import threading

import torch

# The most KV splits one launch may use: the width of the split merge, and the scratch bound.  A batch-1
# decode of a 2-KV-head layer (Qwen3.5 / Qwen3-Next, Gemma-4 global) runs 2 programs per split.
MAX_SPLITS = 64

_lock = threading.Lock()
_buffers: dict[torch.device, torch.Tensor] = {}
# A graph captured earlier keeps the address of the buffer it launched with, so a
# buffer that is outgrown is kept alive rather than freed.
_retired: list[torch.Tensor] = []


def elements(num_splits: int, num_tokens: int, num_q_heads: int, head_dim: int) -> int:
    return num_splits * num_tokens * num_q_heads * (head_dim + 1)


def _capturing(device: torch.device) -> bool:
    return device.type == "cuda" and torch.cuda.is_current_stream_capturing()


def _get(device: torch.device, numel: int) -> torch.Tensor:
    with _lock:
        buf = _buffers.get(device)
        if buf is None or buf.numel() < numel:
            if _capturing(device):
                raise RuntimeError(
                    f"split-KV workspace of {numel} floats is needed inside a graph capture but none was "
                    "passed: allocate ops.workspace_floats(...) float32 elements once, before capture, and "
                    "pass them as paged_attention(..., workspace=)")
            if buf is not None:
                _retired.append(buf)
                numel = max(numel, 2 * buf.numel())  # grow geometrically: few retired buffers
            buf = torch.empty(numel, dtype=torch.float32, device=device)
            _buffers[device] = buf
        return buf


def scratch(device: torch.device, num_splits: int, num_tokens: int, num_q_heads: int, head_dim: int,
            given: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(out, lse): flat float32 tensors starting where the partial outputs [S, T, H, D] and
    log-sum-exps [S, T, H] lie, contiguous (the kernels take their strides)."""
    n_out = num_splits * num_tokens * num_q_heads * head_dim
    n_lse = num_splits * num_tokens * num_q_heads
    if given is not None:
        if given.numel() < n_out + n_lse:
            raise ValueError(
                f"workspace holds {given.numel()} floats; this launch ({num_splits} KV splits x {num_tokens} "
                f"tokens) needs {n_out + n_lse}: size it with ops.workspace_floats(...) for the largest "
                "number of sequences the caller runs")
        buf = given
    else:
        buf = _get(device, n_out + n_lse)
    return buf, buf[n_out:]


class LaunchScratch:
    """``scratch`` for one prepared launch: its views, built again only when the buffer under them
    is another (a repeat call would otherwise pay a tensor view per call)."""

    __slots__ = ("shape", "_base", "_address", "_views")

    def __init__(self, num_splits: int, num_tokens: int, num_q_heads: int, head_dim: int):
        self.shape = (num_splits, num_tokens, num_q_heads, head_dim)
        self._base = self._address = self._views = None

    def views(self, device: torch.device, given: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        base = given if given is not None else _buffers.get(device)
        # The same buffer object at the same address: it was large enough for these views before
        # (a given buffer of another size is another call key; the own one is replaced, never shrunk).
        if base is not None and base is self._base and base.data_ptr() == self._address:
            return self._views
        views = scratch(device, *self.shape, given)
        self._base, self._address, self._views = views[0], views[0].data_ptr(), views
        return views
