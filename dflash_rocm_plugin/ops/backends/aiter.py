"""AMD AITER kernels, on ROCm only, for the calls they serve exactly.

Attention: AITER's CK ``mha_batch_prefill_func`` takes the non-causal DFlash draft block
(fp16/bf16, head_dim <= 128, no sliding window or softcap, unit-stride head dimension and
16-byte-aligned cache strides, GPU tensors); everything else stays on Triton.

Greedy sampling: AITER's HIP ``greedy_sample`` for fp16/bf16 logits whose vocabulary is a
multiple of 16, writing int32 ids straight into ``out``.  Out-of-range ids (AITER's answer on
all-NaN / all -inf rows in some builds) are replaced by 0, torch's answer there.  Its one known
difference from ``torch.argmax``: in a row holding NaN *and* numbers it returns the largest
number's index where torch returns the first NaN's.  Finding NaN needs a second pass over the
logits, which costs more than AITER saves, so the default policy keeps torch.

A kernel that raises is switched off for the process (one warning) and the caller falls back,
so results stay correct.
"""

from __future__ import annotations

import torch

from dflash_rocm_plugin.ops import _runtime
from dflash_rocm_plugin.ops.backends import aiter_loader
from dflash_rocm_plugin.ops.call import AttentionCall

NAME = "aiter"
ATTENTION_ENV = "DFLASH_ROCM_ATTENTION_IMPL"
GREEDY_ENV = "DFLASH_ROCM_GREEDY_IMPL"

ATTENTION_DTYPES = (torch.float16, torch.bfloat16)
ATTENTION_MAX_HEAD_DIM = 128  # CK batch-prefill instances cover hdim <= 128 (padded)
GREEDY_DTYPES = (torch.float16, torch.bfloat16)  # fp32 can hold -FLT_MAX, AITER's seed
GREEDY_VOCAB_MULTIPLE = 16  # AITER reads 16-wide vectors; a ragged tail reads past the row

ATTENTION = aiter_loader.KernelPath("paged attention", "mha_batch_prefill_func", ATTENTION_ENV,
                                    "the plugin's Triton kernel")
GREEDY = aiter_loader.KernelPath("greedy sampling", "greedy_sample", GREEDY_ENV, "torch.argmax")

ATTENTION_COVERS = (f"non-causal fp16/bf16 calls with head_dim <= {ATTENTION_MAX_HEAD_DIM}, a cache in the "
                    "model dtype and no window, softcap or sinks (the DFlash draft)")
GREEDY_COVERS = f"fp16/bf16 logits with a vocabulary that is a multiple of {GREEDY_VOCAB_MULTIPLE}"


def _on_gpu(t: torch.Tensor) -> bool:
    return t.device.type == "cuda"


def require_rocm(env: str) -> None:
    if not _runtime.is_rocm():
        raise aiter_loader.AiterUnavailable(
            f"{env}=aiter, but AITER kernels need a ROCm build of torch (torch.version.hip is None "
            f"here); unset {env} (auto) to use the plugin's own implementation")


def shape_problem(*, causal: bool, window: int, softcap: float, dtype, head_dim: int,
                  num_kv_splits: int | None, sinks: bool = False, kv_cache_dtype=None) -> str | None:
    """Why ``mha_batch_prefill_func`` cannot take a call of this configuration, or None."""
    if sinks:
        return "attention sinks"
    if kv_cache_dtype is not None and kv_cache_dtype != dtype:
        return f"a {kv_cache_dtype} cache (AITER's batch prefill here reads caches in the model dtype)"
    if causal:
        return "causal attention (the AITER path serves the non-causal draft only)"
    if window:
        return "sliding_window"
    if softcap:
        return "softcap"
    if num_kv_splits is not None:
        return "num_kv_splits (a Triton launch override)"
    if dtype not in ATTENTION_DTYPES:
        return f"dtype {dtype} (AITER takes float16/bfloat16)"
    if head_dim > ATTENTION_MAX_HEAD_DIM:
        return f"head_dim {head_dim} > {ATTENTION_MAX_HEAD_DIM}"
    return None


def serves_on(arch: str, *, causal: bool, dtype, head_dim: int, kv_cache_dtype=None, window: int = 0,
              softcap: float = 0.0, sinks: bool = False) -> bool:
    """Whether AITER's attention may serve calls of this configuration on a GPU of ``arch`` (ROCm GPUs
    only), whether or not AITER is installed where this is asked (a tuning plan made away from the GPU)."""
    return arch.startswith("gfx") and shape_problem(
        causal=causal, window=window, softcap=softcap, dtype=dtype, head_dim=head_dim, num_kv_splits=None,
        sinks=sinks, kv_cache_dtype=kv_cache_dtype) is None


def attention_problem(call: AttentionCall) -> str | None:
    """Why ``mha_batch_prefill_func`` cannot take this (already validated) call, or None."""
    why = shape_problem(causal=call.causal, window=call.window, softcap=call.softcap, dtype=call.q.dtype,
                        head_dim=call.head_dim, num_kv_splits=call.num_kv_splits,
                        sinks=call.sinks is not None, kv_cache_dtype=call.k_cache.dtype)
    if why is not None:
        return why
    q, out = call.q, call.out
    if not _on_gpu(q):
        return f"tensors on {q.device}"
    if q.stride(-1) != 1 or out.stride(-1) != 1:
        return "q/out head dimension not unit-stride"
    vec = 16 // q.element_size()
    _, page, heads, _ = call.k_cache.shape
    for cache in (call.k_cache, call.v_cache):
        s_block, s_page, s_head, s_dim = cache.stride()
        # CK's linear layout: [blocks, page, heads, dim], non-overlapping, 16-byte aligned rows.
        if s_dim != 1 or s_head < call.head_dim or s_page < heads * s_head or s_block < page * s_page:
            return "cache strides not in [blocks, page, heads, dim] order"
        if s_block % vec or s_page % vec or s_head % vec:
            return "cache strides not multiples of 16 bytes"
    if call.block_table.stride(-1) != 1:
        return "block_table columns not unit-stride"
    if not (call.seq_lens.is_contiguous() and call.query_start_loc.is_contiguous()):
        return "seq_lens/query_start_loc not contiguous"
    return None


def try_attention(call: AttentionCall, *, forced: bool) -> bool:
    """Run AITER into ``call.out`` and return True, or return False for the Triton kernel to run."""
    if forced:
        require_rocm(ATTENTION_ENV)
        if ATTENTION.resolve(forced=True) is None:
            return False  # disabled after a run-time failure
    elif not _runtime.is_rocm():
        return False
    if attention_problem(call) is not None:
        return False
    fn = ATTENTION.resolve(forced=forced)
    if fn is None:
        return False
    table = call.block_table[:call.num_seqs]
    qsl = call.query_start_loc
    try:
        fn(call.q, call.k_cache, call.v_cache,
           qsl,                                  # cu_seqlens_q
           qsl,                                  # kv_indptr: shape [num_seqs + 1] checked, unread with block_table
           table,                                # kv_page_indices: int32, unread with block_table
           call.max_query_len or call.num_tokens,  # host-side bounds only: no device reads
           call.kv_capacity,
           softmax_scale=call.scale, causal=False, out=call.out, block_table=table, seqlen_k=call.seq_lens)
    except Exception as exc:  # noqa: BLE001 - any AITER failure falls back to the Triton kernel
        ATTENTION.disable(exc)
        return False
    return True


def greedy_problem(logits: torch.Tensor, out: torch.Tensor | None) -> str | None:
    if logits.dtype not in GREEDY_DTYPES:
        return f"dtype {logits.dtype} (AITER path takes float16/bfloat16)"
    if not _on_gpu(logits):
        return f"logits on {logits.device}"
    vocab = logits.shape[1]
    if vocab % GREEDY_VOCAB_MULTIPLE or vocab >= 2 ** 31:
        return f"vocabulary {vocab} not a multiple of {GREEDY_VOCAB_MULTIPLE}"
    if logits.stride(1) != 1 or logits.stride(0) >= 2 ** 31:
        return "logits rows not unit-stride"
    if out is not None and not out.is_contiguous():
        return "out not contiguous"
    return None


def try_greedy(logits: torch.Tensor, out: torch.Tensor | None) -> torch.Tensor | None:
    """int32 ids from AITER (written into ``out`` when given), or None for the torch path."""
    require_rocm(GREEDY_ENV)
    fn = GREEDY.resolve(forced=True)
    if fn is None or greedy_problem(logits, out) is not None:
        return None
    ids = out if out is not None else torch.empty(logits.shape[0], dtype=torch.int32, device=logits.device)
    try:
        fn(ids, logits)
    except Exception as exc:  # noqa: BLE001 - any AITER failure falls back to torch
        GREEDY.disable(exc)
        return None
    # All-NaN / all -inf rows can come back as vocab_size; torch.argmax answers 0 there.
    ids.masked_fill_((ids < 0) | (ids >= logits.shape[1]), 0)
    return ids
