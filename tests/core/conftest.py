"""Fixtures shared by the core tests."""

import sys

import pytest

from dflash_rocm_plugin.ops import backends
from dflash_rocm_plugin.ops.backends import aiter, aiter_loader
from tests.conftest import clear_tuned_caches  # noqa: F401 - the core tests import it from here


@pytest.fixture
def clean_aiter_state(monkeypatch):
    """No AITER policy in the environment (nor one read already), no `aiter` module, no cached AITER
    outcome, warning or disabled path."""
    monkeypatch.delenv(backends.ATTENTION_ENV, raising=False)
    monkeypatch.delenv(backends.GREEDY_ENV, raising=False)
    monkeypatch.delitem(sys.modules, "aiter", raising=False)
    monkeypatch.setattr(aiter_loader, "_load_result", None)
    monkeypatch.setattr(aiter_loader, "_warned", set())
    for path in (aiter.ATTENTION, aiter.GREEDY):
        monkeypatch.setattr(path, "disabled_reason", None)
    backends._env_policy.cache_clear()
    yield
    backends._env_policy.cache_clear()


@pytest.fixture(autouse=True)
def no_tuned_launches(monkeypatch):
    """The chooser's own rules: no tuned launch file of this machine's user (or the package) is read.
    Tests of the tuned lookup point DFLASH_ROCM_TUNED_CONFIGS elsewhere and clear the caches."""
    from dflash_rocm_plugin.ops import tuned
    monkeypatch.setenv(tuned.ENV, "off")
    clear_tuned_caches()
    yield
    clear_tuned_caches()
