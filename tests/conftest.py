"""Every suite: run Triton interpreted when there is no GPU.  Must happen before any kernel import."""

import os

try:
    import torch
    _has_gpu = torch.cuda.is_available()
except ImportError:  # pragma: no cover
    _has_gpu = False
if not _has_gpu:
    os.environ.setdefault("TRITON_INTERPRET", "1")
