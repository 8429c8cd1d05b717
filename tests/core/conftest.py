"""Fixtures shared by the core tests."""

import sys

import pytest

from dflash_rocm_plugin.ops import aiter_paths, impl_select


@pytest.fixture
def clean_aiter_state(monkeypatch):
    """No AITER policy in the environment, no `aiter` module, no cached AITER outcome or disabled path."""
    monkeypatch.delenv(impl_select.ATTENTION_ENV, raising=False)
    monkeypatch.delenv(impl_select.GREEDY_ENV, raising=False)
    monkeypatch.delitem(sys.modules, "aiter", raising=False)
    aiter_paths.reset()
    for path in (impl_select.ATTENTION, impl_select.GREEDY):
        monkeypatch.setattr(path, "disabled_reason", None)
    yield
    aiter_paths.reset()
