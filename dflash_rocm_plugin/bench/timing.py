"""Device timing: CUDA-graph replay and event medians, and the device-to-device copy ceiling.

Every number is a median.  ``graph_us`` captures enough back-to-back calls (rotating over the
input copies) to run for a few milliseconds and times replays, which removes host launch gaps;
``eager_us`` times single launches with events, host overhead included; ``flushed_us`` times one
call after the caches have been overwritten, as a call that follows other layers' work meets them.
"""

from __future__ import annotations

import statistics

import torch


def _events_ms(fn, reps: int) -> list[float]:
    times = []
    for _ in range(reps):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return times


def eager_us(calls, reps: int = 30) -> float:
    """Median time of one call, launched eagerly (host launch cost included)."""
    i = [0]

    def one():
        calls[i[0] % len(calls)]()
        i[0] += 1

    for _ in range(3):
        one()
    torch.cuda.synchronize()
    return statistics.median(_events_ms(one, reps)) * 1e3


# Bytes overwritten before each flushed call: several times the largest last-level cache in use
# (H200 L2 60 MB; MI300X / MI355X Infinity Cache 256 MB).
FLUSH_BYTES = 1 << 30
# GPU clock cycles the stream idles after a flush (~0.5 ms at 2 GHz): longer than any host path of a call.
HOLD_CYCLES = 1_000_000


def flushed_us(calls, reps: int = 15, flush_bytes: int = FLUSH_BYTES) -> float:
    """Median time of one call with L2 (and AMD's Infinity Cache) flushed just before it.

    The flush (and a short hold) is queued ahead of the call on the same stream, so the host's launch
    of the call overlaps it and the events see the kernel's own time from cold caches.
    """
    scratch = torch.empty(flush_bytes // 4, dtype=torch.float32, device="cuda")
    i = [0]

    def one():
        calls[i[0] % len(calls)]()
        i[0] += 1

    one()
    times = []
    for _ in range(reps):
        scratch.zero_()
        # The GPU then waits ~0.5 ms more, so the host has queued the call (and its events) before
        # the stream reaches it: the events see the kernel, not a host that is slower than the flush.
        if hasattr(torch.cuda, "_sleep"):
            torch.cuda._sleep(HOLD_CYCLES)
        times += _events_ms(one, 1)
    del scratch
    return statistics.median(times) * 1e3


def graph_us(calls, target_ms: float = 4.0, reps: int = 15, max_calls: int = 400) -> float:
    """Median per-call time of a captured graph of back-to-back calls."""
    for c in calls:
        c()
    torch.cuda.synchronize()
    est_ms = statistics.median(_events_ms(calls[0], 5))
    n = max(len(calls), min(max_calls, int(target_ms / max(est_ms, 1e-3)) + 1))
    n = -(-n // len(calls)) * len(calls)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream):
        with torch.cuda.graph(graph, stream=stream):
            for j in range(n):
                calls[j % len(calls)]()
    torch.cuda.current_stream().wait_stream(stream)
    graph.replay()
    torch.cuda.synchronize()
    times = _events_ms(graph.replay, reps)
    del graph
    return statistics.median(times) * 1e3 / n


def copy_ceiling_tbs(device, nbytes: int = 4 << 30) -> float:
    """Device-to-device copy bandwidth (bytes read + bytes written per second), in TB/s."""
    src = torch.randn(nbytes // 4, device=device)
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    torch.cuda.synchronize()
    ms = statistics.median(_events_ms(lambda: dst.copy_(src), 20))
    del src, dst
    torch.cuda.empty_cache()
    return 2 * nbytes / (ms * 1e-3) / 1e12
