"""Every suite: run Triton interpreted when there is no GPU.  Must happen before any kernel import."""

import os

import pytest

try:
    import torch
    _has_gpu = torch.cuda.is_available()
except ImportError:  # pragma: no cover
    _has_gpu = False
if not _has_gpu:
    os.environ.setdefault("TRITON_INTERPRET", "1")


def clear_tuned_caches():
    """Drop the tuned-launch tables read so far: the next call reads the file the environment names now."""
    from dflash_rocm_plugin.ops import tuned
    tuned.table.cache_clear()
    tuned._load.cache_clear()


@pytest.fixture
def tuned_caches_cleared():
    """The tuned tables read under a test's file are dropped after it."""
    yield
    clear_tuned_caches()
