"""Tuned launch files as the chooser reads them (ops/tuned.py, ops/tuned_file.py).

* a call's bucket (query rows, sequences, keys, page, each rounded up to a power of two) finds
  its entry, and only its own: other buckets, head layouts, dtypes, cache dtypes and causality
  keep the rules' launch;
* the user's file (DFLASH_ROCM_TUNED_CONFIGS, a file or a directory; else the XDG cache path)
  wins over the shipped one bucket by bucket; ``off`` turns both off;
* a file that cannot be used (malformed JSON, another plugin version or format, another
  architecture, unknown fields or values, two entries for one bucket) is ignored with exactly
  one warning, however many calls follow, and never raises;
* the launch comes from shapes only, so graph capture and replay run the same kernels, and
  ``describe_launch`` is what the Triton backend runs, tuned or not;
* under ``auto`` on ROCm a ``backend: triton`` entry keeps its bucket off AITER.
"""

from __future__ import annotations

import json
import logging

import pytest
import torch
from hypothesis import HealthCheck, given, settings, strategies as st

from dflash_rocm_plugin import __version__, ops
from dflash_rocm_plugin.ops import _runtime, backends, launch_config, tuned
from dflash_rocm_plugin.ops.backends import aiter as aiter_backend
from dflash_rocm_plugin.ops.backends import triton as triton_backend
from dflash_rocm_plugin.ops.call import AttentionCall
from tests.core.conftest import clear_tuned_caches

LOGGER = "dflash_rocm_plugin.launches"
FAST = dict(block_n=32, num_warps=8, num_stages=4, num_splits=1, page_ids_asm=False, overlap_qk=True)
DENSE = dict(block_m=64, block_n=64, num_warps=4, num_stages=2)


def entry(heads=(32, 8, 128), dtype="bfloat16", kv="bfloat16", causal=False, q=16, batch=32, context=16384,
          page=16, launch=FAST, backend=None, **extra):
    e = dict(heads=list(heads), dtype=dtype, kv_cache_dtype=kv, causal=causal, q=q, batch=batch, context=context,
             page=page, **extra)
    if launch is not None:
        e["launch"] = dict(launch)
    if backend is not None:
        e["backend"] = backend
    return e


def doc(entries, arch="sm_90", **over):
    return {"format": 1, "plugin": __version__, "arch": arch, "device": "test", "entries": entries, **over}


@pytest.fixture
def files(tmp_path, monkeypatch):
    """The user source at tmp/user/<arch>.json (via the variable), the shipped one at tmp/shipped."""
    user, shipped = tmp_path / "user", tmp_path / "shipped"
    user.mkdir()
    shipped.mkdir()
    monkeypatch.setenv(tuned.ENV, str(user))
    monkeypatch.setattr(tuned, "SHIPPED_DIR", shipped)
    clear_tuned_caches()

    def write(where, document, arch="sm_90"):
        text = document if isinstance(document, str) else json.dumps(document)
        (tmp_path / where / f"{arch}.json").write_text(text)
        clear_tuned_caches()
    write.user, write.shipped = user, shipped
    return write


@pytest.fixture
def h200(monkeypatch):
    monkeypatch.setattr(_runtime, "gpu_arch", lambda index=None: "sm_90")
    monkeypatch.setattr(_runtime, "shared_memory_per_block", lambda index: 227 * 1024)
    monkeypatch.setattr(_runtime, "multiprocessor_count", lambda index: 132)
    monkeypatch.setattr(_runtime, "interpreting", lambda: False)


def launch(batch=32, context=16384, q_len=16, page=16, causal=False, dtype=torch.bfloat16, kv=None, heads=(32, 8, 128),
           num_tokens=None, max_query_len="q", num_splits=None):
    hq, hkv, d = heads
    return launch_config.choose(
        num_tokens=batch * q_len if num_tokens is None else num_tokens, num_seqs=batch, num_kv_heads=hkv,
        group=hq // hkv, head_dim=d, kv_capacity=context, max_query_len=q_len if max_query_len == "q" else max_query_len,
        num_splits=num_splits, device_index=0, page_size=page, dtype=dtype, kv_cache_dtype=kv, causal=causal)


def tuned_fields(cfg):
    return {k: getattr(cfg, k) for k in FAST}


def warnings_from(caplog):
    return [r for r in caplog.records if r.name == LOGGER and r.levelno >= logging.WARNING]


# ----------------------------------------------------------------------------- buckets

@pytest.mark.parametrize("shape, bucket", [
    (dict(num_tokens=512, num_seqs=32, max_query_len=16, kv_keys=16384, page_size=16), (16, 32, 16384, 16)),
    (dict(num_tokens=512, num_seqs=32, max_query_len=16, kv_keys=9000, page_size=16), (16, 32, 16384, 16)),
    (dict(num_tokens=300, num_seqs=20, max_query_len=15, kv_keys=16385, page_size=1), (16, 32, 32768, 1)),
    (dict(num_tokens=64, num_seqs=64, max_query_len=1, kv_keys=1024, page_size=64), (1, 64, 1024, 16)),
    (dict(num_tokens=40, num_seqs=8, max_query_len=None, kv_keys=4096, page_size=None), (8, 8, 4096, 16)),
    (dict(num_tokens=8192, num_seqs=1, max_query_len=8192, kv_keys=8192, page_size=3), (8192, 1, 8192, 4)),
])
def test_a_call_s_bucket_rounds_each_size_up_to_a_power_of_two(shape, bucket):
    assert ops.tuned_bucket(**shape) == bucket


def test_an_entry_sets_its_bucket_s_launch_and_no_other(h200, files):
    rules = launch()
    files("user", doc([entry()]))
    assert tuned_fields(launch()) == FAST
    assert tuned_fields(launch(context=9000)) == FAST                      # same bucket
    assert (launch().block_q, launch().block_m) == (rules.block_q, rules.block_m)
    for other in (dict(context=32768), dict(batch=64), dict(q_len=8), dict(page=1), dict(causal=True),
                  dict(dtype=torch.float16), dict(kv=torch.float8_e4m3fn), dict(heads=(64, 8, 128))):
        assert tuned_fields(launch(**other)) != FAST, other
    # without dtype and causal (the rules' own callers) there is no lookup
    plain = launch_config.choose(num_tokens=512, num_seqs=32, num_kv_heads=8, group=4, head_dim=128,
                                 kv_capacity=16384, max_query_len=16, num_splits=None, device_index=0, page_size=16)
    assert plain == rules


def test_without_files_the_rules_stand(h200, files):
    assert launch() == launch(dtype=None)
    assert ops.tuned_configs()["buckets"] == 0


def test_forced_fields_win_over_a_tuned_entry(h200, files):
    files("user", doc([entry()]))
    with ops.forced_launch(num_stages=2):
        assert launch().num_stages == 2 and launch().block_n == FAST["block_n"]


def prompt_launch(batch=1, context=8192, causal=True, window=None, kv=None):
    """What a prefill call that passes its own K/V rows runs (Qwen3-8B heads, page 16)."""
    return ops.describe_launch(num_tokens=batch * context, num_seqs=batch, num_q_heads=32, num_kv_heads=8,
                               head_dim=128, page_size=16, kv_capacity=context, causal=causal,
                               max_query_len=context, sliding_window=window, kv_cache_dtype=kv, new_kv=True,
                               device=torch.device("cuda", 0))


def test_an_entry_s_dense_part_decides_its_bucket_s_whole_prompts(h200, files):
    rule = prompt_launch().dense_launch
    assert rule is not None and rule.block_m == 128 and rule.use_desc
    prefill = dict(heads=(32, 8, 128), causal=True, q=8192, batch=1, context=8192, launch=None)
    files("user", doc([entry(**prefill, dense=DENSE)]))
    tuned = prompt_launch().dense_launch
    assert {k: getattr(tuned, k) for k in DENSE} == DENSE
    assert (tuned.use_desc, tuned.qo_desc, tuned.chunks) == (rule.use_desc, rule.qo_desc, rule.chunks)
    for other in (dict(batch=2), dict(context=16384), dict(window=4096)):  # other buckets; windows keep the rule
        assert prompt_launch(**other).dense_launch.block_m == 128, other
    files("user", doc([entry(**prefill, dense=False)]))
    assert prompt_launch().dense_launch is None and prompt_launch(batch=2).dense_launch is not None
    with ops.forced_extend(block_n=64):  # sweeps force the dense kernel whatever the file says
        assert prompt_launch().dense_launch.block_n == 64
    files("user", doc([entry(**prefill, dense=DENSE, kv="float8_e4m3fn")]))  # a cache of its own
    assert prompt_launch(kv=torch.float8_e4m3fn).dense_launch.block_m == 64
    assert prompt_launch().dense_launch.block_m == 128


# ----------------------------------------------------------------------------- KV splits

def test_tuned_splits_apply_only_where_the_rules_could_split(h200, files):
    files("user", doc([entry(batch=8, context=4096, launch=dict(FAST, num_splits=16)),
                       entry(q=1024, batch=8, context=4096, causal=True, launch=dict(FAST, num_splits=16))]))
    assert launch(batch=8, context=4096).num_splits == 16
    assert launch(batch=8, context=4096, num_splits=2).num_splits == 2            # a forced count wins
    # a prefill of the bucket: its rows span many query tiles, so it never splits
    assert launch(batch=8, context=4096, q_len=1024, causal=True).num_splits == 1
    assert launch(batch=8, context=2049).num_splits == 16                      # the whole bucket
    assert launch(batch=4, context=4096).num_splits != 16                       # another bucket


# ----------------------------------------------------------------------------- fp8 Q K^T

@pytest.mark.parametrize("policy", ["draft", "all", "off"])
def test_a_tuned_fp8_dots_applies_only_to_calls_the_switch_names(h200, files, monkeypatch, policy):
    """An entry may say how its bucket dots Q K^T over an fp8 cache ("none", "qk_split" or "qk", as
    ``dflash-rocm tune`` measured it), overriding the 64-row floor both ways; "qk" (q rounded into fp8) only
    for calls ``DFLASH_ROCM_FP8_QK`` names: never a target's causal call under "draft", nor any call under
    "off", which then take the rule's choice."""
    fn = torch.float8_e4m3fn
    monkeypatch.setenv(ops.FP8_QK_ENV, policy)
    ops.fp8_qk_policy.cache_clear()
    try:
        files("user", doc([
            entry(kv="float8_e4m3fn", launch=dict(FAST, fp8_dots="none")),                     # q16 draft, 64 rows
            entry(kv="float8_e4m3fn", q=8, launch=dict(FAST, fp8_dots="qk")),                  # q8 draft, 32 rows
            entry(kv="float8_e4m3fn", causal=True, launch=dict(FAST, fp8_dots="qk")),          # q16 verify
            entry(kv="float8_e4m3fn", causal=True, q=8, launch=dict(FAST, fp8_dots="qk_split")),  # q8 verify
            entry(kv="float8_e4m3fn", batch=64, context=8192, launch=dict(FAST))]))           # says nothing
        drafts, verify = policy != "off", policy == "all"
        assert launch(kv=fn).fp8_dots == "none" and tuned_fields(launch(kv=fn)) == FAST
        assert launch(kv=fn, q_len=8).block_m == 32
        assert launch(kv=fn, q_len=8).fp8_dots == ("qk" if drafts else "none")                 # else the floor
        assert launch(kv=fn, causal=True).fp8_dots == ("qk" if verify else "qk_split")
        assert launch(kv=fn, causal=True, q_len=8).fp8_dots == "qk_split"                      # under the floor
        assert launch(kv=fn, batch=64, context=8192).fp8_dots == ("qk" if drafts else "qk_split")  # the rule's
        with ops.forced_launch(fp8_dots="qk"):
            assert launch(kv=fn).fp8_dots == "qk"                                               # forced wins
    finally:
        ops.fp8_qk_policy.cache_clear()


# ----------------------------------------------------------------------------- query rows

def test_tuned_query_rows_apply_only_where_queries_span_several_tiles(h200, files):
    tall = dict(FAST, block_q=64, num_warps=8)
    files("user", doc([entry(q=4096, batch=4, context=4096, causal=True, launch=tall),
                       entry(q=16, batch=32, context=16384, causal=True, launch=tall)]))
    prefill = launch(batch=4, context=4096, q_len=4096, causal=True)
    assert (prefill.block_q, prefill.block_m, prefill.num_warps, prefill.num_splits) == (64, 256, 8, 1)
    block = launch(causal=True)                               # a q16 bucket: its sequences fit one tile
    assert (block.block_q, block.block_m, block.num_warps) == (16, 64, 8)
    short = launch(batch=4, context=4096, q_len=3000, causal=True, num_tokens=4 * 3000)   # same bucket
    assert (short.block_q, short.block_m) == (64, 256)


def test_forcing_block_q_alone_resizes_the_tile_rows(h200):
    with ops.forced_launch(block_q=8):
        cfg = launch(batch=4, context=4096, q_len=4096, causal=True)
    assert (cfg.block_q, cfg.block_m) == (8, 32)


def test_inline_page_ids_are_never_applied_off_nvidia(monkeypatch, files):
    monkeypatch.setattr(_runtime, "gpu_arch", lambda index=None: "gfx942")
    monkeypatch.setattr(_runtime, "multiprocessor_count", lambda index: 304)
    monkeypatch.setattr(_runtime, "interpreting", lambda: False)
    files("user", doc([entry(launch=dict(FAST, page_ids_asm=True))], arch="gfx942"), arch="gfx942")
    cfg = launch()
    assert cfg.block_n == FAST["block_n"] and cfg.page_ids_asm is False


# ----------------------------------------------------------------------------- sources

def test_the_user_file_wins_bucket_by_bucket_over_the_shipped_one(h200, files):
    other = dict(FAST, num_warps=4, block_n=128)
    files("shipped", doc([entry(launch=other), entry(batch=64, context=8192, launch=other)]))
    files("user", doc([entry()]))
    assert tuned_fields(launch()) == FAST
    assert tuned_fields(launch(batch=64, context=8192)) == other
    info = ops.tuned_configs()
    assert info["arch"] == "sm_90" and info["buckets"] == 2
    assert [(f["source"], f["state"], f["buckets"]) for f in info["files"]] == [("user", "in force", 1),
                                                                                ("shipped", "in force", 2)]
    with ops.tuned_sources("shipped"):
        assert tuned_fields(launch()) == other
    with ops.tuned_sources():
        assert launch().num_stages == 5 and launch().block_n == 64
    assert tuned_fields(launch()) == FAST


def test_the_variable_may_name_a_file(h200, files, tmp_path, monkeypatch):
    path = tmp_path / "mine.json"
    path.write_text(json.dumps(doc([entry()])))
    monkeypatch.setenv(tuned.ENV, str(path))
    clear_tuned_caches()
    assert tuned_fields(launch()) == FAST
    assert ops.tuned_configs()["files"][0]["path"] == str(path)


def test_the_default_user_file_is_in_the_xdg_cache(h200, files, tmp_path, monkeypatch):
    monkeypatch.delenv(tuned.ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert ops.tuned_user_path("sm_90") == tmp_path / "xdg" / "dflash-rocm-plugin" / "tuned" / "sm_90.json"
    ops.tuned_user_path("sm_90").parent.mkdir(parents=True)
    ops.tuned_user_path("sm_90").write_text(json.dumps(doc([entry()])))
    clear_tuned_caches()
    assert tuned_fields(launch()) == FAST


def test_off_turns_the_shipped_file_off_too(h200, files, monkeypatch):
    files("shipped", doc([entry()]))
    assert tuned_fields(launch()) == FAST
    monkeypatch.setenv(tuned.ENV, "off")
    clear_tuned_caches()
    assert launch().num_stages == 5
    assert ops.tuned_configs()["off"] is True


# ----------------------------------------------------------------------------- bad files

BAD = {
    "malformed JSON": ('{"format": 1, "entries": [', "Expecting"),
    "another plugin version": (doc([entry()], plugin="0.0.9"), "0.0.9"),
    "another format": (doc([entry()], format=2), "format 2"),
    "another architecture": (doc([entry()], arch="gfx942"), "gfx942"),
    "unknown top-level field": (doc([entry()], comment="x"), "unknown fields ['comment']"),
    "unknown entry field": (doc([entry(window=128)]), "unknown entry fields ['window']"),
    "unknown launch field": (doc([entry(launch=dict(FAST, block_m=128))]), "unknown ['block_m']"),
    "missing launch field": (doc([entry(launch={k: v for k, v in FAST.items() if k != "num_splits"})]),
                             "missing ['num_splits']"),
    "value out of range": (doc([entry(launch=dict(FAST, num_splits=65))]), "num_splits=65"),
    "block_q not a power of two": (doc([entry(launch=dict(FAST, block_q=3))]), "block_q=3"),
    "block_q too large": (doc([entry(launch=dict(FAST, block_q=512))]), "block_q=512"),
    "block_q not an int": (doc([entry(launch=dict(FAST, block_q=True))]), "block_q=True"),
    "not a bucket": (doc([entry(context=10000)]), "context 10000"),
    "unknown dtype": (doc([entry(dtype="float8")]), "dtype 'float8'"),
    "unknown backend": (doc([entry(backend="ck")]), "backend 'ck'"),
    "fp8 dots other than Q K^T": (doc([entry(kv="float8_e4m3fn", launch=dict(FAST, fp8_dots="pv"))]),
                                  "fp8_dots='pv'"),
    "two entries for one bucket": (doc([entry(), entry()]), "same bucket"),
    "dense true": (doc([entry(dense=True)]), "dense is neither false nor an object"),
    "unknown dense field": (doc([entry(dense=dict(DENSE, use_desc=False))]), "dense is neither false nor an object"),
    "dense value out of range": (doc([entry(dense=dict(DENSE, block_m=96))]), "block_m=96"),
    "dense key tiles wider than its query tiles": (doc([entry(dense=dict(DENSE, block_m=32))]),
                                                   "block_n 64 exceeds block_m 32"),
    "an entry without launch, backend or dense": (doc([entry(launch=None)]), "none of launch, backend and dense"),
    "not an object": ("[1, 2]", "not a JSON object"),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_a_bad_file_is_ignored_with_one_warning(h200, files, caplog, name):
    caplog.set_level(logging.WARNING, logger=LOGGER)  # whatever level doctor.main left the package logger at
    bad, says = BAD[name]
    files("shipped", doc([entry(batch=64, context=8192)]))
    files("user", bad)
    for _ in range(3):
        assert launch().num_stages == 5                                        # the rules, no crash
        assert tuned_fields(launch(batch=64, context=8192)) == FAST            # the shipped file still counts
    ops.tuned_configs()
    (warning,) = warnings_from(caplog)
    assert str(files.user / "sm_90.json") in warning.getMessage() and says in warning.getMessage()
    state = ops.tuned_configs()["files"][0]["state"]
    assert state.startswith("ignored: ") and says in state


JSON = st.recursive(st.none() | st.booleans() | st.integers(-3, 300) | st.sampled_from(["bfloat16", "triton", "x"]),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
                        st.sampled_from(["heads", "dtype", "q", "launch", "block_n", "num_splits", "page", "causal"]),
                        inner, max_size=5), max_leaves=12)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(entries=st.lists(JSON | st.builds(entry), max_size=3))
def test_whatever_the_file_holds_a_call_never_fails(h200, files, entries):
    files("user", doc(entries))
    cfg = launch()
    assert cfg.num_splits >= 1 and cfg.block_n in (16, 32, 64, 128, 256)


def test_an_unreadable_entry_rejects_the_whole_file(h200, files):
    files("user", doc([entry(), entry(batch=64, context=8192, launch=dict(FAST, num_warps=3))]))
    assert launch().num_stages == 5


def test_a_file_written_by_ops_reads_back(files, tmp_path):
    document = ops.tuned_document("sm_90", [entry()], device="NVIDIA H200")
    path = tmp_path / "x.json"
    path.write_text(json.dumps(document))
    assert ops.read_tuned_file(path, "sm_90") == [entry()]
    with pytest.raises(ValueError, match="made for 'sm_90'"):
        ops.read_tuned_file(path, "gfx950")
    with pytest.raises(ValueError, match="num_warps"):
        ops.tuned_document("sm_90", [entry(launch=dict(FAST, num_warps=3))])


def test_the_shipped_files_are_current():
    """Every file shipped in the package reads without a warning under this plugin version."""
    for path in sorted(tuned.SHIPPED_DIR.glob("*.json")):
        ops.read_tuned_file(path, path.stem)


# ----------------------------------------------------------------------------- graph safety

def _call(batch, context, seq_len, page=16, q_len=16):
    pages = context // page
    q = torch.empty(batch * q_len, 32, 128, dtype=torch.bfloat16)
    cache = torch.empty(batch * pages, page, 8, 128, dtype=torch.bfloat16)
    table = torch.arange(batch * pages, dtype=torch.int32).reshape(batch, pages)
    seq_lens = torch.full((batch,), seq_len, dtype=torch.int32)
    qsl = torch.arange(0, (batch + 1) * q_len, q_len, dtype=torch.int32)
    return AttentionCall(q, cache, cache, table, seq_lens, qsl, q, causal=False, scale=1.0, window=0, softcap=0.0,
                         max_query_len=q_len, num_kv_splits=None, workspace=None)


def test_same_shapes_give_the_same_tuned_launch_whatever_the_device_values(h200, files):
    files("user", doc([entry(batch=8, context=4096, launch=dict(FAST, num_splits=8))]))
    runs = {triton_backend.plan(_call(8, 4096, seq_len)) for seq_len in (16, 1000, 4096)}
    assert len(runs) == 1
    (cfg,) = runs
    assert cfg.num_splits == 8 and cfg.block_n == FAST["block_n"]
    described = ops.describe_launch(num_tokens=128, num_seqs=8, num_q_heads=32, num_kv_heads=8, head_dim=128,
                                    page_size=16, kv_capacity=4096, max_query_len=16, dtype=torch.bfloat16)
    assert described.launch == cfg
    assert described.workspace_floats == 8 * 128 * 32 * 129


# ----------------------------------------------------------------------------- backend on ROCm

@pytest.fixture
def rocm_with_aiter(monkeypatch, clean_aiter_state, files):
    from tests.core.test_aiter_selection import FakeAiter
    monkeypatch.setattr(_runtime, "is_rocm", lambda: True)
    monkeypatch.setattr(aiter_backend, "_on_gpu", lambda t: True)
    return FakeAiter(monkeypatch)


def test_a_triton_entry_keeps_its_bucket_off_aiter_under_auto(rocm_with_aiter, files):
    from tests.core.test_aiter_selection import run_checked, small_case
    case = small_case()
    bucket = ops.tuned_bucket(num_tokens=case.q.shape[0], num_seqs=2, max_query_len=None,
                              kv_keys=case.block_table.shape[1] * 8, page_size=8)
    q, batch, context, page = bucket
    run_checked(case)
    assert len(rocm_with_aiter.calls) == 1                                     # auto: AITER serves the draft
    files("user", doc([entry(heads=(4, 2, 16), dtype="float16", kv="float16", q=q, batch=batch, context=context,
                             page=page, launch=None, backend="triton")], arch="cpu"), arch="cpu")
    run_checked(case)
    assert len(rocm_with_aiter.calls) == 1                                     # the tuned entry: Triton
    described = ops.describe_launch(num_tokens=case.q.shape[0], num_seqs=2, num_q_heads=4, num_kv_heads=2,
                                    head_dim=16, page_size=8, kv_capacity=context, dtype=torch.float16)
    assert described.backend == "triton" and "tuned" in described.reason
    run_checked(case, backend="aiter")                                         # an explicit choice wins
    assert len(rocm_with_aiter.calls) == 2
    assert backends.policy(None, backends.ATTENTION_ENV, backends.ATTENTION_CHOICES) == "auto"


# ----------------------------------------------------------------------------- doctor

def test_doctor_says_which_files_are_in_force(h200, files):
    from dflash_rocm_plugin import doctor
    files("user", doc([entry(), entry(batch=64, context=8192)]))
    report = doctor.collect(hosts=())
    assert report["tuned_launches"]["buckets"] == 2
    line = next(x for x in doctor.render(report).splitlines() if x.startswith("tuned launches: "))
    assert line.startswith("tuned launches: 2 shape buckets for sm_90")
    assert f"user {files.user / 'sm_90.json'}: in force (2 buckets)" in line
    assert f"shipped {files.shipped / 'sm_90.json'}: absent" in line
