"""Every malformed argument is rejected with a ValueError naming it, before anything is launched.

The kernel modules are replaced with a tripwire, so a check that comes too late fails the test
instead of launching.
"""

from __future__ import annotations

import pytest
import torch

from dflash_rocm_plugin import ops
from dflash_rocm_plugin.ops import _runtime
from tests.core.cases import build


@pytest.fixture(autouse=True)
def no_launch(monkeypatch):
    def tripwire():
        raise AssertionError("a kernel was reached before argument validation finished")
    monkeypatch.setattr(_runtime, "kernels", tripwire)


FP8 = dict(k_cache=torch.zeros(6, 16, 2, 32).to(torch.float8_e4m3fn),
           v_cache=torch.zeros(6, 16, 2, 32).to(torch.float8_e4m3fn))


def good():
    c = build([20, 9], [16, 1], num_q_heads=4, num_kv_heads=2, head_dim=32)
    return dict(q=c.q, k_cache=c.k_cache, v_cache=c.v_cache, block_table=c.block_table,
                seq_lens=c.seq_lens, query_start_loc=c.query_start_loc)


def call(**over):
    a = good()
    kw = {k: over.pop(k) for k in list(over) if k in ("causal", "scale", "sliding_window", "softcap", "out",
                                                        "max_query_len", "num_kv_splits", "workspace",
                                                        "backend", "sinks", "k_scale", "v_scale")}
    a.update(over)
    kw.setdefault("causal", True)
    return ops.paged_attention(a["q"], a["k_cache"], a["v_cache"], a["block_table"], a["seq_lens"],
                               a["query_start_loc"], **kw)


BAD_ATTENTION = [
    ("q", dict(q=torch.zeros(3, 4)), "q must have 3 dimensions"),
    ("q", dict(q=torch.zeros(3, 4, 32, dtype=torch.float64)), "q has dtype torch.float64; supported: float16, bfloat16, float32"),
    ("q", dict(q=torch.zeros(3, 4, 36)), "(head_dim): head_dim 36 is not supported (multiples of 8 from 16 to 512"),
    ("q", dict(q=torch.zeros(3, 4, 520)), "head_dim 520 is not supported"),
    ("k_cache", dict(k_cache=torch.zeros(4, 16, 2, 32, dtype=torch.float16)), "k_cache has dtype torch.float16 and q has torch.float32: KV cache dtype torch.float16 differs from the model dtype"),
    ("k_cache", dict(k_cache=torch.zeros(4, 16, 2, 32, dtype=torch.int8), v_cache=torch.zeros(4, 16, 2, 32, dtype=torch.int8)),
     "KV cache dtype torch.int8 is not supported (supported: the model dtype, or fp8 float8_e4m3fn, float8_e4m3fnuz"),
    ("k_cache", dict(k_cache=torch.zeros(6, 16, 2, 32).to(torch.float8_e4m3fn)), "k_cache holds torch.float8_e4m3fn but v_cache torch.float32"),
    ("k_scale", dict(k_scale=torch.ones(1)), "k_scale a scale only applies to an fp8 cache"),
    ("k_scale", dict(k_scale=torch.ones(3), **FP8), "k_scale has 3 elements; expected 1 (per tensor) or num_kv_heads = 2"),
    ("v_scale", dict(v_scale=torch.ones(1, dtype=torch.float16), **FP8), "v_scale must be a float32 tensor (got torch.float16)"),
    ("v_scale", dict(v_scale=2.0, **FP8), "v_scale must be a float32 tensor (got float)"),
    ("sinks", dict(sinks=torch.zeros(3)), "sinks has 3 elements; expected one per query head (4)"),
    ("sinks", dict(sinks=torch.zeros(4, dtype=torch.int32)), "sinks has dtype torch.int32"),
    ("sinks", dict(sinks=[0.0] * 4), "sinks must be a torch.Tensor"),
    ("v_cache", dict(v_cache=torch.zeros(4, 16, 2)), "v_cache must have 4 dimensions"),
    ("v_cache", dict(v_cache=torch.zeros(4, 16, 1, 32)), "differ in shape"),
    ("k_cache", dict(k_cache=torch.zeros(4, 16, 3, 32), v_cache=torch.zeros(4, 16, 3, 32)), "k_cache.shape[2] (num_kv_heads): num_q_heads (4) must be a multiple of num_kv_heads (3)"),
    ("k_cache", dict(k_cache=torch.zeros(4, 16, 2, 64), v_cache=torch.zeros(4, 16, 2, 64)), "k_cache head_dim 64 differs from q head_dim 32"),
    ("seq_lens", dict(seq_lens=torch.tensor([20, 9])), "seq_lens has dtype torch.int64; supported: int32"),
    ("seq_lens", dict(seq_lens=torch.tensor([[20, 9]], dtype=torch.int32)), "seq_lens must have 1 dimensions"),
    ("query_start_loc", dict(query_start_loc=torch.tensor([0, 16], dtype=torch.int32)), "query_start_loc must have num_seqs + 1 = 3 entries"),
    ("query_start_loc", dict(query_start_loc=torch.tensor([0, 16, 17], dtype=torch.int64)), "query_start_loc has dtype torch.int64"),
    ("block_table", dict(block_table=torch.zeros(2, 4, dtype=torch.int64)), "block_table has dtype torch.int64"),
    ("block_table", dict(block_table=torch.zeros(1, 4, dtype=torch.int32)), "block_table has 1 rows for 2 sequences"),
    ("block_table", dict(block_table=torch.zeros(2, dtype=torch.int32)), "block_table must have 2 dimensions"),
    ("causal", dict(causal=1), "causal must be a bool"),
    ("scale", dict(scale=-1.0), "scale must be a positive finite number"),
    ("scale", dict(scale="big"), "scale must be a positive number"),
    ("sliding_window", dict(sliding_window=0), "sliding_window must be a positive int"),
    ("sliding_window", dict(sliding_window=2.5), "sliding_window must be a positive int"),
    ("softcap", dict(softcap=0.0), "softcap must be a positive finite number"),
    ("out", dict(out=torch.zeros(17, 4, 32, dtype=torch.float16)), "out has dtype torch.float16"),
    ("out", dict(out=torch.zeros(16, 4, 32)), "out has shape (16, 4, 32), expected q's (17, 4, 32)"),
    ("max_query_len", dict(max_query_len=0), "max_query_len must be a positive int"),
    ("num_kv_splits", dict(num_kv_splits=0), "num_kv_splits must be a positive int"),
    ("num_kv_splits", dict(num_kv_splits=1000), "num_kv_splits must be <= 64"),
    ("q", dict(q=[1, 2, 3]), "q must be a torch.Tensor"),
    ("workspace", dict(workspace=torch.zeros(4, 4)), "workspace must have 1 dimensions"),
    ("workspace", dict(workspace=torch.zeros(64, dtype=torch.float16)), "workspace has dtype torch.float16"),
    ("workspace", dict(workspace=torch.zeros(128)[::2]), "workspace must be a contiguous float32 tensor"),
    ("workspace", dict(workspace=torch.zeros(8), num_kv_splits=4), "workspace holds 8 floats; this launch"),
    ("backend", dict(backend="cuda"), "backend='cuda' is not one of: auto, triton, aiter"),
]


@pytest.mark.parametrize("arg,override,message", BAD_ATTENTION, ids=[f"{a}-{i}" for i, (a, _, _) in enumerate(BAD_ATTENTION)])
def test_paged_attention_rejects(arg, override, message):
    with pytest.raises(ValueError) as e:
        call(**override)
    assert message in str(e.value)
    assert arg.split("_cache")[0] in str(e.value) or arg in str(e.value)


def test_cpu_tensors_without_interpreter_get_a_clear_error(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(ValueError, match="TRITON_INTERPRET=1"):
        call()


def kv_args(**over):
    a = dict(key=torch.zeros(5, 2, 32), value=torch.zeros(5, 2, 32), k_cache=torch.zeros(4, 16, 2, 32),
             v_cache=torch.zeros(4, 16, 2, 32), slot_mapping=torch.arange(5))
    a.update(over)
    return a


BAD_WRITE = [
    ("key", dict(key=torch.zeros(5, 64)), "key must have 3 dimensions"),
    ("value", dict(value=torch.zeros(5, 2, 32, dtype=torch.float16)), "value has dtype torch.float16"),
    ("k_cache", dict(k_cache=torch.zeros(4, 16, 2, 32, dtype=torch.float16)), "k_cache has dtype torch.float16"),
    ("slot_mapping", dict(slot_mapping=torch.arange(5, dtype=torch.float32)), "slot_mapping has dtype torch.float32; supported: int32, int64"),
    ("slot_mapping", dict(slot_mapping=torch.arange(6)), "slot_mapping has 6 entries but key has only 5 tokens"),
    ("key", dict(key=torch.zeros(5, 4, 32), value=torch.zeros(5, 4, 32)), "num_kv_heads, head_dim"),
    ("value", dict(value=torch.zeros(5, 2, 16)), "differ in shape"),
    ("v_cache", dict(v_cache=torch.zeros(5, 16, 2, 32)), "differ in shape"),
    ("k_cache", dict(k_cache=torch.zeros(4, 16, 2, 32, dtype=torch.int8)), "k_cache has dtype torch.int8; supported: float32, float8_e4m3fn"),
    ("v_cache", dict(k_cache=torch.zeros(4, 16, 2, 32).to(torch.float8_e4m3fn)), "v_cache has dtype torch.float32; supported: float8_e4m3fn"),
    ("k_scale", dict(k_scale=torch.ones(1)), "k_scale a scale only applies to an fp8 cache"),
    ("v_scale", dict(k_cache=torch.zeros(4, 16, 2, 32).to(torch.float8_e4m3fnuz),
                     v_cache=torch.zeros(4, 16, 2, 32).to(torch.float8_e4m3fnuz), v_scale=torch.ones(5)),
     "v_scale has 5 elements; expected 1 (per tensor) or num_kv_heads = 2"),
]


@pytest.mark.parametrize("arg,override,message", BAD_WRITE, ids=[f"{a}-{i}" for i, (a, _, _) in enumerate(BAD_WRITE)])
def test_write_kv_cache_rejects(arg, override, message):
    with pytest.raises(ValueError) as e:
        ops.write_kv_cache(**kv_args(**override))
    assert message in str(e.value)
    assert arg in str(e.value)
