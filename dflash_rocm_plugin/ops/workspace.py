"""Split-KV scratch space: fp32 partial outputs and log-sum-exps of each split.

Hosts own theirs: they size one buffer with ``ops.workspace_floats`` at start-up and pass it to
every call, so captured CUDA/HIP graphs never allocate.  Callers that pass none (demos,
benchmarks, tests) get a per-device buffer grown on demand; growing inside a graph capture would
bake a temporary allocation into the graph, so it is refused with an error that says what to pass.

Beside each scratch buffer the plugin keeps the merge counters of the fused split merge (one int32
per query tile and KV head): zero before every launch, because the kernel's merging program sets
its own back to zero.  They are the plugin's, not in the caller's buffer, so no caller has to
zero anything; keyed by the buffer, so calls on two streams with their own workspaces never share
one.  Where a graph capture would need them grown, ``merge_counters`` answers None and the call
merges in a second launch instead.
"""

from __future__ import annotations

import threading

import torch

from dflash_rocm_plugin.ops import _runtime

# The most KV splits one launch may use: the width of the split merge, and the scratch bound.
MAX_SPLITS = 32

_lock = threading.Lock()
_buffers: dict[torch.device, torch.Tensor] = {}
# A graph captured earlier keeps the address of the buffer it launched with, so a
# buffer that is outgrown is kept alive rather than freed.
_retired: list[torch.Tensor] = []
# (device, scratch buffer address) -> zeroed int32 merge counters.
_counters: dict[tuple, torch.Tensor] = {}
# Fewest counters allocated at once: a batch of 256 sequences x 8 KV heads needs 4 096.
MIN_COUNTERS = 1 << 16


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



def merge_counters(device: torch.device, scratch_buffer: torch.Tensor, needed: int) -> torch.Tensor | None:
    """At least ``needed`` zeroed int32 counters for launches using ``scratch_buffer``, or None
    inside a graph capture that would need them allocated (the call then merges separately)."""
    key = (device, scratch_buffer.data_ptr())
    counters = _counters.get(key)
    if counters is not None and counters.numel() >= needed:
        return counters
    with _lock:
        counters = _counters.get(key)
        if counters is None or counters.numel() < needed:
            if _capturing(device):
                return None
            if counters is not None:
                _retired.append(counters)  # a captured graph may hold its address
            counters = torch.zeros(max(MIN_COUNTERS, _runtime.next_power_of_2(needed)), dtype=torch.int32, device=device)
            _counters[key] = counters
        return counters
