"""``dflash-rocm tune`` on the CPU: the sweep, the checks and the file, with a tiny grid under the
Triton interpreter and an injected timer (no timing is asserted; the fake timer decides who wins).

* every candidate's output is checked against the float32 reference before it is timed: a launch
  whose output is wrong never wins, however fast the timer says it is;
* an entry is written only where a candidate beats the default measured in the same run, in the
  sweep and again in a confirmation round; a previous entry the default now beats is dropped;
* the file reads back through the ops layer and the chooser then runs the winner for that bucket;
* ``--dry-run`` says what would be swept and how long, without a GPU; without a GPU a run exits 2
  with one line; bad arguments exit 2 naming the argument.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from dflash_rocm_plugin import cli as top_cli, ops
from dflash_rocm_plugin.bench import inputs
from dflash_rocm_plugin.ops import launch_config, tuned
from dflash_rocm_plugin.tune import cli, driver, measure, space as space_mod
from dflash_rocm_plugin.tune.measure import Timing
from tests.core.conftest import clear_tuned_caches

ROOT = Path(__file__).resolve().parents[2]
TINY = space_mod.Space(splits=(1, 2), tiles=((16, 4, 1), (32, 4, 1)), overlap_qk=(False,))
ONE = space_mod.Space(splits=(1,), tiles=((16, 4, 1),), overlap_qk=(False,))  # the default and one other tile
HEADS = (4, 2, 32)


@pytest.fixture(autouse=True)
def one_copy(monkeypatch):
    monkeypatch.setattr(inputs, "ROTATE_BYTES", 1)


class FakeTimer:
    """Times from the candidate alone: ``fast(candidate, round)`` -> microseconds."""

    def __init__(self, fast):
        self.fast, self.rounds, self.timed = fast, {}, []

    def __call__(self, calls, candidate):
        n = self.rounds[candidate] = self.rounds.get(candidate, 0) + 1
        self.timed.append(candidate)
        us = self.fast(candidate, n)
        return Timing(graph_us=us, flushed_us=us)


def corrupt_block_n_32(monkeypatch):
    """Launches with BLOCK_N 32 write a wrong answer (as a miscompiled tile would)."""
    real = ops.paged_attention

    def wrong(*args, **kwargs):
        out = real(*args, **kwargs)
        if launch_config._forced.get("block_n") == 32:
            out.add_(1.0)
        return out
    monkeypatch.setattr(ops, "paged_attention", wrong)


def tune(tmp_path, shapes, timer, *extra, space=ONE, dtype=torch.float32):
    args = cli._parser().parse_args(["--out", str(tmp_path / "tuned"), "--no-progress", "--json",
                                     str(tmp_path / "record.json"), *extra])
    rc = cli.run(args, shapes, torch.device("cpu"), timer=timer, space=space, dtype=dtype)
    return rc, json.loads((tmp_path / "record.json").read_text())


def entry_for(bucket, launch):
    return dict(bucket, launch=launch)


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    """One sweep of two buckets: the draft block's BLOCK_N 16 launch is fastest, BLOCK_N 32 faster still
    but wrong; in the decode bucket nothing beats the default, and a previous entry there is dropped."""
    tmp = tmp_path_factory.mktemp("tune")
    with pytest.MonkeyPatch.context() as m:
        m.setattr(inputs, "ROTATE_BYTES", 1)
        m.setenv(tuned.ENV, "off")
        clear_tuned_caches()
        corrupt_block_n_32(m)
        shapes = space_mod.buckets(["draft-q16", "decode"], HEADS, [16], [(2, 128)])
        decode_key = dict(heads=list(HEADS), dtype="float32", kv_cache_dtype="float32", causal=True, q=1, batch=2,
                          context=128, page=16)
        stale = dict(block_n=16, num_warps=4, num_stages=1, num_splits=2, page_ids_asm=False, overlap_qk=False)
        (tmp / "tuned").mkdir()
        (tmp / "tuned" / "cpu.json").write_text(json.dumps(ops.tuned_document("cpu", [entry_for(decode_key, stale)])))

        labels = []

        def fast(c, n):
            fields = dict(c.fields)
            if c.label == "default" or not fields:
                return 100.0
            if labels[-1].startswith("draft"):
                return {16: 50.0, 32: 10.0}.get(fields["block_n"], 120.0)
            return 150.0
        timer = FakeTimer(fast)

        class Watch(measure.BucketBench):
            def __init__(self, shape, *a, **k):
                labels.append(shape.label)
                super().__init__(shape, *a, **k)
        m.setattr(driver, "BucketBench", Watch)
        rc, record = tune(tmp, shapes, timer, space=TINY)
    clear_tuned_caches()
    return dict(rc=rc, record=record, path=tmp / "tuned" / "cpu.json", timer=timer, shapes=shapes, labels=labels)


def test_every_timed_candidate_was_checked_first(swept):
    assert swept["rc"] == 0 and swept["labels"] == [s.label for s in swept["shapes"]]
    tried = [t for b in swept["record"]["buckets"] for t in b["tried"]]
    assert len(tried) > 6
    for t in tried:
        if t["launch"] and t["launch"]["block_n"] == 32:
            assert t["error"].startswith("wrong output") and t["graph_us"] is None
        else:
            assert t["error"] is None and t["rel_err"] < 1e-5 and t["graph_us"] is not None
    timed_block_ns = {dict(c.fields).get("block_n") for c in swept["timer"].timed}
    assert 32 not in timed_block_ns                       # never timed, so it could never win


def test_the_sweep_covers_splits_tiles_and_flags(swept):
    draft = swept["record"]["buckets"][0]
    launches = [t["launch"] for t in draft["tried"] if t["launch"]]
    assert {lz["num_splits"] for lz in launches} == {1, 2}
    assert {lz["block_n"] for lz in launches} >= {16, 32}


def test_only_a_bucket_that_beats_its_default_is_written(swept):
    draft, decode = swept["record"]["buckets"]
    assert draft["decision"] == "tuned" and draft["entry"]["launch"]["block_n"] == 16
    assert draft["entry"]["measured"]["tuned_us"] < draft["entry"]["measured"]["default_us"]
    assert decode["decision"] == "default kept" and decode["entry"] is None
    entries = ops.read_tuned_file(swept["path"], "cpu")
    assert entries == [draft["entry"]]                    # the stale decode entry lost to the default: dropped
    assert swept["record"]["written"] is True


def test_the_chooser_runs_the_written_winner(swept, monkeypatch):
    monkeypatch.setenv(tuned.ENV, str(swept["path"]))
    clear_tuned_caches()
    (entry,) = ops.read_tuned_file(swept["path"], "cpu")
    got = ops.describe_launch(num_tokens=32, num_seqs=2, num_q_heads=4, num_kv_heads=2, head_dim=32, page_size=16,
                              kv_capacity=128, max_query_len=16, dtype=torch.float32, causal=False).launch
    assert {k: getattr(got, k) for k in entry["launch"]} == entry["launch"]
    decode = ops.describe_launch(num_tokens=2, num_seqs=2, num_q_heads=4, num_kv_heads=2, head_dim=32, page_size=16,
                                 kv_capacity=128, max_query_len=1, dtype=torch.float32, causal=True).launch
    assert decode.block_n == 64                           # the rules' launch


def test_a_win_that_does_not_hold_in_the_confirmation_round_is_not_written(tmp_path, monkeypatch):
    monkeypatch.setenv(tuned.ENV, "off")
    shapes = space_mod.buckets(["draft-q16"], HEADS, [16], [(2, 128)])

    def fast(c, n):
        if c.label == "default" or not c.fields:
            return 100.0
        return 50.0 if n == 1 else 101.0                  # fast once, slower when re-timed
    rc, record = tune(tmp_path, shapes, FakeTimer(fast))
    (bucket,) = record["buckets"]
    assert rc == 0 and bucket["decision"] == "default kept"
    assert not (tmp_path / "tuned" / "cpu.json").exists() and record["written"] is False


def test_a_faster_graph_but_slower_cold_call_is_not_a_win(tmp_path, monkeypatch):
    monkeypatch.setenv(tuned.ENV, "off")
    shapes = space_mod.buckets(["draft-q16"], HEADS, [16], [(2, 128)])

    class Split(FakeTimer):
        def __call__(self, calls, c):
            default = c.label == "default" or not c.fields
            return Timing(graph_us=100.0 if default else 50.0, flushed_us=100.0 if default else 100.5)
    rc, record = tune(tmp_path, shapes, Split(None))
    assert record["buckets"][0]["decision"] == "default kept"


def test_an_exhausted_budget_skips_the_rest(tmp_path, monkeypatch):
    monkeypatch.setenv(tuned.ENV, "off")
    monkeypatch.setattr(driver, "BucketBench", lambda *a, **k: pytest.fail("inputs built after the budget ran out"))
    shapes = space_mod.buckets(["draft-q16"], HEADS, [16], [(2, 128), (1, 128)])
    rc, record = tune(tmp_path, shapes, FakeTimer(lambda c, n: 100.0), "--budget-min", "0")
    assert [b["decision"] for b in record["buckets"]] == ["skipped: out of time"] * 2


# ----------------------------------------------------------------------------- the command

def test_dry_run_plans_without_a_gpu(capsys):
    assert top_cli.main(["tune", "--dry-run", "--arch", "gfx942", "--prefill", "--budget-min", "20"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("dflash-rocm tune --dry-run: gfx942, heads 32/8/128, bfloat16, cache bf16")
    assert "would write: " in out and out.splitlines()[1].endswith("gfx942.json")
    assert "backend triton vs aiter" in out and "page_ids_asm False;" in out and "stages 1/2/3" in out
    for label in ("draft-q16 b32x16K p16", "decode b1x32K p1", "verify-q8 b8x4K p16", "chunked-prefill b1x16K p16",
                  "prefill b4x4K p1"):
        assert label in out
    assert "the budget of 20 min covers the first" in out


def test_the_plan_counts_aiter_only_where_ops_says_it_serves(capsys):
    """AITER candidates are counted for the non-causal bf16 buckets of heads AITER takes (``ops.aiter_may_serve``),
    not for 256-wide heads (Qwen3.5 / Gemma-4 sliding layers), causal buckets, fp8 caches or NVIDIA."""
    def counts(heads, arch="gfx942", kv="bf16"):
        shapes = space_mod.buckets(["draft-q16", "verify-q16"], heads, [16], [(8, 4096)], kv=kv)
        return driver.expected_candidates(shapes, arch, torch.bfloat16, space_mod.space_for(arch))
    assert ops.aiter_may_serve("gfx942", causal=False, dtype=torch.bfloat16, head_dim=128)
    assert not ops.aiter_may_serve("gfx942", causal=False, dtype=torch.bfloat16, head_dim=256)
    assert not ops.aiter_may_serve("sm_90", causal=False, dtype=torch.bfloat16, head_dim=128)
    def aiter_extra(heads, arch="gfx942", kv="bf16"):  # the draft bucket's candidates over the verify's
        draft, verify = counts(heads, arch, kv)
        return draft - verify
    assert aiter_extra((32, 8, 128)) - aiter_extra((32, 8, 128), "sm_90") == 2
    assert aiter_extra((16, 8, 256)) == aiter_extra((16, 8, 256), "sm_90")
    assert aiter_extra((32, 8, 128), kv="fp8") == aiter_extra((32, 8, 128), "sm_90", kv="fp8")  # no AITER over fp8
    assert top_cli.main(["tune", "--dry-run", "--arch", "gfx942", "--heads", "16/8/256", "--shapes", "8x4K",
                         "--classes", "draft-q16", "--pages", "16"]) == 0
    assert "aiter" not in capsys.readouterr().out


def test_dry_run_json(capsys, tmp_path):
    assert top_cli.main(["tune", "--dry-run", "--json", "--heads", "64/8/64", "--shapes", "8x4K",
                         "--classes", "decode", "--pages", "16", "--out", str(tmp_path)]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["dry_run"] and plan["heads"] == [64, 8, 64] and plan["out"] == str(tmp_path / "sm_90.json")
    assert [b["label"] for b in plan["buckets"]] == ["decode b8x4K p16"]
    assert plan["expected_s"] > 0 and plan["space"]["page_ids_asm"] == [False, True]
    assert not (tmp_path / "sm_90.json").exists()


@pytest.mark.parametrize("argv, says", [
    (["--model", "llama"], "--model 'llama' is not one of"),
    (["--heads", "32/6/128"], "--heads '32/6/128'"),
    (["--heads", "32x8"], "is not Q/KV/D"),
    (["--heads", "32/8/20"], "--heads '32/8/20': head_dim 20 is not supported"),
    (["--heads", "256/2/128"], "--heads '256/2/128': "),  # a GQA group past what ops serves
    (["--classes", "draft-q16,spec"], "--classes ['spec']"),
    (["--shapes", "8x1000", "--pages", "16"], "multiple of every page size"),
    (["--arch", "gfx942"], "--arch is for --dry-run"),
])
def test_bad_arguments_exit_2_naming_them(capsys, argv, says):
    assert top_cli.main(["tune", *argv]) == 2
    assert says in capsys.readouterr().err


def test_without_a_gpu_a_run_exits_2_with_one_line():
    res = subprocess.run([sys.executable, "-m", "dflash_rocm_plugin.cli", "tune"], capture_output=True, text=True,
                         cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)
    assert res.returncode == 2 and res.stdout == ""
    (line,) = res.stderr.strip().splitlines()
    assert line.startswith("dflash-rocm tune: no CUDA or HIP GPU is visible")


# ----------------------------------------------------------------------------- AITER (faked: ROCm cannot exist here)

@pytest.fixture
def rocm_with_aiter(monkeypatch, clean_aiter_state):
    from dflash_rocm_plugin.ops import _runtime
    from dflash_rocm_plugin.ops.backends import aiter as aiter_backend
    from tests.core.test_aiter_selection import FakeAiter
    monkeypatch.setenv(tuned.ENV, "off")
    monkeypatch.setattr(_runtime, "is_rocm", lambda: True)
    monkeypatch.setattr(aiter_backend, "_on_gpu", lambda t: True)
    return FakeAiter(monkeypatch)


@pytest.mark.parametrize("aiter_us, backend", [(100.0, "triton"), (40.0, None)])
def test_where_aiter_serves_the_bucket_the_backend_is_tuned_too(tmp_path, monkeypatch, rocm_with_aiter, aiter_us,
                                                                 backend):
    """The draft block: AITER is the default under auto.  Triton's launch is tuned against Triton's default;
    the backend entry says triton only when the tuned Triton launch beats AITER."""
    shapes = space_mod.buckets(["draft-q16", "verify-q16"], HEADS, [16], [(2, 128)])

    def fast(c, n):
        if c.label == "default":
            return aiter_us if in_draft[0] else 100.0     # auto: AITER serves the draft, Triton the verify
        if not c.fields:
            return 80.0                                   # Triton's default launch
        return 60.0 if dict(c.fields)["block_n"] == 16 else 120.0
    in_draft = [True]

    class Watch(measure.BucketBench):
        def __init__(self, shape, *a, **k):
            in_draft[0] = shape.klass.startswith("draft")
            super().__init__(shape, *a, **k)
    monkeypatch.setattr(driver, "BucketBench", Watch)
    rc, record = tune(tmp_path, shapes, FakeTimer(fast), dtype=torch.float16)
    assert rc == 0
    draft, verify = record["buckets"]
    assert draft["default"]["ran"] == "aiter" and rocm_with_aiter.calls
    assert any(t["backend"] == "triton" and not t["launch"] for t in draft["tried"])     # Triton's default, timed
    assert draft["entry"]["launch"]["block_n"] == 16
    assert draft["entry"].get("backend") == backend
    assert verify["default"]["ran"].startswith("triton")                                 # causal: AITER never asked
    assert not any(t["backend"] == "aiter" for t in verify["tried"])
    monkeypatch.setenv(tuned.ENV, str(tmp_path / "tuned"))
    clear_tuned_caches()
    plan = ops.describe_launch(num_tokens=32, num_seqs=2, num_q_heads=4, num_kv_heads=2, head_dim=32, page_size=16,
                               kv_capacity=128, max_query_len=16, dtype=torch.float16)
    assert plan.backend == (backend or "aiter")


def test_prefill_buckets_sweep_the_query_rows_and_write_the_winner(tmp_path, monkeypatch):
    monkeypatch.setenv(tuned.ENV, "off")
    clear_tuned_caches()
    shapes = space_mod.buckets(["prefill"], HEADS, [16], [(1, 64)])
    rows = space_mod.Space(splits=(1,), tiles=((16, 4, 1),), overlap_qk=(False,), rows=(16, 32))
    timer = FakeTimer(lambda c, n: 40.0 if dict(c.fields).get("block_q") == 8 else 100.0)
    rc, record = tune(tmp_path, shapes, timer, space=rows)
    (bucket,) = record["buckets"]
    tried = [t["launch"] for t in bucket["tried"] if t["launch"]]
    assert {t["block_q"] for t in tried} == {8, 16, 32}       # group 2: 16 and 32 rows, and the default's 64
    assert all(t["error"] is None for t in bucket["tried"])  # each checked against the reference, and right
    assert rc == 0 and bucket["decision"] == "tuned" and bucket["entry"]["launch"]["block_q"] == 8
    assert driver.expected_candidates(shapes, "cpu", torch.float32, rows) == [2 + 1 + 1]
    monkeypatch.setenv(tuned.ENV, str(tmp_path / "tuned" / "cpu.json"))
    clear_tuned_caches()
    got = ops.describe_launch(num_tokens=64, num_seqs=1, num_q_heads=4, num_kv_heads=2, head_dim=32, page_size=16,
                              kv_capacity=64, max_query_len=64, dtype=torch.float32, causal=True).launch
    assert (got.block_q, got.block_m) == (8, 16)
    clear_tuned_caches()


@pytest.mark.parametrize("causal_choices", [("none", "qk_split", "qk"), ("none", "qk_split"), ("none",)],
                         ids=["switch-names-the-calls", "it-does-not", "no-fp8-dots"])
def test_over_an_fp8_cache_the_flags_are_tried_with_each_q_k_dot(tmp_path, monkeypatch, causal_choices):
    """Where the cache is in the GPU's fp8 format (``ops.fp8_dots_choices``; the interpreter here reads fp8
    from bytes, so the answer is stood in for) each pair of loop flags is tried with each way Q K^T may dot
    (16-bit, q as two fp8 parts, and q rounded into fp8 where ``DFLASH_ROCM_FP8_QK`` names the bucket's
    calls), and the entry says which won; where the GPU has no fp8 dots no candidate sets it."""
    monkeypatch.setenv(tuned.ENV, "off")
    clear_tuned_caches()
    monkeypatch.setattr(measure.ops, "fp8_dots_choices", lambda **kw: causal_choices)
    shapes = space_mod.buckets(["draft-q16"], HEADS, [16], [(2, 128)], kv="fp8")
    speed = {"qk": 40.0, "qk_split": 60.0}
    timer = FakeTimer(lambda c, n: speed.get(dict(c.fields).get("fp8_dots"), 100.0))
    rc, record = tune(tmp_path, shapes, timer, "--kv", "fp8", space=ONE)
    (bucket,) = record["buckets"]
    tried = [t["launch"] for t in bucket["tried"] if t["launch"]]
    assert rc == 0 and all(t["error"] is None for t in bucket["tried"])
    if len(causal_choices) > 1:
        best = causal_choices[-1]
        assert {t.get("fp8_dots") for t in tried} == set(causal_choices)
        assert bucket["decision"] == "tuned" and bucket["entry"]["launch"]["fp8_dots"] == best
        assert bucket["entry"]["measured"]["tuned"].endswith({"qk": "fp8qk", "qk_split": "fp8qk2"}[best])
    else:
        assert all("fp8_dots" not in t for t in tried) and bucket["decision"] == "default kept"
    clear_tuned_caches()


@pytest.mark.parametrize("policy", ["draft", "off"])
@pytest.mark.parametrize("arch", ["sm_90", "gfx942"])
def test_the_dry_run_counts_the_fp8_q_k_candidates(monkeypatch, policy, arch):
    """With ``--kv fp8`` on a GPU with fp8 dots each pair of loop flags is counted three times for the calls
    the switch names (under "draft" the draft's: 16-bit, two fp8 parts, q in fp8) and twice for the others;
    on gfx94x once more each (q and P in two fp8 parts), and without the bf16 draft's two AITER candidates."""
    monkeypatch.setenv(ops.FP8_QK_ENV, policy)
    ops.fp8_qk_policy.cache_clear()
    shapes = space_mod.buckets(["draft-q16", "verify-q16"], (32, 8, 128), [16], [(32, 16384)], kv="fp8")
    bf16 = space_mod.buckets(["draft-q16", "verify-q16"], (32, 8, 128), [16], [(32, 16384)])
    space = space_mod.space_for(arch)
    flags = len(space.page_ids_asm) * len(space.overlap_qk)
    fp8, plain = (driver.expected_candidates(s, arch, torch.bfloat16, space) for s in (shapes, bf16))
    more, aiter = (1, 2) if arch == "gfx942" else (0, 0)
    assert fp8 == [plain[0] - aiter + flags * ((2 if policy == "draft" else 1) + more), plain[1] + flags * (1 + more)]
    ops.fp8_qk_policy.cache_clear()


def test_prefill_buckets_time_the_paged_launch_without_the_prompts_own_rows():
    # Given a prompt's own K/V rows, its work would go to the dense kernel and every candidate would tie.
    shape = space_mod.TuneShape("qwen3-8b", "verify", 1, 256, 16, q_len=256, workload="prefill",
                                layout=(4, 2, 32), klass="prefill")
    bench = measure.BucketBench(shape, torch.device("cpu"), torch.float32, FakeTimer(lambda c, n: 1.0))
    assert bench.case.new_kv is None
    assert inputs.build(shape, torch.device("cpu"), dtype=torch.float32).new_kv is not None


@pytest.mark.parametrize("winner", ["pages", "dense", "none"])
def test_prefill_buckets_time_the_prompts_own_rows_dense_and_paged_and_write_the_winner(tmp_path, monkeypatch,
                                                                                       capsys, winner):
    """Passed with their own K/V rows (as the hosts pass a prefill), a bucket's prompts run the dense kernel by
    the chooser's rule; the tuner times that default against the prompts read from the pages and against each
    dense tile, every one checked against the reference first, and writes ``dense`` only for a win."""
    monkeypatch.setenv(tuned.ENV, "off")
    clear_tuned_caches()
    shapes = space_mod.buckets(["prefill"], HEADS, [16], [(1, 128)])
    space = space_mod.Space(splits=(1,), tiles=((16, 4, 1),), overlap_qk=(False,), dense_tiles=((16, 16, 4, 1),))
    speed = {"pages": 40.0 if winner == "pages" else 150.0,
             "dense Q16 BN16 W4 S1": 30.0 if winner == "dense" else 150.0}
    timer = FakeTimer(lambda c, n: speed.get(c.label, 100.0))
    rc, record = tune(tmp_path, shapes, timer, space=space)
    (bucket,) = record["buckets"]
    prompts = [t for t in bucket["tried"] if t["pages"] or t["dense"] or "prompts dense" in t["ran"]]
    assert rc == 0 and all(t["error"] is None for t in bucket["tried"])
    assert {t["label"] for t in prompts} >= {"pages", "dense Q16 BN16 W4 S1"}
    assert any(t["ran"].endswith("prompts pages") for t in prompts if t["pages"])
    # the paged launch's tile and flags, then the prompts' default, pages and one dense tile
    assert driver.expected_candidates(shapes, "cpu", torch.float32, space) == [2 + 3]
    entry = bucket["entry"]
    if winner == "none":
        assert entry is None or "dense" not in entry
        # the table still says what the prompts' path was timed against
        (row,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith("prefill b1x128")]
        assert row.endswith("; prompts kept: dense Q32 BN16 W4 S1 100.0 us, pages 150.0 us, "
                            "best other dense Q16 BN16 W4 S1 150.0 us"), row
        return
    assert "prompts kept" not in capsys.readouterr().out
    want = False if winner == "pages" else dict(block_m=16, block_n=16, num_warps=4, num_stages=1)
    assert entry["dense"] == want and "prompts" in entry["measured"]
    monkeypatch.setenv(tuned.ENV, str(tmp_path / "tuned" / "cpu.json"))
    clear_tuned_caches()
    got = ops.describe_launch(num_tokens=128, num_seqs=1, num_q_heads=4, num_kv_heads=2, head_dim=32, page_size=16,
                              kv_capacity=128, max_query_len=128, dtype=torch.float32, causal=True,
                              new_kv=True).dense_launch
    assert (got is None) if winner == "pages" else (got.block_m, got.block_n) == (16, 16)
    clear_tuned_caches()
