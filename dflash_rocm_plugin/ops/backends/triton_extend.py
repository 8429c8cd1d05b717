"""The dense-K/V prefill kernel's launch (kernels/extend_attention.py) for one validated call.

It serves the call's whole prompts of at least ``cfg.block_m`` tokens; the paged kernel, launched
first for the same call with ``EXTEND_MIN_Q`` set, serves the rest.  The order matters only where the
paged launch splits its keys (possible under the interpreter's short tiles): its merge then writes
every row, and this launch's rows overwrite the prompts'.
"""

from __future__ import annotations

import torch

from dflash_rocm_plugin.ops import _runtime
from dflash_rocm_plugin.ops.launch_config import ExtendLaunch

# TMA copies need 16-byte aligned bases and row strides.
_TMA_ALIGN = 16


def _tma_ready(t: torch.Tensor) -> bool:
    return t.data_ptr() % _TMA_ALIGN == 0 and (t.stride(0) * t.element_size()) % _TMA_ALIGN == 0


def _rows(t: torch.Tensor, tokens: int) -> torch.Tensor:
    """``[tokens, kv_heads * head_dim]``: each token's heads side by side (support.extend_layout_problem)."""
    return t.as_strided((tokens, t.shape[1] * t.shape[2]), (t.stride(0), 1))


def launch(q: torch.Tensor, out: torch.Tensor, seq_lens: torch.Tensor, query_start_loc: torch.Tensor,
           new_keys: torch.Tensor, new_values: torch.Tensor, sinks: torch.Tensor | None, scale: float,
           window: int, cfg: ExtendLaunch) -> None:
    tokens, hq, d = q.shape
    num_seqs, hkv = seq_lens.shape[0], new_keys.shape[1]
    keys, values = _rows(new_keys, tokens), _rows(new_values, tokens)
    use_desc = cfg.use_desc and _tma_ready(keys) and _tma_ready(values)
    if use_desc:
        from triton.tools.tensor_descriptor import TensorDescriptor
        block = [cfg.block_n, d]
        keys = TensorDescriptor(keys, list(keys.shape), list(keys.stride()), block)
        values = TensorDescriptor(values, list(values.shape), list(values.stride()), block)
    # The interpreter's bf16 dots are wrong; it runs them in fp32.
    upcast = q.dtype == torch.bfloat16 and _runtime.interpreting()
    grid = (hq, tokens // cfg.block_m + num_seqs)
    _runtime.extend_kernel()[grid](
        q, keys, values, out, seq_lens, query_start_loc, q if sinks is None else sinks, scale, window, num_seqs,
        q.stride(0), q.stride(1), new_keys.stride(0), new_values.stride(0), out.stride(0), out.stride(1),
        HEAD_DIM=d, GQA=hq // hkv, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n,
        MIN_QUERY=cfg.block_m, USE_WINDOW=window > 0, USE_SINKS=sinks is not None, USE_DESC=use_desc, UPCAST=upcast,
        DOT_PRECISION="ieee" if q.dtype == torch.float32 or upcast else None,
        num_warps=cfg.num_warps, num_stages=cfg.num_stages)
