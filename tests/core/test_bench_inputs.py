"""The benchmark's own inputs and float32 reference agree with ops on small CPU shapes, for every
feature it times (fp8 caches with scales, sliding windows, sinks, short blocks), so a bench run on
the GPU checks outputs against a reference that is itself right."""

import dataclasses

import pytest
import torch

from dflash_rocm_plugin import ops
from dflash_rocm_plugin.bench import inputs
from dflash_rocm_plugin.bench.shapes import MODELS, Shape


@pytest.fixture(autouse=True)
def tiny_model(monkeypatch):
    monkeypatch.setitem(MODELS, "tiny", (4, 2, 32))
    monkeypatch.setattr(inputs, "ROTATE_BYTES", 1)  # one copy


@pytest.mark.parametrize("extra", [{}, dict(kv="fp8"), dict(window=20), dict(sinks=True), dict(q_len=8),
                                   dict(kv="fp8", window=20, sinks=True, q_len=8)],
                         ids=["plain", "fp8", "window", "sinks", "q8", "all"])
@pytest.mark.parametrize("mode", ["draft", "verify"])
def test_bench_reference_matches_ops(mode, extra):
    shape = dataclasses.replace(Shape("tiny", mode, 2, 64, 16), **extra)
    case = inputs.build(shape, torch.device("cpu"), dtype=torch.float32)
    out = ops.paged_attention(case.q, case.k_cache, case.v_cache, case.block_tables[0], case.seq_lens,
                              case.query_start_loc, causal=shape.causal, max_query_len=shape.q_len,
                              **case.features())
    assert inputs.rel_error(out, inputs.reference(case)) < 1e-5


def test_bytes_counted_are_those_read():
    plain = Shape("tiny", "draft", 2, 4096, 16)
    assert plain.kv_bytes() == 2 * 2 * 4096 * 2 * 32 * 2
    assert dataclasses.replace(plain, kv="fp8").kv_bytes() == plain.kv_bytes() // 2
    assert dataclasses.replace(plain, window=2048).kv_bytes() == 2 * 2 * (2048 + 15) * 2 * 32 * 2


def test_bench_force_parses_launch_fields_and_names_a_bad_one():
    from dflash_rocm_plugin.bench import cli
    assert cli._forced_fields(["overlap_qk=false", "num_stages=3", "fp8_dots=pv"]) == {
        "overlap_qk": False, "num_stages": 3, "fp8_dots": "pv"}
    for bad, says in ((["nostages=3"], "FIELD one of"), (["num_stages"], "FIELD=VALUE"),
                      (["num_stages=x"], "integer"), (["overlap_qk=1"], "true or false")):
        with pytest.raises(ValueError, match=says):
            cli._forced_fields(bad)
    assert cli.main(["--force", "bogus=1"]) == 2  # before looking for a GPU


def test_pool_context_spreads_a_short_context_over_a_long_pool():
    shape = Shape("tiny", "draft", 2, 64, 16)
    small = inputs.build(shape, torch.device("cpu"), dtype=torch.float32)
    pooled = inputs.build(shape, torch.device("cpu"), dtype=torch.float32, pool_context=1024)
    assert pooled.k_cache.shape[0] == 16 * small.k_cache.shape[0]
    assert pooled.block_tables[0].shape == small.block_tables[0].shape  # same launch, same keys read
    pages = torch.cat([t.flatten() for t in pooled.block_tables])
    assert pages.unique().numel() == pages.numel() and int(pages.max()) > small.k_cache.shape[0]
    out = ops.paged_attention(pooled.q, pooled.k_cache, pooled.v_cache, pooled.block_tables[0], pooled.seq_lens,
                              pooled.query_start_loc, causal=False, max_query_len=16)
    assert inputs.rel_error(out, inputs.reference(pooled)) < 1e-5
