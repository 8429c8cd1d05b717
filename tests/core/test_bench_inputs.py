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


def test_workload_cells_take_another_model_s_heads():
    from dflash_rocm_plugin.bench import shapes
    work = shapes.WORKLOADS["prefill"]
    assert {s.model for s in work.shapes([16])} == {"qwen3-8b"}
    oss = work.shapes([16], window=128, sinks=True, model="gpt-oss-120b")
    assert [(s.batch, s.context, s.q_len) for s in oss] == [(s.batch, s.context, s.q_len) for s in work.shapes([16])]
    assert all(s.model == "gpt-oss-120b" and s.window == 128 and s.sinks for s in oss)


def test_bench_force_parses_launch_fields_and_names_a_bad_one():
    from dflash_rocm_plugin.bench import cli
    assert cli.parse_forced(["overlap_qk=false", "num_stages=3", "fp8_dots=pv"]) == {
        "overlap_qk": False, "num_stages": 3, "fp8_dots": "pv"}
    for bad, says in ((["nostages=3"], "FIELD one of"), (["num_stages"], "FIELD=VALUE"),
                      (["num_stages=x"], "integer"), (["overlap_qk=1"], "true or false")):
        with pytest.raises(ValueError, match=says):
            cli.parse_forced(bad)
    assert cli.main(["--force", "bogus=1"]) == 2  # before looking for a GPU
    from dflash_rocm_plugin.ops.extend_launch import ExtendLaunch
    assert cli.parse_forced(["block_n=64", "use_desc=false", "qo_desc=true"], ExtendLaunch, "--force-dense") == {
        "block_n": 64, "use_desc": False, "qo_desc": True}
    with pytest.raises(ValueError, match="--force-dense 'fp8_dots=pv'"):
        cli.parse_forced(["fp8_dots=pv"], ExtendLaunch, "--force-dense")
    assert cli.main(["--force-dense", "num_warps=many"]) == 2
    for clash in (["--shapes", "1x4K"], ["--q-len", "8"], ["--targets-only"]):
        assert cli.main(["--workload", "prefill", *clash]) == 2


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


@pytest.mark.parametrize("mode,ctx,q_len,window", [("verify", 64, 16, None), ("draft", 64, 16, None),
                                                    ("verify", 64, 64, None), ("verify", 64, 1, None),
                                                    ("verify", 96, 32, 20), ("draft", 96, 16, 20)])
def test_flop_counts_the_pairs_attended(mode, ctx, q_len, window):
    shape = Shape("tiny", mode, 3, ctx, 16, q_len, window=window)
    pos = torch.arange(ctx - q_len, ctx)[:, None]
    keys = torch.arange(ctx)[None, :]
    seen = torch.ones(q_len, ctx, dtype=torch.bool)
    if shape.causal:
        seen &= keys <= pos
    if window:
        seen &= pos - keys < window
    hq, _, d = shape.heads
    assert shape.flop() == 4 * 3 * hq * d * int(seen.sum())


def test_reference_in_row_chunks_is_the_reference():
    shape = Shape("tiny", "verify", 2, 64, 16, 48, window=20, sinks=True)
    case = inputs.build(shape, torch.device("cpu"), dtype=torch.float32)
    whole = inputs.reference(case)
    assert inputs.rel_error(inputs.reference(case, max_logits=4 * 64 * 5), whole) < 1e-6
    out = ops.paged_attention(case.q, case.k_cache, case.v_cache, case.block_tables[0], case.seq_lens,
                              case.query_start_loc, causal=True, max_query_len=48, **case.features())
    assert inputs.rel_error(out, whole) < 1e-5


@pytest.mark.parametrize("mode,ctx,q_len", [("draft", 64, 16), ("verify", 64, 16), ("verify", 64, 1),
                                            ("verify", 64, 64), ("verify", 96, 32)],
                         ids=["draft", "verify", "decode", "prefill", "chunked"])
def test_pinned_sdpa_peer_layouts_match_the_reference(mode, ctx, q_len):
    """The SDPA peers' folded / per-head layouts and their causal alignment, on the CPU's MATH
    backend (the bench pins FLASH_ATTENTION or CUDNN_ATTENTION on a GPU)."""
    from dflash_rocm_plugin.bench import peers
    case = inputs.build(Shape("tiny", mode, 2, ctx, 16, q_len), torch.device("cpu"), dtype=torch.float32)
    calls, out = peers.sdpa_pinned("MATH")(None)(case)
    calls[0]()
    assert inputs.rel_error(out.get(), inputs.reference(case)) < 1e-5


def test_workloads_are_the_issue_shapes_with_their_goals():
    from dflash_rocm_plugin.bench.shapes import WORKLOADS
    prefill = WORKLOADS["prefill"].shapes([16])
    assert all(s.q_len == s.context and s.causal for s in prefill)
    assert prefill[0].label == "prefill qwen3-8b b1x8K p16 q8192"
    assert {(s.batch, s.context, s.q_len) for s in WORKLOADS["chunked"].shapes([16])} == {
        (4, 8192, 2048), (1, 32768, 8192)}
    assert {s.q_len for s in WORKLOADS["decode"].shapes([16])} == {1}
    assert {s.heads for s in WORKLOADS["gqa8"].shapes([16])} == {(64, 8, 128)}
    fp8 = WORKLOADS["prefill"].shapes([16], kv="fp8", window=128)
    assert {(s.kv, s.window) for s in fp8} == {("fp8", 128)} and fp8[0].label.endswith(" fp8 w128 q8192")


def test_verdicts_hold_each_workload_to_its_goals():
    from dflash_rocm_plugin.bench import report
    base = dict(impl="plugin", tbs=1.0, frac_ceiling=0.3)
    rows = [dict(base, label="chunked a", workload="chunked", batch=4, context=8192, tflops=450.0),
            dict(base, label="prefill a", workload="prefill", batch=16, context=1024, tflops=300.0,
                 speedup_vs={"sdpa_cudnn": 0.9, "sdpa_flash": 1.2}),
            dict(base, label="decode a", workload="decode", batch=64, context=8192, tbs=4.3, tflops=1.0),
            dict(base, label="verify a", workload="q16", batch=8, context=4096, tbs=2.9, tflops=1.0,
                 flushed_tbs=2.5),
            dict(base, label="decode b", workload="decode", batch=256, context=2048, tflops=1.0)]
    got = {v["label"]: [(c["what"], c["met"]) for c in v["checks"]] for v in report.targets(rows, 4.2, ())}
    assert got == {"chunked a": [("TFLOP/s", False)],
                   "prefill a": [("x vs sdpa_flash", True)],  # 16 x 1K: FA2 only
                   "decode a": [("TB/s", True)],
                   "verify a": [("TB/s", True), ("one-call TB/s", False)]}
    assert "MISSED" in report.verdict_text(report.targets(rows, 4.2, ()))


def test_a_launch_with_fp8_dots_is_allowed_its_error():
    """The bench and the tuner time a call only within its launch's error: 2e-2 for 16-bit dots (or another
    backend), 6e-2 for a launch that rounds q or P into an fp8 cache's format, as DFLASH_ROCM_FP8_QK lets a
    call do (q rounded to 3 mantissa bits: 2e-2 measured, above the first bound); q as two fp8 parts keeps
    the first."""
    launch = ops.AttentionLaunch(block_q=16, block_m=64, block_n=64, head_dim_pad=128, num_splits=1, num_warps=4,
                                 num_stages=3)
    assert inputs.tolerance(None) == inputs.tolerance(launch) == 2e-2
    assert inputs.tolerance(dataclasses.replace(launch, fp8_dots="qk_split")) == 2e-2
    for mode in ("qk", "pv", "qk_pv"):
        assert inputs.tolerance(dataclasses.replace(launch, fp8_dots=mode)) == 6e-2


def test_prefill_cases_carry_their_own_rows_as_a_host_passes_them():
    shape = Shape("qwen3-8b", "verify", 2, 192, 16, q_len=inputs.NEW_KV_MIN_QUERY, workload="chunked")
    case = inputs.build(shape, torch.device("cpu"), dtype=torch.float32)
    assert case.new_kv is not None and len(case.new_kv) == case.copies
    last = case.copies - 1
    k, v = inputs.dense_kv(case, last)                            # [B, Hkv, ctx, D]
    keys, values = case.new_kv[last]
    own = slice(shape.context - shape.q_len, shape.context)
    assert torch.equal(keys.view(2, shape.q_len, 8, 128), k[:, :, own].transpose(1, 2))
    assert torch.equal(values.view(2, shape.q_len, 8, 128), v[:, :, own].transpose(1, 2))
    out = torch.full_like(case.q, float("nan"))
    case.plugin_calls([out] * case.copies)[0]()
    assert inputs.rel_error(out, inputs.reference(case, 0)) < 1e-4
    assert inputs.build(shape, torch.device("cpu"), dtype=torch.float32, new_kv=False).new_kv is None
    q16 = dataclasses.replace(shape, q_len=16, workload="q16")
    assert inputs.build(q16, torch.device("cpu"), dtype=torch.float32).new_kv is None


def test_fp8_prefill_cases_carry_rows_the_write_stores_as_the_cache_holds_them():
    """Over an fp8 cache a prompt's own rows are the values its codes stand for: written again they are the
    same codes, and the call (whose prompts read them, rounded as written) matches the reference."""
    shape = Shape("qwen3-8b", "verify", 1, 128, 16, q_len=128, kv="fp8", workload="prefill")
    case = inputs.build(shape, torch.device("cpu"), dtype=torch.float32)
    keys, values = case.new_kv[0]
    assert keys.dtype == torch.float32 and case.k_cache.dtype == torch.float8_e4m3fn
    k_cache, v_cache = torch.zeros_like(case.k_cache), torch.zeros_like(case.v_cache)
    table = case.block_tables[0]
    slots = (table.long()[0, :, None] * 16 + torch.arange(16)).flatten()
    ops.write_kv_cache(keys, values, k_cache, v_cache, slots, k_scale=case.k_scale, v_scale=case.v_scale)
    pages = table.long()[0]
    assert torch.equal(k_cache[pages].view(torch.uint8), case.k_cache[pages].view(torch.uint8))
    assert torch.equal(v_cache[pages].view(torch.uint8), case.v_cache[pages].view(torch.uint8))
    out = torch.full_like(case.q, float("nan"))
    case.plugin_calls([out] * case.copies)[0]()
    assert inputs.rel_error(out, inputs.reference(case, 0)) < 1e-4
