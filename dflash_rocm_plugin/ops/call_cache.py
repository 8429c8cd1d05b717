"""Prepared ``paged_attention`` launches, cached by exactly what they depend on.

Hosts run attention eagerly once per layer (vLLM's piecewise-graph prefill, SGLang's extend), so
the checks and the launch choice would otherwise be paid 36-64 times a step for one set of
shapes.  Everything a call's validation and launch read, except the data itself, is in its key:
each tensor's type, shape, strides, dtype and device, every scalar argument with its type, the
backend name, the architecture, the tuned table in force and the ``forced`` launch fields.  A key
seen before therefore passed every check before and chooses the same launch: shapes alone decide,
so graph capture and replay still run identical kernels.

What may change at run time is read per call, outside the key: ``TRITON_INTERPRET`` for CPU
tensors, the backend policy, whether AITER is still usable, the split-KV workspace buffer.
Platform facts (multiprocessor count, shared memory) and the switches read once per process
(``DFLASH_ROCM_FP8_QK``) are process constants.
"""

from __future__ import annotations

import threading

import torch

from dflash_rocm_plugin.ops import _runtime, extend_launch, launch_config, tuned

# Distinct shape sets alive at once: a step has a few (one per attention kind and batch shape),
# prefill adds one per token count.  Oldest first out, so a long run cannot grow it.
MAX_ENTRIES = 256

_entries: dict = {}
_lock = threading.Lock()  # for inserts and evictions; lookups are single dict reads
# The tuned tables named (by id) in keys, kept alive so that no later table can reuse an id.
_tables: dict = {}
_Tensor = torch.Tensor


def _meta(t):
    """What the checks and the launch read of an optional tensor argument; None when absent.
    Anything but a plain tensor (a subclass, another type) is not keyed: ``KeyError``."""
    if t is None:
        return None
    if type(t) is not _Tensor:
        raise KeyError
    return t.shape, t.stride(), t.dtype, t.device


def _scalar(v):
    """A scalar with its type (``True`` must not match ``1``); None when absent."""
    if v is None:
        return None
    cls = type(v)
    if cls is not int and cls is not float and cls is not str:
        raise KeyError
    return cls, v


def key(q, k_cache, v_cache, block_table, seq_lens, query_start_loc, sinks, k_scale, v_scale, out, workspace,
        causal, scale, sliding_window, softcap, max_query_len, num_kv_splits, backend, new_keys=None,
        new_values=None):
    """The call's key, or None when one of its arguments is not of a keyed kind (checked in full)."""
    T = _Tensor
    if (type(q) is not T or type(k_cache) is not T or type(v_cache) is not T or type(block_table) is not T
            or type(seq_lens) is not T or type(query_start_loc) is not T
            or (causal is not True and causal is not False)):
        return None
    try:
        device = q.device
        arch = _runtime.gpu_arch(device.index)
        table = tuned.current(arch)
        return (
            q.shape, q.stride(), q.dtype, device,
            k_cache.shape, k_cache.stride(), k_cache.dtype, k_cache.device,
            v_cache.shape, v_cache.stride(), v_cache.dtype, v_cache.device,
            block_table.shape, block_table.stride(), block_table.dtype, block_table.device,
            seq_lens.shape, seq_lens.stride(), seq_lens.dtype, seq_lens.device,
            query_start_loc.shape, query_start_loc.stride(), query_start_loc.dtype, query_start_loc.device,
            _meta(sinks), _meta(k_scale), _meta(v_scale), _meta(out), _meta(workspace),
            causal, _scalar(scale), _scalar(sliding_window), _scalar(softcap), _scalar(max_query_len),
            _scalar(num_kv_splits), _scalar(backend), _meta(new_keys), _meta(new_values),
            extend_launch.forced_extend_fields(), arch, id(table), launch_config.forced_fields(),
        )
    except KeyError:
        return None


def get(k):
    return None if k is None else _entries.get(k)


def put(k, entry) -> None:
    if k is None:
        return
    table = tuned.current(k[-3])
    if id(table) != k[-2]:
        return  # the tuned files changed during the call
    with _lock:
        if len(_tables) >= MAX_ENTRIES:
            _entries.clear()
            _tables.clear()
        _tables[id(table)] = table
        while len(_entries) >= MAX_ENTRIES:
            _entries.pop(next(iter(_entries)), None)
        _entries[k] = entry


def clear() -> None:
    with _lock:
        _entries.clear()
        _tables.clear()


def size() -> int:
    return len(_entries)
