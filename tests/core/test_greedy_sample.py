"""ops.greedy_sample returns exactly torch.argmax(logits, -1) as int32, on every kind of row.

Named rows (random, tied, +inf, -inf, all -inf, NaN inside, all NaN, all negative) and
hypothesis-drawn batches, in float16/bfloat16/float32, with vocabularies up to 152K; with and
without a preallocated ``out`` (written in place, same object returned).

The opt-in AITER path (``DFLASH_ROCM_GREEDY_IMPL=aiter``) runs against a fake ``aiter`` whose
``greedy_sample`` behaves like AITER's HIP kernel (NaN never wins, ties go to the lowest index)
and, like the builds SGLang reports, answers ``vocab_size`` on all-NaN / all -inf rows: the
guard must turn those into torch's answer.  Its one documented difference (rows mixing NaN and
numbers) is pinned down too, as are fallbacks (fp32, ragged vocabulary, raising kernel) and the
single warning.
"""

from __future__ import annotations

import logging
import sys
import types

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dflash_rocm_plugin import ops
from dflash_rocm_plugin.ops import _runtime, backends
from dflash_rocm_plugin.ops.backends import aiter as aiter_backend
from dflash_rocm_plugin.ops.backends import aiter_loader

DTYPES = [torch.float16, torch.bfloat16, torch.float32]
NAN, INF = float("nan"), float("inf")


@pytest.fixture(autouse=True)
def clean_state(clean_aiter_state):
    yield


def named_rows(vocab: int, *, mixed_nan: bool = True) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(vocab)
    rand = torch.randn(vocab, generator=gen) * 4
    rows = {"random": rand, "all equal": torch.zeros(vocab), "all -inf": torch.full((vocab,), -INF),
            "all nan": torch.full((vocab,), NAN), "all negative": -rand.abs() - 1.0}
    if vocab >= 2:
        tied = rand.clone()
        tied[[vocab // 2, vocab - 1]] = rand.max() + 1.0
        rows["tied max"] = tied
        some_inf = rand.clone()
        some_inf[[vocab - 1, vocab // 3]] = INF
        rows["+inf twice"] = some_inf
        lone = torch.full((vocab,), -INF)
        lone[vocab - 1] = -1e4
        rows["-inf but one"] = lone
    if vocab >= 3 and mixed_nan:
        nan_in = rand.clone()
        nan_in[[vocab - 2, vocab // 3]] = NAN
        rows["nan inside"] = nan_in
        nan_last = rand.clone()
        nan_last[-1] = NAN
        rows["nan last"] = nan_last
        both = rand.clone()
        both[[0, vocab - 1]] = torch.tensor([INF, NAN])
        rows["+inf then nan"] = both
    return rows


def batch(vocab, dtype, **kw) -> torch.Tensor:
    return torch.stack(list(named_rows(vocab, **kw).values())).to(dtype)


def assert_argmax(logits: torch.Tensor, got: torch.Tensor) -> None:
    want = torch.argmax(logits, dim=-1)
    assert got.dtype == torch.int32 and got.shape == want.shape
    assert torch.equal(got.long(), want), f"rows differ: {(got.long() != want).nonzero().flatten().tolist()}"


# ----------------------------------------------------------------------------- default (torch) path

@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("vocab", [1, 2, 3, 17, 1000, 151936, 152064])
def test_named_rows_equal_torch_argmax(dtype, vocab):
    logits = batch(vocab, dtype)
    assert_argmax(logits, ops.greedy_sample(logits))
    out = torch.full((logits.shape[0],), -7, dtype=torch.int32)
    got = ops.greedy_sample(logits, out=out)
    assert got is out
    assert_argmax(logits, out)


def test_strided_logits_and_out():
    logits = batch(64, torch.float32).t().contiguous().t()  # column-major rows
    parent = torch.full((logits.shape[0], 3), -7, dtype=torch.int32)
    out = parent[:, 1]
    assert ops.greedy_sample(logits, out=out) is out
    assert_argmax(logits, out)
    assert (parent[:, 0] == -7).all() and (parent[:, 2] == -7).all()


def test_zero_rows():
    logits = torch.zeros(0, 32)
    assert ops.greedy_sample(logits).shape == (0,)
    out = torch.empty(0, dtype=torch.int32)
    assert ops.greedy_sample(logits, out=out) is out


@st.composite
def logits_batches(draw):
    rows = draw(st.integers(0, 6))
    vocab = draw(st.one_of(st.integers(1, 300), st.sampled_from([151936, 152064])))
    dtype = draw(st.sampled_from(DTYPES))
    seed = draw(st.integers(0, 2 ** 31 - 1))
    gen = torch.Generator().manual_seed(seed)
    # Few distinct values make ties common; specials are sprinkled with drawn rates.
    levels = draw(st.sampled_from([3, 50, 10 ** 6]))
    x = torch.randint(0, levels, (rows, vocab), generator=gen).float() - levels / 2
    for value, rate in ((NAN, draw(st.sampled_from([0.0, 1e-3, 0.3, 1.0]))),
                        (-INF, draw(st.sampled_from([0.0, 0.5, 1.0]))),
                        (INF, draw(st.sampled_from([0.0, 1e-3])))):
        x[torch.rand(rows, vocab, generator=gen) < rate] = value
    return x.to(dtype)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(logits=logits_batches(), with_out=st.booleans())
def test_hypothesis_equal_torch_argmax(logits, with_out):
    if with_out:
        out = torch.full((logits.shape[0],), -7, dtype=torch.int32)
        assert ops.greedy_sample(logits, out=out) is out
    else:
        out = ops.greedy_sample(logits)
    assert_argmax(logits, out)


@pytest.mark.parametrize("logits, out, match", [
    (torch.zeros(4), None, "logits must have 2 dimensions"),
    (torch.zeros(2, 4, dtype=torch.int32), None, "logits has dtype"),
    (torch.zeros(2, 0), None, "empty vocabulary"),
    (torch.zeros(2, 4), torch.zeros(2, dtype=torch.int64), "out has dtype"),
    (torch.zeros(2, 4), torch.zeros(3, dtype=torch.int32), "out has 3 rows"),
    (torch.zeros(2, 4), torch.zeros(2, 1, dtype=torch.int32), "out must have 1 dimensions"),
])
def test_bad_inputs_are_rejected(logits, out, match):
    with pytest.raises(ValueError, match=match):
        ops.greedy_sample(logits, out=out)


# ----------------------------------------------------------------------------- AITER path (fake)

FLT_MAX = torch.finfo(torch.float32).max


class FakeAiterGreedy:
    """``aiter.greedy_sample(out, input)`` as AITER's kernel computes it, plus the reported
    ``vocab_size`` answer on rows where nothing beats its -FLT_MAX seed (all NaN / all -inf)."""

    def __init__(self, monkeypatch, *, raises=None, version="0.1.16"):
        self.calls = 0
        self.raises = raises
        module = types.ModuleType("aiter")
        module.__version__ = version
        module.greedy_sample = self.greedy_sample
        monkeypatch.setitem(sys.modules, "aiter", module)

    def greedy_sample(self, out, logits):
        self.calls += 1
        if self.raises is not None:
            raise self.raises
        assert out.dtype == torch.int32 and out.is_contiguous() and logits.stride(1) == 1
        values = logits.float().nan_to_num(nan=-INF, posinf=INF, neginf=-INF)
        ids = torch.argmax(values, dim=-1)
        nothing = values.amax(dim=-1) <= -FLT_MAX
        out.copy_(torch.where(nothing, logits.shape[1], ids))


@pytest.fixture
def forced_aiter(monkeypatch):
    monkeypatch.setenv(backends.GREEDY_ENV, "aiter")
    monkeypatch.setattr(_runtime, "is_rocm", lambda: True)
    monkeypatch.setattr(aiter_backend, "_on_gpu", lambda t: True)


def warnings_from(caplog):
    return [r for r in caplog.records if r.name == "dflash_rocm_plugin.aiter" and r.levelno >= logging.WARNING]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("vocab", [16, 1024, 151936])
def test_aiter_path_with_guard_equals_torch(forced_aiter, monkeypatch, dtype, vocab):
    fake = FakeAiterGreedy(monkeypatch)
    logits = batch(vocab, dtype, mixed_nan=False)
    assert_argmax(logits, ops.greedy_sample(logits))
    out = torch.full((logits.shape[0],), -7, dtype=torch.int32)
    assert ops.greedy_sample(logits, out=out) is out
    assert_argmax(logits, out)
    assert fake.calls == 2


def test_guard_is_what_fixes_the_bad_rows(forced_aiter, monkeypatch):
    fake = FakeAiterGreedy(monkeypatch)
    logits = torch.stack([torch.full((32,), NAN), torch.full((32,), -INF)]).half()
    raw = torch.empty(2, dtype=torch.int32)
    fake.greedy_sample(raw, logits)
    assert raw.tolist() == [32, 32]  # what the kernel alone answers
    assert ops.greedy_sample(logits).tolist() == [0, 0]


def test_aiter_path_difference_on_rows_mixing_nan_and_numbers(forced_aiter, monkeypatch):
    """Documented in ops.backends.aiter: the opt-in path skips NaN; the default path is exact."""
    FakeAiterGreedy(monkeypatch)
    row = torch.arange(32, dtype=torch.float16)
    row[5] = NAN
    logits = row[None]
    assert ops.greedy_sample(logits).tolist() == [31]
    assert ops.greedy_sample(logits, backend="auto").tolist() == [5] == torch.argmax(logits, -1).tolist()


@pytest.mark.parametrize("why, logits", [
    ("fp32 can hold AITER's -FLT_MAX seed", batch(32, torch.float32)),
    ("ragged vocabulary", batch(17, torch.float16)),
    ("rows not unit-stride", batch(32, torch.float16).t().contiguous().t()),
])
def test_aiter_path_leaves_unsafe_inputs_to_torch(forced_aiter, monkeypatch, why, logits):
    fake = FakeAiterGreedy(monkeypatch)
    assert_argmax(logits, ops.greedy_sample(logits))  # mixed-NaN rows included: torch is exact
    assert fake.calls == 0, why


def test_aiter_kernel_that_raises_falls_back_once(forced_aiter, monkeypatch, caplog):
    fake = FakeAiterGreedy(monkeypatch, raises=RuntimeError("hipErrorNoBinaryForGpu"))
    logits = batch(64, torch.bfloat16)
    for _ in range(3):
        assert_argmax(logits, ops.greedy_sample(logits))
    assert fake.calls == 1
    (warning,) = warnings_from(caplog)
    assert "hipErrorNoBinaryForGpu" in warning.getMessage()
    assert ops.kernel_paths()["greedy_sample"]["impl"] == "torch"


def test_aiter_forced_off_rocm_fails_at_first_use(monkeypatch):
    monkeypatch.setenv(backends.GREEDY_ENV, "aiter")
    with pytest.raises(ops.AiterUnavailable, match=r"DFLASH_ROCM_GREEDY_IMPL=aiter.*torch\.version\.hip"):
        ops.greedy_sample(batch(32, torch.float16))


def test_aiter_forced_but_absent_names_the_import(forced_aiter):
    with pytest.raises(ops.AiterUnavailable, match=r"greedy sampling.*import aiter"):
        ops.greedy_sample(batch(32, torch.float16))


def test_aiter_forced_but_old_names_the_version(forced_aiter, monkeypatch):
    FakeAiterGreedy(monkeypatch, version="0.1.14")
    with pytest.raises(ops.AiterUnavailable, match=r"0\.1\.14 is older than 0\.1\.16"):
        ops.greedy_sample(batch(32, torch.float16))


def test_auto_keeps_torch_even_with_working_aiter(monkeypatch):
    monkeypatch.setattr(_runtime, "is_rocm", lambda: True)
    monkeypatch.setattr(aiter_backend, "_on_gpu", lambda t: True)
    fake = FakeAiterGreedy(monkeypatch)
    logits = batch(32, torch.float16)
    assert_argmax(logits, ops.greedy_sample(logits))
    assert fake.calls == 0
    assert ops.kernel_paths()["greedy_sample"]["impl"] == "torch"
    monkeypatch.setenv(backends.GREEDY_ENV, "aiter")
    backends._env_policy.cache_clear()  # as a new process would read it
    assert ops.kernel_paths()["greedy_sample"]["impl"] == "aiter+torch"


def test_bad_policy_value(monkeypatch):
    monkeypatch.setenv(backends.GREEDY_ENV, "fast")
    with pytest.raises(ValueError, match=r"DFLASH_ROCM_GREEDY_IMPL='fast'.*auto, torch, aiter"):
        ops.greedy_sample(batch(32, torch.float16))
