"""Every runtime fix the plugin may apply to a host, and what became of each one.

Older host releases lack parts of the upstream ROCm DFlash work.  Each gap is one
:class:`Fix`: a *probe* that looks at the running host's code (a feature, never a
version string alone) and says whether the gap is there, a *patch* that closes it, and
the upstream-style diffs under ``patches/`` for people who build the host from source.

This module imports no host: probes and patches are named by dotted path and resolved
only when a host adapter runs them, so ``dflash-rocm doctor`` can list the catalogue on
a machine with neither host installed.

Outcomes (:class:`Status`): ``applied``, ``not needed`` or ``refused`` (with why).  Running
a fix twice is harmless: once applied it is not probed again, and each outcome is logged
once per process.
"""

from __future__ import annotations

import dataclasses
import enum
import importlib
import logging
import threading
from typing import Any, Callable

logger = logging.getLogger("dflash_rocm_plugin.host_fixes")


class Status(str, enum.Enum):
    APPLIED = "applied"
    NOT_NEEDED = "not needed"
    REFUSED = "refused"


@dataclasses.dataclass(frozen=True)
class Probe:
    """What a probe found.  Build it with :meth:`needed`, :meth:`not_needed` or :meth:`refuse`."""

    needed: bool
    reason: str
    state: Any = None          # handed to the patch (the objects the probe located)
    refused: bool = False      # the gap is there but patching it here would be unsafe

    @classmethod
    def need(cls, reason: str, state: Any = None) -> "Probe":
        return cls(True, reason, state)

    @classmethod
    def not_needed(cls, reason: str) -> "Probe":
        return cls(False, reason)

    @classmethod
    def refuse(cls, reason: str) -> "Probe":
        return cls(True, reason, refused=True)


@dataclasses.dataclass(frozen=True)
class Fix:
    id: str
    host: str                  # "sglang" | "vllm"
    title: str
    upstream: str              # the upstream pull request the fix comes from
    probe: str                 # "module:function" -> Probe
    patch: str | None          # "module:function"(state) -> str describing what changed
    diffs: tuple[str, ...] = ()  # paths under patches/

    def resolve(self, which: str) -> Callable:
        module, _, name = getattr(self, which).partition(":")
        return getattr(importlib.import_module(module), name)


@dataclasses.dataclass(frozen=True)
class FixStatus:
    id: str
    host: str
    title: str
    upstream: str
    status: Status
    reason: str

    def as_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["status"] = self.status.value
        return d

    def __str__(self) -> str:
        return f"{self.id}: {self.status.value} ({self.reason})"


_SG = "dflash_rocm_plugin.sglang.fixes"
_VL = "dflash_rocm_plugin.vllm.fixes"

CATALOGUE: tuple[Fix, ...] = (
    Fix("sglang-dflash-draft-backend", "sglang",
        "DFLASH draft accepts rocm_dflash; on ROCm an unset/unsupported draft backend defaults to it",
        "sgl-project/sglang#22342 (triton on ROCm), #35932 (extensible draft allow-list)",
        f"{_SG}.draft_backend:probe", f"{_SG}.draft_backend:patch",
        tuple(f"patches/sglang/{v}/0001-dflash-draft-accepts-rocm_dflash.diff"
              for v in ("0.5.11", "0.5.12", "0.5.13.post1", "0.5.14", "0.5.15.post1", "0.5.16",
                        "0.5.17", "0.5.18"))),
    Fix("sglang-triton-graph-custom-mask", "sglang",
        "Triton backend CUDA-graph capture/replay tolerates spec_info.custom_mask None",
        "sgl-project/sglang#22342",
        f"{_SG}.triton_custom_mask:probe", f"{_SG}.triton_custom_mask:patch"),
    Fix("sglang-dflash-k-rope-dummy-q", "sglang",
        "DFlash draft apply_k_rope: dummy query shaped like K",
        "sgl-project/sglang#22342",
        f"{_SG}.k_rope:probe", f"{_SG}.k_rope:patch"),
    Fix("sglang-qwen3-dflash-capture", "sglang",
        "Qwen3ForCausalLM.set_dflash_layers_to_capture (capture before layer i+1)",
        "sgl-project/sglang#22342",
        f"{_SG}.qwen3_capture:probe", f"{_SG}.qwen3_capture:patch"),
    Fix("vllm-aiter-fa-extend-noncausal", "vllm",
        "ROCM_AITER_FA extend path honours non-causal metadata (was hard-coded causal=True)",
        "vllm-project/vllm#39703 (non-causal ROCM_AITER_FA; extend path left causal)",
        f"{_VL}.aiter_fa_extend:probe", f"{_VL}.aiter_fa_extend:patch",
        tuple(f"patches/vllm/{v}/0001-rocm-aiter-fa-extend-honours-causal.diff"
              for v in ("0.20.0", "0.25.0", "0.32.0", "0.33.0"))),
    Fix("vllm-noncausal-claims", "vllm",
        "ROCm backends that claim non-causal support but hard-code causal=True stop claiming it",
        "vllm-project/vllm#40176 (ROCM_AITER_UNIFIED_ATTN must not inherit supports_non_causal)",
        f"{_VL}.noncausal_claims:probe", f"{_VL}.noncausal_claims:patch"),
)


def fixes_for(host: str) -> tuple[Fix, ...]:
    return tuple(f for f in CATALOGUE if f.host == host)


def by_id(fix_id: str) -> Fix:
    for f in CATALOGUE:
        if f.id == fix_id:
            return f
    raise KeyError(f"no host fix named {fix_id!r}; known: {[f.id for f in CATALOGUE]}")


_lock = threading.RLock()
_applied: dict[str, FixStatus] = {}
_last: dict[str, FixStatus] = {}
_logged: set[tuple[str, Status, str]] = set()


def _status(fix: Fix, status: Status, reason: str) -> FixStatus:
    return FixStatus(fix.id, fix.host, fix.title, fix.upstream, status, reason)


def _log_once(st: FixStatus) -> None:
    key = (st.id, st.status, st.reason)
    if key in _logged:
        return
    _logged.add(key)
    level = logging.WARNING if st.status is Status.REFUSED else logging.INFO
    logger.log(level, "dflash_rocm_plugin host fix %s", st)


def evaluate(fix: Fix, apply: bool = True) -> FixStatus:
    """Probe one fix and (when ``apply``) patch if needed.  Never raises."""
    with _lock:
        if fix.id in _applied:
            return _applied[fix.id]
        try:
            found = fix.resolve("probe")()
        except Exception as exc:  # noqa: BLE001 - a broken probe must not break the host
            st = _status(fix, Status.REFUSED, f"probe failed: {exc!r}")
        else:
            if found.refused:
                st = _status(fix, Status.REFUSED, found.reason)
            elif not found.needed:
                st = _status(fix, Status.NOT_NEEDED, found.reason)
            elif not apply or fix.patch is None:
                st = _status(fix, Status.REFUSED, f"needed, not applied in this process: {found.reason}")
            else:
                try:
                    what = fix.resolve("patch")(found.state)
                except Exception as exc:  # noqa: BLE001
                    st = _status(fix, Status.REFUSED, f"{found.reason}; patching failed: {exc!r}")
                else:
                    st = _status(fix, Status.APPLIED, f"{found.reason}; {what}")
                    _applied[fix.id] = st
        _last[fix.id] = st
        if apply:
            _log_once(st)
        return st


def run(host: str, apply: bool = True) -> list[FixStatus]:
    """Evaluate every fix of ``host`` in catalogue order."""
    return [evaluate(f, apply=apply) for f in fixes_for(host)]


def statuses(host: str | None = None) -> list[FixStatus]:
    """The outcomes recorded in this process so far (applied fixes stay applied)."""
    with _lock:
        return [s for s in _last.values() if host is None or s.host == host]


def _reset_for_tests() -> None:
    with _lock:
        _applied.clear()
        _last.clear()
        _logged.clear()
