"""GPU-only suite: every test here is skipped, with the reason, on a machine without a CUDA/HIP GPU."""

import pytest
import torch

HAS_GPU = torch.cuda.is_available()


def pytest_collection_modifyitems(config, items):
    if HAS_GPU:
        return
    skip = pytest.mark.skip(reason="needs a CUDA or HIP GPU (Triton compiles these kernels for a device; "
                                   "the CPU interpreter is covered by tests/core)")
    for item in items:
        if "tests/gpu" in str(item.fspath).replace("\\", "/"):
            item.add_marker(skip)
