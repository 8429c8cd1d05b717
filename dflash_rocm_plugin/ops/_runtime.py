"""Where the kernels run: platform facts the launch decisions depend on."""

from __future__ import annotations

import functools
import os
import re

import torch

# The oldest Triton the kernels are written for (tl.dot input_precision, inline_asm_elementwise).
MIN_TRITON = (3, 2)


def next_power_of_2(n: int) -> int:
    return 1 if n <= 1 else 1 << (int(n) - 1).bit_length()


@functools.lru_cache(maxsize=None)
def triton_problem() -> str | None:
    """Why the kernels cannot run here (no ``triton`` module, or one too old), or None.

    The plugin does not depend on the ``triton`` distribution: each GPU build of torch brings its
    own (``pytorch-triton-rocm`` on ROCm), so this is checked instead of declared.
    """
    try:
        import triton
    except Exception as exc:  # noqa: BLE001 - a broken install raises more than ImportError
        return (f"`import triton` failed ({type(exc).__name__}: {exc}); GPU builds of torch bring their "
                "own Triton (pytorch-triton-rocm on ROCm); with a CPU-only torch, "
                "pip install 'dflash-rocm-plugin[triton]'")
    version = str(getattr(triton, "__version__", ""))
    m = re.match(r"(\d+)\.(\d+)", version)
    if m is None or tuple(int(x) for x in m.groups()) < MIN_TRITON:
        need = ".".join(map(str, MIN_TRITON))
        return (f"triton {version or '(unknown version)'} is older than {need}, the oldest the kernels "
                f"support; use a torch build that ships Triton >= {need}")
    return None


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0").strip() not in ("", "0")


def use_interpreter_without_gpu(device=None) -> bool:
    """Run Triton interpreted when the kernels will see CPU tensors -- ``device`` is the CPU, or it is
    None and torch sees no GPU -- unless the user set ``TRITON_INTERPRET``; True when interpreting.

    Triton reads the variable when it is first imported, so this must run before that.
    """
    on_cpu = torch.device(device).type == "cpu" if device is not None else not torch.cuda.is_available()
    if on_cpu and "TRITON_INTERPRET" not in os.environ:
        os.environ["TRITON_INTERPRET"] = "1"
    return interpreting()


def is_rocm() -> bool:
    return getattr(torch.version, "hip", None) is not None


def require_launchable(device: torch.device) -> None:
    """Triton compiles for GPUs; CPU tensors only run under the interpreter."""
    if device.type == "cpu" and not interpreting():
        raise ValueError(
            "tensors are on the CPU, where Triton kernels only run interpreted: set "
            "TRITON_INTERPRET=1 before the first call (slow; for tests), or move the tensors "
            "to a CUDA/HIP device")
    if device.type not in ("cpu", "cuda"):
        raise ValueError(f"device {device} is not supported (supported: cuda/hip GPUs, cpu when interpreting)")


@functools.lru_cache(maxsize=None)
def multiprocessor_count(device_index: int | None) -> int:
    if not torch.cuda.is_available():
        return 8  # interpreter: small, but large enough to exercise split-KV
    return torch.cuda.get_device_properties(device_index or 0).multi_processor_count


@functools.lru_cache(maxsize=None)
def shared_memory_per_block(device_index: int | None) -> int:
    """Bytes of shared memory one block may opt into (the limit Triton compiles against)."""
    if not torch.cuda.is_available():
        return 64 * 1024
    props = torch.cuda.get_device_properties(device_index or 0)
    return int(getattr(props, "shared_memory_per_block_optin", 0) or 48 * 1024)


@functools.lru_cache(maxsize=None)
def gpu_arch(device_index: int | None = None) -> str:
    """'gfx942', 'sm_90', ... or 'cpu'."""
    if not torch.cuda.is_available():
        return "cpu"
    props = torch.cuda.get_device_properties(device_index or 0)
    if is_rocm():
        return getattr(props, "gcnArchName", "gfx").split(":")[0]
    return f"sm_{props.major}{props.minor}"


_kernels = None


def kernels():
    """Import the Triton kernels lazily, so TRITON_INTERPRET can be set first."""
    global _kernels
    if _kernels is None:
        from dflash_rocm_plugin.kernels import kv_cache, paged_attention
        _kernels = paged_attention, kv_cache
    return _kernels


def extend_kernel():
    """The dense-K/V prefill kernel, imported at its first launch."""
    from dflash_rocm_plugin.kernels import extend_attention
    return extend_attention.extend_attention_kernel
