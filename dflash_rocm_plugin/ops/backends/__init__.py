"""Kernel backends behind the ops contract, and which one serves a call.

``paged_attention(..., backend=)`` and ``greedy_sample(..., backend=)`` take the backend
explicitly; when it is None the default comes from the environment, read once per process:

``DFLASH_ROCM_ATTENTION_IMPL`` = ``auto`` (default) | ``triton`` | ``aiter``
    ``auto``: on ROCm, the calls AITER serves exactly (``backends.aiter.ATTENTION_COVERS``) run
    AITER when AITER >= 0.1.16 imports; every other call, and every call off ROCm, runs Triton.
    ``triton``: always Triton.  ``aiter``: like ``auto``, but a machine where AITER cannot run
    raises at the first call, naming what is missing; calls AITER does not cover still run Triton.
``DFLASH_ROCM_GREEDY_IMPL`` = ``auto`` (default) | ``torch`` | ``aiter``
    ``auto`` and ``torch``: ``torch.argmax``, exact on every input.  ``aiter``: AITER's
    greedy kernel where it is exact enough (``backends.aiter``, one documented NaN difference).

Either AITER path is dropped for the rest of the process, with one warning, the first time its
kernel raises; the call is then served by the plugin's own path, so results stay correct.
Under ``auto`` on ROCm, a tuned entry for the call's shape bucket (``ops/tuned.py``) that says
``backend: triton`` keeps that bucket on Triton: ``dflash-rocm tune`` measured it faster there.
"""

from __future__ import annotations

import functools
import os

import torch

from dflash_rocm_plugin.ops import _runtime, tuned
from dflash_rocm_plugin.ops.backends import aiter, aiter_loader, triton, triton_direct, triton_extend
from dflash_rocm_plugin.ops.call import AttentionCall
from dflash_rocm_plugin.ops.extend_launch import ExtendLaunch

ATTENTION_ENV, GREEDY_ENV = aiter.ATTENTION_ENV, aiter.GREEDY_ENV
ATTENTION_CHOICES = ("auto", "triton", "aiter")
GREEDY_CHOICES = ("auto", "torch", "aiter")
AiterUnavailable = aiter_loader.AiterUnavailable


@functools.lru_cache(maxsize=None)
def _env_policy(env: str, choices: tuple[str, ...]) -> str:
    value = os.environ.get(env, "").strip().lower() or "auto"
    if value not in choices:
        raise ValueError(f"{env}={os.environ.get(env)!r} is not one of: {', '.join(choices)}")
    return value


def policy(requested: str | None, env: str, choices: tuple[str, ...], argument: str = "backend") -> str:
    """The explicit choice, validated, or the environment's default (read once per process)."""
    if requested is None:
        return _env_policy(env, choices)
    value = str(requested).strip().lower()
    if value not in choices:
        raise ValueError(f"{argument}={requested!r} is not one of: {', '.join(choices)} (None: from {env})")
    return value


def run_attention(call: AttentionCall, backend: str | None) -> str:
    """Run the call on the chosen backend; the name of the backend that ran it."""
    chosen = policy(backend, ATTENTION_ENV, ATTENTION_CHOICES)
    if chosen == "auto" and _runtime.is_rocm() and _tuned_backend_of(call) == triton.NAME:
        chosen = triton.NAME
    if chosen != "triton" and aiter.try_attention(call, forced=chosen == "aiter"):
        return aiter.NAME
    triton.run(call)
    return triton.NAME


def _tuned_backend_of(call: AttentionCall) -> str | None:
    """The backend a tuned entry names for this call's bucket, or None."""
    return tuned_backend(
        device_index=call.q.device.index, heads=(call.num_q_heads, call.num_kv_heads, call.head_dim),
        dtype=call.q.dtype, kv_cache_dtype=call.k_cache.dtype, causal=call.causal,
        num_tokens=call.num_tokens, num_seqs=call.num_seqs, max_query_len=call.max_query_len,
        kv_keys=call.kv_capacity, page_size=call.page_size)


class Prepared:
    """A validated call's launch and backend facts, for calls of the same key (``ops/call_cache.py``)."""

    __slots__ = ("scale", "window", "softcap", "max_query_len", "num_kv_splits", "causal", "triton", "aiter_may_serve",
                 "dense")

    def __init__(self, call: AttentionCall, dense: ExtendLaunch | None = None, new_keys=None, new_values=None):
        # ``dense``: the launch that serves the call's whole prompts from its own K/V (the paged launch,
        # built with ``call.extend_min_q``, skips them); None: the paged kernel serves every row.
        self.dense = None if dense is None else triton_extend.Launch(call, dense, new_keys, new_values)
        self.scale, self.window, self.softcap = call.scale, call.window, call.softcap
        self.max_query_len, self.num_kv_splits, self.causal = call.max_query_len, call.num_kv_splits, call.causal
        self.triton = triton.Launch(call)
        # Under ``auto`` on ROCm, whether AITER may take the call (then it is routed in full, per call:
        # AITER can be disabled at run time); False keeps it on Triton, as run_attention would.
        # Off ROCm it is not worked out (None: routed in full should the platform say ROCm).
        self.aiter_may_serve = None
        if _runtime.is_rocm():
            self.aiter_may_serve = (aiter.attention_problem(call) is None
                                    and _tuned_backend_of(call) != triton.NAME)


def run_prepared(p: Prepared, backend: str | None, q, k_cache, v_cache, block_table, seq_lens, query_start_loc,
                 out, workspace, sinks, k_scale, v_scale, new_keys=None, new_values=None) -> str:
    """``run_attention`` for a call of a prepared key: the same choice, without rebuilding the launch."""
    if p.dense is not None:
        triton.launch(p.triton, q, k_cache, v_cache, out, block_table, seq_lens, query_start_loc, sinks, k_scale,
                      v_scale, workspace)
        triton_extend.launch(p.dense, q, out, seq_lens, query_start_loc, new_keys, new_values, sinks, k_scale, v_scale,
                             k_cache, v_cache, block_table)
        return triton.NAME
    chosen = policy(backend, ATTENTION_ENV, ATTENTION_CHOICES)
    if chosen == "triton" or (chosen == "auto" and (p.aiter_may_serve is False or not _runtime.is_rocm())):
        triton.launch(p.triton, q, k_cache, v_cache, out, block_table, seq_lens, query_start_loc, sinks, k_scale,
                      v_scale, workspace)
        return triton.NAME
    call = AttentionCall(q, k_cache, v_cache, block_table, seq_lens, query_start_loc, out, causal=p.causal,
                         scale=p.scale, window=p.window, softcap=p.softcap, max_query_len=p.max_query_len,
                         num_kv_splits=p.num_kv_splits, workspace=workspace, sinks=sinks,
                         k_scale=k_scale, v_scale=v_scale)
    return run_attention(call, backend)


def run_greedy(logits: torch.Tensor, out: torch.Tensor | None, backend: str | None) -> torch.Tensor | None:
    """AITER's ids when the policy asks for AITER and it serves this call; None for torch.argmax."""
    if policy(backend, GREEDY_ENV, GREEDY_CHOICES) != "aiter":
        return None
    return aiter.try_greedy(logits, out)


def tuned_backend(*, device_index: int | None, **shapes) -> str | None:
    """The backend a tuned entry names for a call of these shapes (``tuned.lookup``), or None."""
    entry = tuned.lookup(_runtime.gpu_arch(device_index), **shapes)
    return None if entry is None else entry.backend


def attention_backend_for(*, causal: bool, window: int, softcap: float, dtype, head_dim: int,
                          num_kv_splits: int | None, backend: str | None = None, sinks: bool = False,
                          kv_cache_dtype=None, tuned_choice: str | None = None) -> tuple[str, str]:
    """(backend, why) for a call of this configuration with host-standard cache layouts on the
    GPU; never imports AITER or raises (a policy that cannot run is reported as "error").
    ``tuned_choice``: what a tuned entry names for the call's bucket (``tuned_backend``)."""
    try:
        chosen = policy(backend, ATTENTION_ENV, ATTENTION_CHOICES)
    except ValueError as exc:
        return "error", str(exc)
    if chosen == "triton":
        return triton.NAME, "the triton backend was chosen"
    if chosen == "auto" and _runtime.is_rocm() and tuned_choice == triton.NAME:
        return triton.NAME, "a tuned launch file keeps this shape bucket on Triton (dflash-rocm tune)"
    if not _runtime.is_rocm():
        return ("error" if chosen == "aiter" else triton.NAME), "not a ROCm build of torch"
    why = aiter.shape_problem(causal=causal, window=window, softcap=softcap, dtype=dtype, head_dim=head_dim,
                              num_kv_splits=num_kv_splits, sinks=sinks, kv_cache_dtype=kv_cache_dtype)
    if why is not None:
        return triton.NAME, f"AITER does not serve {why}"
    unusable = aiter.ATTENTION.status()
    if unusable is not None:
        return ("error" if chosen == "aiter" and aiter.ATTENTION.disabled_reason is None else triton.NAME), unusable
    return aiter.NAME, f"AITER serves {aiter.ATTENTION_COVERS}"


def status(device=None) -> dict:
    """Which backend serves each op and why, as facts; never raises, never launches a kernel.

    On ROCm it may import AITER (once per process) to answer.  ``impl == "error"`` means the next
    call will raise (a forced ``aiter`` that cannot run, or an invalid variable value).
    """
    rocm = _runtime.is_rocm()
    try:
        arch = _runtime.gpu_arch(None if device is None else torch.device(device).index)
    except Exception as exc:  # noqa: BLE001 - a report, not a failure
        arch = f"unknown ({exc})"
    info: dict = {"platform": {"rocm": rocm, "hip": getattr(torch.version, "hip", None), "arch": arch,
                               "interpreter": _runtime.interpreting()},
                  "aiter": {"min_version": aiter_loader.MIN_VERSION_TEXT}}
    try:
        info["triton_launch"] = triton_direct.state()
    except Exception as exc:  # noqa: BLE001 - a report, not a failure
        info["triton_launch"] = {"direct": False, "reason": f"unknown ({exc!r})"}
    needs_aiter = False
    for op, env, choices, path, own, covers in (
            ("attention", ATTENTION_ENV, ATTENTION_CHOICES, aiter.ATTENTION, triton.NAME, aiter.ATTENTION_COVERS),
            ("greedy_sample", GREEDY_ENV, GREEDY_CHOICES, aiter.GREEDY, "torch", aiter.GREEDY_COVERS)):
        try:
            chosen = _env_policy(env, choices)
        except ValueError as exc:
            info[op] = {"policy": os.environ.get(env), "env": env, "impl": "error", "reason": str(exc)}
            continue
        entry = info[op] = {"policy": chosen, "env": env}
        if chosen == own or (op == "greedy_sample" and chosen == "auto"):
            entry.update(impl=own, reason=f"{env}={chosen}: {own} for every call")
        elif not rocm:
            entry.update(impl="error" if chosen == "aiter" else own,
                         reason="not a ROCm build of torch (torch.version.hip is None)")
        else:
            needs_aiter = True
            why = path.status()
            if why is not None:
                failed_here = chosen == "aiter" and path.disabled_reason is None
                entry.update(impl="error" if failed_here else own, reason=why)
            else:
                entry.update(impl=f"aiter+{own}", reason=f"AITER for {covers}; {own} for the rest")
    if needs_aiter:
        module, version, reason = aiter_loader.load()
        info["aiter"].update(version=version, usable=module is not None, reason=reason)
    else:
        info["aiter"].update(version=None, usable=None, reason="not loaded (not needed by the policies)")
    return info
