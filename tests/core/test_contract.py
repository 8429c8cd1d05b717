"""The ops contract as its callers use it: support answers, the launch description, the
caller-owned workspace.

* ``supports`` answers None for what the kernels serve and names every reason otherwise; the
  argument checks of ``paged_attention`` give the same reasons.
* ``describe_launch`` is the launch the Triton backend runs for that call (no second chooser).
* ``workspace_floats(N, L)`` covers every call of up to N sequences and L keys, whatever the query
  lengths (GQA groups that do not divide a tile included), on the H200 and the AMD parts alike, and
  whatever KV splits tuned launch files in force set; a call given that workspace never touches the
  fallback buffer.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
import torch
from hypothesis import example, given, settings, strategies as st

from dflash_rocm_plugin import __version__, ops
from dflash_rocm_plugin.ops import _runtime, tuned, workspace
from dflash_rocm_plugin.ops.backends import triton as triton_backend
from tests.core.cases import build, check_against_reference, pin_gpu
from tests.core.conftest import clear_tuned_caches

DEVICES = {"H200": ("sm_90", 227 * 1024, 132), "MI300X": ("gfx942", 64 * 1024, 304),
           "MI355X": ("gfx950", 160 * 1024, 256)}


def pin(monkeypatch, name):
    pin_gpu(monkeypatch, *DEVICES[name])


def test_supported_layers_have_no_reason():
    for head_dim in (64, 128, 256):
        for dtype in ops.DTYPES:
            spec = ops.AttentionSpec(head_dim=head_dim, dtype=dtype, num_q_heads=32, num_kv_heads=8,
                                     sliding_window=128, softcap=30.0)
            assert ops.supports(spec) is None


@pytest.mark.parametrize("fields, reason", [
    (dict(head_dim=12), "head_dim 12 is not supported (multiples of 8 from 16 to 512"),
    (dict(dtype=torch.float64), "dtype torch.float64 is not supported (supported: float16, bfloat16, float32)"),
    (dict(kv_cache_dtype=torch.float16), "KV cache dtype torch.float16 differs from the model dtype"),
    (dict(kv_cache_dtype=torch.int8), "KV cache dtype torch.int8 is not supported"),
    (dict(num_q_heads=6, num_kv_heads=4), "num_q_heads (6) must be a multiple of num_kv_heads (4)"),
    (dict(num_q_heads=256, num_kv_heads=2), "GQA group 128 is above the supported maximum 64"),
    (dict(v_head_dim=64), "v_head_dim 64 differs from head_dim 128"),
    (dict(features=frozenset({"alibi", "mla"})), "ALiBi position biases, multi-head latent attention (MLA) are not"),
])
def test_refusals_name_their_reason(fields, reason):
    spec = ops.AttentionSpec(**{"head_dim": 128, "dtype": torch.bfloat16, **fields})
    assert reason in ops.supports(spec)
    with pytest.raises(ops.Unsupported, match="rocm_dflash: "):
        ops.require(spec)


def test_every_reason_is_given_at_once():
    why = ops.supports(ops.AttentionSpec(head_dim=20, dtype=torch.int8, features=frozenset({"alibi"})))
    assert "head_dim 20" in why and "dtype torch.int8" in why and "ALiBi" in why


def test_unknown_feature_names_are_a_programming_error():
    with pytest.raises(ValueError, match="unknown attention features"):
        ops.supports(ops.AttentionSpec(head_dim=64, dtype=torch.float16, features=frozenset({"typo"})))


def test_a_missing_triton_is_a_support_reason(monkeypatch):
    monkeypatch.setattr(_runtime, "triton_problem", lambda: "`import triton` failed (stand-in)")
    assert "import triton" in ops.supports(ops.AttentionSpec(head_dim=64, dtype=torch.float16))


def _case_args(batch, q_len, context, page, hq=32, hkv=8, d=128):
    return dict(num_tokens=batch * q_len, num_seqs=batch, num_q_heads=hq, num_kv_heads=hkv, head_dim=d,
                page_size=page, kv_capacity=-(-context // page) * page, max_query_len=q_len)


@pytest.mark.parametrize("device", sorted(DEVICES))
@pytest.mark.parametrize("batch,q_len,context,page", [(1, 16, 32768, 16), (8, 16, 4096, 1), (64, 1, 8192, 16),
                                                      (3, 7, 1000, 3), (32, 16, 16384, 16)])
def test_describe_launch_is_what_the_triton_backend_runs(monkeypatch, device, batch, q_len, context, page):
    pin(monkeypatch, device)
    args = _case_args(batch, q_len, context, page)
    described = ops.describe_launch(**args)
    assert described.backend == "triton"

    class Shapes:  # the fields triton_backend.plan reads from a call
        num_tokens, num_seqs, num_q_heads, num_kv_heads = batch * q_len, batch, 32, 8
        head_dim, kv_capacity, max_query_len, num_kv_splits, page_size = 128, args["kv_capacity"], q_len, None, page
        window, causal = 0, False
        q = k_cache = torch.empty(0, dtype=torch.bfloat16)
    assert triton_backend.plan(Shapes) == described.launch
    if described.launch.num_splits > 1:
        assert described.workspace_floats == workspace.elements(described.launch.num_splits, batch * q_len, 32, 128)


HEADS = [(32, 8, 128), (64, 8, 128), (8, 1, 64), (16, 16, 256), (48, 8, 128), (16, 2, 512), (64, 4, 128),
         (16, 2, 256)]


@settings(max_examples=150, deadline=None)
@given(device=st.sampled_from(sorted(DEVICES)), num_seqs=st.integers(1, 48),
       q_lens=st.lists(st.integers(1, 300), min_size=1, max_size=48), context=st.integers(1, 65536),
       page=st.sampled_from([1, 16, 64]), heads=st.sampled_from(HEADS))
def test_workspace_floats_covers_every_call(device, num_seqs, q_lens, context, page, heads):
    with pytest.MonkeyPatch.context() as m:
        pin(m, device)
        hq, hkv, d = heads
        lens = (q_lens * num_seqs)[:num_seqs]
        capacity = -(-context // page) * page
        need = ops.describe_launch(num_tokens=sum(lens), num_seqs=num_seqs, num_q_heads=hq, num_kv_heads=hkv,
                                   head_dim=d, page_size=page, kv_capacity=capacity,
                                   max_query_len=max(lens)).workspace_floats
        assert need <= ops.workspace_floats(num_q_heads=hq, num_kv_heads=hkv, head_dim=d, max_num_seqs=48,
                                            max_kv_len=capacity)


@settings(max_examples=100, deadline=None)
@given(device=st.sampled_from(sorted(DEVICES)), num_seqs=st.integers(1, 48),
       q_lens=st.lists(st.integers(1, 16), min_size=1, max_size=48), context=st.integers(1, 65536),
       heads=st.sampled_from([(16, 2, 512), (64, 4, 128), (16, 8, 256), (16, 2, 256)]), padding=st.integers(0, 40))
def test_workspace_floats_covers_blocks_that_span_several_query_tiles(device, num_seqs, q_lens, context, heads,
                                                                      padding):
    """DFlash blocks of 512-wide heads (16-row tiles) and of GQA-16 groups span several query tiles
    and still split their keys at small batch; padding rows count, as the launch counts them."""
    with pytest.MonkeyPatch.context() as m:
        pin(m, device)
        hq, hkv, d = heads
        lens = (q_lens * num_seqs)[:num_seqs]
        capacity = -(-context // 16) * 16
        tokens = min(sum(lens) + padding, 16 * num_seqs)
        need = ops.describe_launch(num_tokens=tokens, num_seqs=num_seqs, num_q_heads=hq, num_kv_heads=hkv,
                                   head_dim=d, page_size=16, kv_capacity=capacity).workspace_floats
        assert need <= ops.workspace_floats(num_q_heads=hq, num_kv_heads=hkv, head_dim=d, max_num_seqs=48,
                                            max_kv_len=capacity)


@pytest.mark.parametrize("device", sorted(DEVICES))
@pytest.mark.parametrize("max_query_len", [9, 10, None])
def test_workspace_floats_covers_query_tiles_of_groups_that_do_not_divide_64(monkeypatch, device, max_query_len):
    """GQA 6 (48 q / 8 kv heads): query tiles of 10 rows, so a call of 10 rows per sequence splits."""
    pin(monkeypatch, device)
    need = ops.describe_launch(num_tokens=8 * 10, num_seqs=8, num_q_heads=48, num_kv_heads=8, head_dim=128,
                               page_size=16, kv_capacity=32768, max_query_len=max_query_len).workspace_floats
    assert need > 0
    assert need <= ops.workspace_floats(num_q_heads=48, num_kv_heads=8, head_dim=128, max_num_seqs=8,
                                        max_kv_len=32768)


@settings(max_examples=150, deadline=None)
@given(device=st.sampled_from(sorted(DEVICES)), num_seqs=st.integers(1, 48),
       q_lens=st.lists(st.integers(1, 300), min_size=1, max_size=48), context=st.integers(1, 65536),
       page=st.sampled_from([1, 16, 64]), heads=st.sampled_from(HEADS), causal=st.booleans(),
       q_cap=st.sampled_from([1, 8, 10, 16, 300]), bound_known=st.booleans(),
       window=st.sampled_from([None, 128, 4096]), own_splits=st.integers(1, 32),
       others=st.lists(st.tuples(st.integers(0, 9), st.integers(0, 6), st.integers(0, 16), st.sampled_from([1, 16]),
                                 st.booleans(), st.integers(1, 32)), max_size=8))
# A bucket bounded by 17 rows a sequence (q 32) holds calls of 9 rows on average, which split.
@example(device="H200", num_seqs=2, q_lens=[1, 17], context=1, page=1, heads=(32, 8, 128), causal=False, q_cap=300,
         bound_known=True, window=None, own_splits=2, others=[])
def test_workspace_floats_covers_tuned_split_counts(device, num_seqs, q_lens, context, page, heads, causal, q_cap,
                                                    bound_known, window, own_splits, others):
    """With tuned entries in force (one at the call's own bucket, others anywhere), whatever KV splits they
    set, the bound still covers the call (``q_cap`` makes short, splitting blocks common)."""
    hq, hkv, d = heads
    lens = [min(n, q_cap) for n in (q_lens * num_seqs)[:num_seqs]]
    capacity = -(-context // page) * page
    max_query_len = max(lens) if bound_known else None
    call = dict(num_tokens=sum(lens), num_seqs=num_seqs, num_q_heads=hq, num_kv_heads=hkv, head_dim=d, page_size=page,
                kv_capacity=capacity, causal=causal, max_query_len=max_query_len, sliding_window=window)
    with pytest.MonkeyPatch.context() as m:
        pin(m, device)
        block_q = ops.describe_launch(**call).launch.block_q
    keys = capacity if window is None else min(capacity, window + block_q - 1)  # as the chooser counts them
    own = ops.tuned_bucket(num_tokens=sum(lens), num_seqs=num_seqs, max_query_len=max_query_len, kv_keys=keys,
                           page_size=page)
    buckets = {(causal, *own): own_splits}
    for q, b, c, p, cz, splits in others:
        buckets.setdefault((cz, 1 << q, 1 << b, 1 << c, p), splits)
    fields = dict(block_n=64, num_warps=4, num_stages=2, page_ids_asm=False, overlap_qk=False)
    entries = [dict(heads=list(heads), dtype="bfloat16", kv_cache_dtype="bfloat16", causal=cz, q=q, batch=b,
                    context=c, page=p, launch=dict(fields, num_splits=splits))
               for (cz, q, b, c, p), splits in buckets.items()]
    with pytest.MonkeyPatch.context() as m, tempfile.TemporaryDirectory() as tmp:
        pin(m, device)
        m.setattr(tuned, "SHIPPED_DIR", Path(tmp))
        m.setenv(tuned.ENV, tmp)
        with open(f"{tmp}/{DEVICES[device][0]}.json", "w") as f:
            json.dump({"format": 1, "plugin": __version__, "arch": DEVICES[device][0], "entries": entries}, f)
        clear_tuned_caches()
        try:
            assert ops.tuned_configs()["buckets"] == len(entries)
            need = ops.describe_launch(**call).workspace_floats
            assert need <= ops.workspace_floats(num_q_heads=hq, num_kv_heads=hkv, head_dim=d, max_num_seqs=48,
                                                max_kv_len=capacity)
        finally:
            clear_tuned_caches()


def test_a_call_with_its_workspace_never_uses_the_fallback(monkeypatch):
    c = build([300, 280], [1, 1], num_q_heads=4, num_kv_heads=2, head_dim=32, block_size=16)
    floats = ops.workspace_floats(num_q_heads=4, num_kv_heads=2, head_dim=32, max_num_seqs=2,
                                  max_kv_len=c.block_table.shape[1] * 16)
    assert floats > 0, "this case is meant to split (the interpreter reports 8 multiprocessors)"

    def no_fallback(*_a):
        raise AssertionError("the fallback buffer was used although a workspace was given")
    monkeypatch.setattr(workspace, "_get", no_fallback)
    check_against_reference(c, causal=True, max_query_len=1, workspace=torch.empty(floats))
