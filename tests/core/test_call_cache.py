"""Prepared launches (ops/call_cache.py): a call whose key was seen before launches exactly what the
uncached path launches, and is checked exactly as strictly.

* for random calls in random order (hypothesis), the launches recorded with the cache equal those
  recorded with the cache emptied before every call: grids, scalar arguments, constexprs, and the
  tensors each pointer argument receives;
* ``forced`` launch fields and tuned-file changes take effect on the next call of a cached key;
* every bad argument of tests/core/test_bad_inputs.py is still refused, by name, after the good
  call of the same shapes was cached; TRITON_INTERPRET is still read for CPU tensors;
* outputs equal the float64 reference for a cached key with new data; AITER keeps serving cached
  calls under ``auto`` on ROCm; the cache stays bounded.
"""

from __future__ import annotations

import json

import pytest
import torch
from hypothesis import HealthCheck, given, settings, strategies as st

from dflash_rocm_plugin import __version__, ops
from dflash_rocm_plugin.ops import _runtime, call_cache, launch_config, tuned
from tests.core.cases import build, check_against_reference
from tests.core.conftest import clear_tuned_caches
from tests.core.test_bad_inputs import BAD_ATTENTION, call as bad_call


class Recorder:
    """Stands in for the kernel modules: records every launch, with tensors as what the kernel reads
    of them (address, shape, strides, dtype)."""

    def __init__(self):
        self.launches = []
        self.known = {}  # name -> tensor: pointers into it are recorded as (name, byte offset)
        recorder = self

        class Kernel:
            def __init__(self, name):
                self.name = name

            def __getitem__(self, grid):
                def launch(*args, **kwargs):
                    recorder.launches.append((self.name, tuple(grid), tuple(recorder.seen(a) for a in args),
                                              tuple(sorted(kwargs.items()))))
                return launch

        class Kernels:
            paged_attention_kernel = Kernel("attention")
            merge_splits_kernel = Kernel("merge")
        self.modules = (Kernels(), None)

    def seen(self, a):
        if not isinstance(a, torch.Tensor):
            return (type(a).__name__, a)
        for name, t in self.known.items():
            base = t.untyped_storage().data_ptr()
            if base <= a.data_ptr() < base + t.untyped_storage().nbytes():
                return ("tensor", (name, a.data_ptr() - base), tuple(a.shape), a.stride(), a.dtype)
        # out=None, or the fallback workspace (whose size depends on what ran before): fresh memory,
        # read through the strides passed as integers.
        return ("tensor", "allocated", a.dtype)

    def call(self, args, kw):
        self.known = {f"arg{i}": t for i, t in enumerate(args)}
        self.known.update((k, v) for k, v in kw.items() if isinstance(v, torch.Tensor))
        return ops.paged_attention(*args, **kw)


@pytest.fixture
def recorder(monkeypatch):
    r = Recorder()
    monkeypatch.setattr(_runtime, "kernels", lambda: r.modules)
    call_cache.clear()
    yield r
    call_cache.clear()


FP8 = torch.float8_e4m3fn


@st.composite
def shapes(draw):
    """Shapes several calls share, so that keys differing in one feature meet in one pool."""
    hq, hkv, d = draw(st.sampled_from([(4, 2, 32), (8, 1, 64), (6, 3, 16), (2, 2, 128)]))
    n = draw(st.integers(1, 4))
    return dict(hq=hq, hkv=hkv, d=d, n=n, q_lens=draw(st.lists(st.integers(1, 20), min_size=n, max_size=n)),
                page=draw(st.sampled_from([1, 8, 16])), width=draw(st.integers(1, 40)),
                dtype=draw(st.sampled_from([torch.float32, torch.float16, torch.bfloat16])),
                pad=draw(st.integers(0, 3)), extra_rows=draw(st.integers(0, 2)))


@st.composite
def features(draw, s):
    """What one call of shapes ``s`` adds to them: layouts, flags and optional arguments."""
    fp8 = draw(st.booleans())
    return dict(
        fp8=fp8, layout=draw(st.sampled_from(["contiguous", "heads_major", "offset"])),
        v_padded=draw(st.booleans()), q_strided=draw(st.booleans()), table_strided=draw(st.booleans()), causal=draw(st.booleans()),
        max_query_len=draw(st.none() | st.integers(0, 4)), num_kv_splits=draw(st.none() | st.integers(1, 6)),
        sliding_window=draw(st.none() | st.integers(1, 300)), softcap=draw(st.sampled_from([None, 30, 50.0])),
        scale=draw(st.sampled_from([None, 0.125, 1])), sinks=draw(st.booleans()),
        k_scale=draw(st.sampled_from([None, 1, s["hkv"]])) if fp8 else None,
        out=draw(st.sampled_from([None, "plain", "strided"])), workspace=draw(st.booleans()),
        backend=draw(st.sampled_from([None, "triton", "auto"])))


def make_call(s, f):
    """The arguments of a call (tensors of zeros: nothing runs)."""
    hq, hkv, d, n, q_lens, page, width, dtype = (s[k] for k in ("hq", "hkv", "d", "n", "q_lens", "page", "width",
                                                                 "dtype"))
    cache_dtype = FP8 if f["fp8"] else dtype
    blocks = n * width + 2
    if f["layout"] == "heads_major":
        k = torch.zeros(blocks, hkv, page, d, dtype=dtype).to(cache_dtype).transpose(1, 2)
        v = torch.zeros(blocks, hkv, page, d, dtype=dtype).to(cache_dtype).transpose(1, 2)
    else:
        k = torch.zeros(blocks + 1, page, hkv, d, dtype=dtype).to(cache_dtype)
        v = torch.zeros(blocks + 1, page, hkv, d, dtype=dtype).to(cache_dtype)
        if f["layout"] == "offset":
            k, v = k[1:], v[1:]
    if f["v_padded"]:  # V a view of wider rows than K's
        v = torch.zeros(*k.shape[:3], d + 16, dtype=dtype).to(cache_dtype)[..., :d]
    tokens = sum(q_lens) + s["pad"]
    q = torch.zeros(tokens, hq, d, dtype=dtype)
    if f["q_strided"]:  # a strided view of a wider buffer, as hosts pass a slice of qkv
        q = torch.zeros(tokens, hq + hkv, d, dtype=dtype)[:, :hq]
    qsl = torch.zeros(n + 1, dtype=torch.int32)
    qsl[1:] = torch.tensor(q_lens, dtype=torch.int32).cumsum(0)
    table = torch.zeros(n + s["extra_rows"], width, dtype=torch.int32)
    if f["table_strided"]:
        table = torch.zeros(n + s["extra_rows"], width + 3, dtype=torch.int32)[:, 1:width + 1]
    args = (q, k, v, table, torch.full((n,), page * width, dtype=torch.int32), qsl)
    kw = dict(causal=f["causal"], backend=f["backend"])
    if f["max_query_len"] is not None:
        kw["max_query_len"] = max(q_lens) + f["max_query_len"]
    for name in ("num_kv_splits", "sliding_window", "softcap", "scale"):
        if f[name] is not None:
            kw[name] = f[name]
    if f["sinks"]:
        kw["sinks"] = torch.zeros(hq, dtype=torch.float32)
    if f["k_scale"] is not None:
        kw["k_scale"], kw["v_scale"] = torch.ones(f["k_scale"]), torch.ones(1)
    if f["out"] is not None:
        kw["out"] = torch.zeros_like(q) if f["out"] == "plain" else torch.zeros(tokens, hq, d + 8, dtype=dtype)[..., :d]
    if f["workspace"]:
        kw["workspace"] = torch.zeros(ops.workspace_floats(num_q_heads=hq, num_kv_heads=hkv, head_dim=d,
                                                           max_num_seqs=n, max_kv_len=page * width) + 1)
        kw.pop("num_kv_splits", None)
    return args, kw


@st.composite
def pools(draw):
    """Calls of one set of shapes, each differing from the first in at most two features."""
    s = draw(shapes())
    base = draw(features(s))
    members = [base]
    for _ in range(draw(st.integers(0, 3))):
        other = draw(features(s))
        changed = draw(st.sets(st.sampled_from(sorted(base)), min_size=1, max_size=2))
        members.append({**base, **{k: other[k] for k in changed}})
    for m in members:  # scales only with an fp8 cache
        if not m["fp8"]:
            m["k_scale"] = None
    return [make_call(s, m) for m in members]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pool=pools(), order=st.lists(st.integers(0, 3), min_size=1, max_size=10))
def test_cached_launches_equal_uncached_ones(recorder, pool, order):
    sequence = [pool[i % len(pool)] for i in order]
    call_cache.clear()
    recorder.launches.clear()
    for args, kw in sequence:
        recorder.call(args, kw)
    cached = list(recorder.launches)
    assert 1 <= call_cache.size() <= len(pool)
    recorder.launches.clear()
    for args, kw in sequence:
        call_cache.clear()
        recorder.call(args, kw)
    assert cached == recorder.launches


# (what the first call has beyond the base, what the second changes)
NAMED_CHANGES = [({}, dict(out="plain")), ({}, dict(out="strided")), (dict(out="plain"), dict(out="strided")),
                 ({}, dict(v_padded=True)), ({}, dict(layout="heads_major")), ({}, dict(layout="offset")),
                 ({}, dict(q_strided=True)), ({}, dict(table_strided=True)), ({}, dict(workspace=True)),
                 ({}, dict(sinks=True)), ({}, dict(fp8=True, k_scale=1)), ({}, dict(fp8=True, k_scale=2)),
                 (dict(fp8=True, k_scale=1), dict(k_scale=2)), ({}, dict(num_kv_splits=3))]


@pytest.mark.parametrize("first,change", NAMED_CHANGES,
                         ids=[",".join(f"{k}={v}" for k, v in {**a, **b}.items()) for a, b in NAMED_CHANGES])
def test_one_change_of_layout_or_argument_is_a_new_key(recorder, first, change):
    s = dict(hq=4, hkv=2, d=32, n=2, q_lens=[16, 1], page=16, width=8, dtype=torch.float16, pad=1, extra_rows=1)
    base = dict(dict(fp8=False, layout="contiguous", v_padded=False, q_strided=False, table_strided=False,
                     causal=False, max_query_len=None, num_kv_splits=None, sliding_window=None, softcap=None,
                     scale=None, sinks=False, k_scale=None, out=None, workspace=False, backend=None), **first)
    pool = [make_call(s, base), make_call(s, {**base, **change})]
    test_cached_launches_equal_uncached_ones.hypothesis.inner_test(recorder, pool, [0, 1, 0, 1])
    call_cache.clear()
    for args, kw in pool:
        recorder.call(args, kw)
    assert call_cache.size() == 2


def _small():
    c = build([40, 9], [16, 1], num_q_heads=4, num_kv_heads=2, head_dim=32)
    return c.args(), dict(causal=False, max_query_len=16)


def _attention_constexprs(recorder):
    return dict(recorder.launches[-1][3]) if recorder.launches[-1][0] == "attention" else \
        dict(recorder.launches[-2][3])


def test_forced_fields_apply_to_a_cached_key_and_end_with_the_block(recorder):
    args, kw = _small()
    ops.paged_attention(*args, **kw)
    ops.paged_attention(*args, **kw)
    plain = _attention_constexprs(recorder)
    assert plain["num_stages"] != 3 or plain["BLOCK_N"] != 16
    with launch_config.forced(num_stages=3, block_n=16):
        ops.paged_attention(*args, **kw)
        assert (_attention_constexprs(recorder)["num_stages"], _attention_constexprs(recorder)["BLOCK_N"]) == (3, 16)
    ops.paged_attention(*args, **kw)
    assert _attention_constexprs(recorder) == plain


def test_a_tuned_file_written_later_applies_to_a_cached_key(recorder, tmp_path, monkeypatch):
    args, kw = _small()
    monkeypatch.setenv(tuned.ENV, str(tmp_path))
    monkeypatch.setattr(tuned, "SHIPPED_DIR", tmp_path / "none")
    clear_tuned_caches()
    ops.paged_attention(*args, **kw)
    ops.paged_attention(*args, **kw)
    assert call_cache.size() == 1
    plain = _attention_constexprs(recorder)
    q, batch, context, page = ops.tuned_bucket(num_tokens=17, num_seqs=2, max_query_len=16,
                                               kv_keys=args[3].shape[1] * 16, page_size=16)
    launch = dict(block_n=16, num_warps=2, num_stages=2, num_splits=1, page_ids_asm=False, overlap_qk=False)
    entry = dict(heads=[4, 2, 32], dtype="float32", kv_cache_dtype="float32", causal=False, q=q, batch=batch,
                 context=context, page=page, launch=launch)
    (tmp_path / "cpu.json").write_text(json.dumps(
        {"format": 1, "plugin": __version__, "arch": "cpu", "device": "test", "entries": [entry]}))
    clear_tuned_caches()  # as a new process reads the file
    ops.paged_attention(*args, **kw)
    tuned_run = _attention_constexprs(recorder)
    assert (tuned_run["BLOCK_N"], tuned_run["num_warps"], tuned_run["num_stages"]) == (16, 2, 2)
    with ops.tuned_sources():  # no source: the rules again
        ops.paged_attention(*args, **kw)
        assert _attention_constexprs(recorder) == plain
    monkeypatch.setenv(tuned.ENV, "off")
    clear_tuned_caches()
    ops.paged_attention(*args, **kw)
    assert _attention_constexprs(recorder) == plain


@pytest.mark.parametrize("arg,override,message", BAD_ATTENTION, ids=[f"{a}-{i}" for i, (a, _, _) in enumerate(BAD_ATTENTION)])
def test_bad_arguments_are_refused_after_the_good_call_was_cached(recorder, arg, override, message):
    bad_call()
    bad_call()
    assert call_cache.size() == 1
    launched = len(recorder.launches)
    with pytest.raises(ValueError) as e:
        bad_call(**override)
    assert message in str(e.value)
    assert len(recorder.launches) == launched  # refused before any launch


@pytest.mark.parametrize("name,good,bad", [("max_query_len", 16, 16.0), ("sliding_window", 1, True),
                                            ("num_kv_splits", 2, 2.0), ("max_query_len", 1, True)])
def test_a_value_of_another_type_is_not_a_cached_key(recorder, name, good, bad):
    bad_call(**{name: good})
    bad_call(**{name: good})
    with pytest.raises(ValueError, match=f"{name} must be a positive int"):
        bad_call(**{name: bad})


def test_cpu_tensors_without_the_interpreter_are_refused_on_a_cached_key(recorder, monkeypatch):
    bad_call()
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(ValueError, match="TRITON_INTERPRET=1"):
        bad_call()


def test_a_cached_key_with_new_data_matches_the_reference():
    call_cache.clear()
    for seed in (1, 2, 3):  # same shapes, new values and page order each time
        for causal in (False, True):
            c = build([300, 17, 64], [16, 1, 7], num_q_heads=4, num_kv_heads=2, head_dim=32, seed=seed,
                      layout="kv_interleaved")
            check_against_reference(c, causal=causal, max_query_len=16)
    assert call_cache.size() == 2


def test_the_cache_is_bounded(recorder, monkeypatch):
    monkeypatch.setattr(call_cache, "MAX_ENTRIES", 4)
    args, kw = _small()
    for splits in range(1, 9):
        ops.paged_attention(*args, **kw, num_kv_splits=splits)
    assert call_cache.size() == 4
    ops.paged_attention(*args, **kw, num_kv_splits=8)
    assert call_cache.size() == 4


def test_arguments_of_other_kinds_are_checked_in_full_every_time(recorder):
    args, kw = _small()
    q = torch.nn.Parameter(args[0], requires_grad=False)  # a tensor subclass: not keyed
    ops.paged_attention(q, *args[1:], **kw)
    assert call_cache.size() == 0
    ops.paged_attention(*args, **{**kw, "causal": True})
    ops.paged_attention(*args, **kw, scale=0.5)
    assert call_cache.size() == 2


def test_aiter_keeps_serving_a_cached_key_under_auto_on_rocm(monkeypatch, clean_aiter_state):
    from tests.core.test_aiter_selection import FakeAiter, run_checked, small_case
    from dflash_rocm_plugin.ops.backends import aiter as aiter_backend
    monkeypatch.setattr(_runtime, "is_rocm", lambda: True)
    monkeypatch.setattr(aiter_backend, "_on_gpu", lambda t: True)
    fake = FakeAiter(monkeypatch)
    call_cache.clear()
    case = small_case()
    for _ in range(3):
        run_checked(case)
    assert len(fake.calls) == 3 and call_cache.size() == 1
    run_checked(case, causal=True)  # not AITER's: Triton, cached as well
    run_checked(case, causal=True)
    assert len(fake.calls) == 3 and call_cache.size() == 2
    fake.raises = RuntimeError("boom")  # AITER fails once, and is dropped: Triton serves the cached key
    run_checked(case)
    run_checked(case)
    assert len(fake.calls) == 4


def test_a_key_cached_off_rocm_still_reaches_aiter_on_rocm(monkeypatch, clean_aiter_state):
    from tests.core.test_aiter_selection import FakeAiter, run_checked, small_case
    from dflash_rocm_plugin.ops.backends import aiter as aiter_backend
    call_cache.clear()
    case = small_case()
    run_checked(case)
    assert call_cache.size() == 1
    monkeypatch.setattr(_runtime, "is_rocm", lambda: True)
    monkeypatch.setattr(aiter_backend, "_on_gpu", lambda t: True)
    fake = FakeAiter(monkeypatch)
    run_checked(case)
    assert len(fake.calls) == 1 and call_cache.size() == 1
