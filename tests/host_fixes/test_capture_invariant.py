"""The graph-capture invariant carried from the ROCm DeepSeek-V4 MTP work, checked on the ops layer.

That work had to build the target-verify metadata eagerly, outside the captured region: a
CUDA/HIP graph replays device work only, so a host sync or an allocation inside it either
breaks capture or bakes one step's values into every replay.  The plugin's rule: everything
host-side is prepared before capture, and the call a host makes inside a captured region -
``ops.paged_attention`` with ``out=`` and a caller-owned ``workspace=``, ``ops.write_kv_cache`` -
performs no host synchronisation and no allocation.  Proven here by recording every aten op
those calls issue (the Triton launches themselves are replaced by recorders, so only the ops
layer's own work is seen) over decode, causal verify, non-causal DFlash draft blocks and
forced split-KV launches; and the workspace refuses to grow while a capture is under way.
"""

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from dflash_rocm_plugin import ops
from dflash_rocm_plugin.ops import _runtime, workspace

FORBIDDEN = {"_local_scalar_dense", "item", "nonzero", "_to_copy", "to", "cpu", "tolist", "equal",
             "is_nonzero", "allclose", "masked_select", "unique", "_unique2"}
ALLOCATING = ("empty", "zeros", "ones", "full", "rand", "arange", "clone", "new_", "_like", "cat", "stack")


class Recorder(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(func.overloadpacket.__name__)
        return func(*args, **(kwargs or {}))


class _Launch:
    def __init__(self, log, name):
        self.log, self.name = log, name

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.log.append((self.name, grid))
        return launch


class _Kernels:
    def __init__(self, log):
        self.paged_attention_kernel = _Launch(log, "attention")
        self.merge_splits_kernel = _Launch(log, "merge")
        self.write_kv_cache_kernel = _Launch(log, "write")


@pytest.fixture
def launches(monkeypatch):
    log = []
    fake = _Kernels(log)
    monkeypatch.setattr(_runtime, "kernels", lambda: (fake, fake))
    return log


def _case(q_lens, seq_lens, hq=4, hkv=2, d=16, bs=8, blocks=16):
    q = torch.randn(sum(q_lens), hq, d)
    cache = torch.randn(blocks, bs, hkv, d)
    table = torch.arange(blocks, dtype=torch.int32).reshape(len(q_lens), -1)
    sl = torch.tensor(seq_lens, dtype=torch.int32)
    qsl = torch.tensor([0] + list(torch.tensor(q_lens).cumsum(0)), dtype=torch.int32)
    return q, cache, cache.clone(), table, sl, qsl


def _assert_capture_safe(recorded):
    bad = [op for op in recorded if op in FORBIDDEN or any(p in op for p in ALLOCATING)]
    assert not bad, f"host sync or allocation inside a capturable call: {bad} (all ops: {recorded})"


@pytest.mark.parametrize("q_lens,seq_lens,causal,splits", [
    ([1, 1], [37, 9], True, None),             # decode
    ([16, 16], [40, 23], False, None),         # DFlash draft block: non-causal
    ([16, 16], [40, 23], True, None),          # target verify: causal
    ([16, 16], [64, 60], False, 4),            # split-KV through the caller's workspace
    ([1, 1], [64, 3], True, 8),
])
def test_attention_launch_is_capture_safe(launches, q_lens, seq_lens, causal, splits):
    q, k, v, table, sl, qsl = _case(q_lens, seq_lens)
    out = torch.empty_like(q)
    ws = torch.empty(32 * q.shape[0] * q.shape[1] * (q.shape[2] + 1))  # room for 32 splits
    with Recorder() as rec:
        ops.paged_attention(q, k, v, table, sl, qsl, causal=causal, out=out,
                            max_query_len=max(q_lens), num_kv_splits=splits, workspace=ws)
    _assert_capture_safe(rec.ops)
    assert launches and launches[0][0] == "attention"
    if splits:
        assert launches[-1][0] == "merge"


def test_kv_write_is_capture_safe(launches):
    key = torch.randn(5, 2, 16)
    cache = torch.zeros(4, 8, 2, 16)
    v_cache = cache.clone()
    slots = torch.tensor([3, 9, -1, 17, 30], dtype=torch.int32)
    with Recorder() as rec:
        ops.write_kv_cache(key, key, cache, v_cache, slots)
    _assert_capture_safe(rec.ops)
    assert launches == [("write", (5,))]


def test_recorder_catches_a_sync_and_an_allocation():
    with Recorder() as rec:
        t = torch.ones(3)
        int(t.sum())
    with pytest.raises(AssertionError, match="host sync or allocation"):
        _assert_capture_safe(rec.ops)


def test_workspace_refuses_to_grow_inside_capture(monkeypatch):
    device = torch.device("cpu")
    monkeypatch.setattr(workspace, "_buffers", {})
    monkeypatch.setattr(workspace, "_capturing", lambda dev: True)
    with pytest.raises(RuntimeError, match=r"pass them as paged_attention\(\.\.\., workspace=\)"):
        workspace.scratch(device, 4, 32, 4, 16)
    given = torch.empty(workspace.elements(4, 32, 4, 16))
    out, lse = workspace.scratch(device, 4, 32, 4, 16, given)  # the caller's: views only
    assert out.untyped_storage().data_ptr() == lse.untyped_storage().data_ptr() == given.untyped_storage().data_ptr()
    assert lse.storage_offset() == 4 * 32 * 4 * 16 and workspace._buffers == {}
