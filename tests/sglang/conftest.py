"""SGLang suite set-up: real sglang 0.5.23 on CPU tensors, Triton interpreted.

The root conftest sets TRITON_INTERPRET before any kernel import.  SGLang's runtime
context (parallel sizes, published server args) is installed once per test process,
as a scheduler process would have it.
"""

import pytest
import torch

pytest.importorskip("sglang")

torch.set_grad_enabled(False)


def _install_runtime_context() -> None:
    from sglang.srt.runtime_context import get_context, get_parallel

    get_parallel().override_permanently(attn_tp_size=1, attn_dcp_rank=0)
    get_context().override_server_args().install()


_install_runtime_context()


@pytest.fixture(scope="session", autouse=True)
def registered():
    from dflash_rocm_plugin.sglang import register

    register()
