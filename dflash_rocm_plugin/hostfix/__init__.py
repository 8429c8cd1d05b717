"""Runtime host fixes: the machinery every adapter's fixes run on, and what became of each.

Older host releases lack parts of the upstream ROCm DFlash work.  Each gap is one
:class:`Fix`: a *probe* that looks at the running host's code (a feature, never a
version string alone) and says whether the gap is there, a *patch* that closes it, and
the upstream-style diffs under ``patches/`` for people who build the host from source.
Each adapter declares its own fixes (``<adapter>.host_fixes.FIXES``) and runs them here;
``dflash-rocm doctor`` asks the adapters.  Nothing here imports a host or an adapter: probes
import their host lazily, when they run.

Outcomes (:class:`Status`): ``applied``, ``not needed`` or ``refused`` (with why).  Running
a fix twice is harmless: once applied it is not probed again, and each outcome is logged
once per process.
"""

from __future__ import annotations

import dataclasses
import enum
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
    probe: Callable[[], Probe]
    patch: Callable[[Any], str] | None  # (the probe's state) -> what changed
    diffs: tuple[str, ...] = ()  # paths under patches/


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
            found = fix.probe()
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
                    what = fix.patch(found.state)
                except Exception as exc:  # noqa: BLE001
                    st = _status(fix, Status.REFUSED, f"{found.reason}; patching failed: {exc!r}")
                else:
                    st = _status(fix, Status.APPLIED, f"{found.reason}; {what}")
                    _applied[fix.id] = st
        _last[fix.id] = st
        if apply:
            _log_once(st)
        return st


def run(fixes, apply: bool = True) -> list[FixStatus]:
    """Evaluate ``fixes`` in order; never raises (an adapter calls this from its registration)."""
    try:
        return [evaluate(f, apply=apply) for f in fixes]
    except Exception as exc:  # noqa: BLE001 - never raise into the host
        logger.warning("dflash_rocm_plugin: host fixes could not run: %r", exc)
        return []


def statuses(host: str | None = None) -> list[FixStatus]:
    """The outcomes recorded in this process so far (applied fixes stay applied)."""
    with _lock:
        return [s for s in _last.values() if host is None or s.host == host]
