"""Which implementation runs each op: the plugin's own kernels, or AMD AITER on ROCm.

Environment variables (read at each call, so they may be set after import):

``DFLASH_ROCM_ATTENTION_IMPL`` = ``auto`` (default) | ``triton`` | ``aiter``
    ``auto``: on ROCm, non-causal paged attention (the DFlash draft) runs AITER's CK
    ``mha_batch_prefill_func`` when AITER >= 0.1.16 imports and the call fits it (fp16/bf16,
    head_dim <= 128, no sliding window, no softcap, unit-stride head dimension and
    16-byte-aligned cache strides, GPU tensors); every other call, and every call off ROCm,
    runs the plugin's Triton kernel.  ``triton``: always the Triton kernel.  ``aiter``: like
    ``auto``, but a machine where AITER cannot run (no ROCm torch, ``import aiter`` fails,
    AITER too old, kernel missing) raises at the first ``paged_attention`` call, naming what is
    missing; calls AITER does not cover (e.g. the causal target verify) still run Triton.
``DFLASH_ROCM_GREEDY_IMPL`` = ``auto`` (default) | ``torch`` | ``aiter``
    ``auto`` and ``torch``: ``greedy_sample`` is ``torch.argmax``, exact on every input.
    ``aiter``: AITER's HIP ``greedy_sample`` for fp16/bf16 logits whose vocabulary is a
    multiple of 16 (int32 ids straight into ``out``), with out-of-range ids (AITER's answer
    on all-NaN / all -inf rows in some builds) replaced by 0, torch's answer there.  Its one
    known difference from ``torch.argmax``: in a row holding NaN *and* numbers it returns the
    largest number's index where torch returns the first NaN's.  Finding NaN needs a second
    pass over the logits, which costs more than AITER saves, so ``auto`` keeps torch.

Either AITER path is dropped for the rest of the process, with one warning, the first time
its kernel raises; the call is then served by the plugin's own kernel, so results stay correct.
``describe()`` says which path is active and why (for ``dflash-rocm doctor``).
"""

from __future__ import annotations

import os

import torch

from dflash_rocm_plugin.ops import _runtime, aiter_paths

ATTENTION_ENV = "DFLASH_ROCM_ATTENTION_IMPL"
GREEDY_ENV = "DFLASH_ROCM_GREEDY_IMPL"
ATTENTION_CHOICES = ("auto", "triton", "aiter")
GREEDY_CHOICES = ("auto", "torch", "aiter")

AITER_ATTENTION_DTYPES = (torch.float16, torch.bfloat16)
AITER_ATTENTION_MAX_HEAD_DIM = 128  # CK batch-prefill instances cover hdim <= 128 (padded)
AITER_GREEDY_DTYPES = (torch.float16, torch.bfloat16)  # fp32 can hold -FLT_MAX, AITER's seed
AITER_GREEDY_VOCAB_MULTIPLE = 16  # AITER reads 16-wide vectors; a ragged tail reads past the row

ATTENTION = aiter_paths.KernelPath("paged attention", "mha_batch_prefill_func", ATTENTION_ENV,
                                   "the plugin's Triton kernel")
GREEDY = aiter_paths.KernelPath("greedy sampling", "greedy_sample", GREEDY_ENV, "torch.argmax")


def policy(env: str, choices: tuple[str, ...]) -> str:
    value = os.environ.get(env, "").strip().lower() or "auto"
    if value not in choices:
        raise ValueError(f"{env}={os.environ.get(env)!r} is not one of: {', '.join(choices)}")
    return value


def _on_gpu(t: torch.Tensor) -> bool:
    return t.device.type == "cuda"


def _require_rocm(env: str) -> None:
    if not _runtime.is_rocm():
        raise aiter_paths.AiterUnavailable(
            f"{env}=aiter, but AITER kernels need a ROCm build of torch (torch.version.hip is None "
            f"here); unset {env} (auto) to use the plugin's own implementation")


# ----------------------------------------------------------------------------- attention

def attention_unsupported(q, k_cache, v_cache, block_table, seq_lens, query_start_loc, out, *,
                          causal: bool, window: int, softcap: float,
                          num_kv_splits: int | None) -> str | None:
    """Why ``mha_batch_prefill_func`` cannot take this (already validated) call, or None."""
    if causal:
        return "causal attention (the AITER path serves the non-causal draft only)"
    if window:
        return "sliding_window"
    if softcap:
        return "softcap"
    if num_kv_splits is not None:
        return "num_kv_splits (a Triton launch override)"
    if q.dtype not in AITER_ATTENTION_DTYPES:
        return f"dtype {q.dtype} (AITER takes float16/bfloat16)"
    if not _on_gpu(q):
        return f"tensors on {q.device}"
    head_dim = q.shape[2]
    if head_dim > AITER_ATTENTION_MAX_HEAD_DIM:
        return f"head_dim {head_dim} > {AITER_ATTENTION_MAX_HEAD_DIM}"
    if q.stride(-1) != 1 or out.stride(-1) != 1:
        return "q/out head dimension not unit-stride"
    vec = 16 // q.element_size()
    _, page, heads, _ = k_cache.shape
    for cache in (k_cache, v_cache):
        s_block, s_page, s_head, s_dim = cache.stride()
        # CK's linear layout: [blocks, page, heads, dim], non-overlapping, 16-byte aligned rows.
        if s_dim != 1 or s_head < head_dim or s_page < heads * s_head or s_block < page * s_page:
            return "cache strides not in [blocks, page, heads, dim] order"
        if s_block % vec or s_page % vec or s_head % vec:
            return "cache strides not multiples of 16 bytes"
    if block_table.stride(-1) != 1:
        return "block_table columns not unit-stride"
    if not (seq_lens.is_contiguous() and query_start_loc.is_contiguous()):
        return "seq_lens/query_start_loc not contiguous"
    return None


def try_aiter_attention(q, k_cache, v_cache, block_table, seq_lens, query_start_loc, out, *,
                        causal: bool, scale: float, window: int, softcap: float,
                        max_query_len: int | None, num_kv_splits: int | None) -> bool:
    """Run AITER into ``out`` and return True, or return False for the Triton kernel to run."""
    chosen = policy(ATTENTION_ENV, ATTENTION_CHOICES)
    if chosen == "triton":
        return False
    forced = chosen == "aiter"
    if forced:
        _require_rocm(ATTENTION_ENV)
        if ATTENTION.resolve(forced=True) is None:
            return False  # disabled after a run-time failure
    elif not _runtime.is_rocm():
        return False
    why = attention_unsupported(q, k_cache, v_cache, block_table, seq_lens, query_start_loc, out,
                                causal=causal, window=window, softcap=softcap,
                                num_kv_splits=num_kv_splits)
    if why is not None:
        return False
    fn = ATTENTION.resolve(forced=forced)
    if fn is None:
        return False
    num_seqs = seq_lens.shape[0]
    table = block_table[:num_seqs]
    try:
        fn(q, k_cache, v_cache,
           query_start_loc,               # cu_seqlens_q
           query_start_loc,               # kv_indptr: shape [num_seqs + 1] checked, unread with block_table
           table,                         # kv_page_indices: int32, unread with block_table
           max_query_len or q.shape[0],   # host-side bounds only: no device reads
           table.shape[1] * k_cache.shape[1],
           softmax_scale=scale, causal=False, out=out, block_table=table, seqlen_k=seq_lens)
    except Exception as exc:  # noqa: BLE001 - any AITER failure falls back to the Triton kernel
        ATTENTION.disable(exc)
        return False
    return True


# ----------------------------------------------------------------------------- greedy sampling

def greedy_unsupported(logits: torch.Tensor, out: torch.Tensor | None) -> str | None:
    if logits.dtype not in AITER_GREEDY_DTYPES:
        return f"dtype {logits.dtype} (AITER path takes float16/bfloat16)"
    if not _on_gpu(logits):
        return f"logits on {logits.device}"
    vocab = logits.shape[1]
    if vocab % AITER_GREEDY_VOCAB_MULTIPLE or vocab >= 2 ** 31:
        return f"vocabulary {vocab} not a multiple of {AITER_GREEDY_VOCAB_MULTIPLE}"
    if logits.stride(1) != 1 or logits.stride(0) >= 2 ** 31:
        return "logits rows not unit-stride"
    if out is not None and not out.is_contiguous():
        return "out not contiguous"
    return None


def try_aiter_greedy(logits: torch.Tensor, out: torch.Tensor | None) -> torch.Tensor | None:
    """int32 ids from AITER (written into ``out`` when given), or None for the torch path."""
    if policy(GREEDY_ENV, GREEDY_CHOICES) != "aiter":
        return None
    _require_rocm(GREEDY_ENV)
    fn = GREEDY.resolve(forced=True)
    if fn is None or greedy_unsupported(logits, out) is not None:
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


# ----------------------------------------------------------------------------- doctor

def describe(device=None) -> dict:
    """Active implementation of each op and why; never raises, never launches a kernel.

    ``device`` (optional) names the GPU whose architecture is reported.  Shape::

        {"platform": {"rocm": bool, "hip": str | None, "arch": "gfx942" | "sm_90" | "cpu"},
         "attention": {"policy": "auto", "env": ..., "impl": "triton" | "aiter+triton" | "error",
                       "reason": str},
         "greedy_sample": {"policy": ..., "env": ..., "impl": "torch" | "aiter" | "error", "reason": str},
         "aiter": {"min_version": "0.1.16", "version": str | None, "usable": bool | None,
                   "reason": str | None}}

    ``impl == "error"`` means the next call will raise (forced ``aiter`` that cannot run, or an
    invalid variable value).  On ROCm it may import AITER (once per process) to answer.
    """
    rocm = _runtime.is_rocm()
    info: dict = {
        "platform": {"rocm": rocm, "hip": getattr(torch.version, "hip", None)},
        "aiter": {"min_version": aiter_paths.MIN_VERSION_TEXT},
    }
    try:
        index = None if device is None else torch.device(device).index
        info["platform"]["arch"] = _runtime.gpu_arch(index)
    except Exception as exc:  # noqa: BLE001 - doctor reports, never fails
        info["platform"]["arch"] = f"unknown ({exc})"

    needs_aiter = False
    for op, env, choices, path, own in (
            ("attention", ATTENTION_ENV, ATTENTION_CHOICES, ATTENTION, "triton"),
            ("greedy_sample", GREEDY_ENV, GREEDY_CHOICES, GREEDY, "torch")):
        try:
            chosen = policy(env, choices)
        except ValueError as exc:
            info[op] = {"policy": os.environ.get(env), "impl": "error", "reason": str(exc)}
            continue
        entry = {"policy": chosen, "env": env}
        info[op] = entry
        if chosen == own:
            entry.update(impl=own, reason=f"{env}={own}")
            continue
        if op == "greedy_sample" and chosen == "auto":
            entry.update(impl=own, reason="auto keeps torch.argmax: exact on NaN rows, where AITER's "
                                          "greedy_sample is not; set DFLASH_ROCM_GREEDY_IMPL=aiter to use it")
            continue
        if not rocm:
            entry.update(impl="error" if chosen == "aiter" else own,
                         reason="not a ROCm build of torch (torch.version.hip is None)")
            continue
        needs_aiter = True
        why = path.status()
        if why is not None:
            failed_here = chosen == "aiter" and path.disabled_reason is None
            entry.update(impl="error" if failed_here else own, reason=why)
        elif op == "attention":
            entry.update(impl="aiter+triton",
                         reason="AITER mha_batch_prefill_func for non-causal fp16/bf16 calls with "
                                f"head_dim <= {AITER_ATTENTION_MAX_HEAD_DIM}, no window/softcap; "
                                "Triton for the rest")
        else:
            entry.update(impl="aiter", reason="AITER greedy_sample for fp16/bf16 logits with a vocabulary "
                                              "that is a multiple of 16; torch for the rest")
    if needs_aiter:
        module, version, reason = aiter_paths.load()
        info["aiter"].update(version=version, usable=module is not None, reason=reason)
    else:
        info["aiter"].update(version=None, usable=None, reason="not loaded (not needed by the policies)")
    return info
