"""The environment switches both host adapters honour, read when ``register()`` runs.  Imports no host.

* ``DFLASH_ROCM_DISABLE=1``: ``register()`` leaves the host untouched -- no backend, no draft hook,
  no host fix -- and says so in one log line.
* ``DFLASH_ROCM_ALLOW_UNTESTED_HOST=1``: a host version outside the tested ranges (a nightly such
  as vLLM 0.35.0.dev, SGLang 0.5.24) is registered anyway, with one warning naming the tested
  ranges.  The backend's own validation still refuses every layer it cannot serve.  Without it such
  a host is refused, in one log line.

The hosts' allow-lists (``VLLM_PLUGINS``, ``SGLANG_PLUGINS``) are the hosts' own: a host that is
told to load other plugins never calls ``register()``, so the plugin cannot speak there; each
adapter reads its host's list the way the host does and ``dflash-rocm doctor`` reports it.
"""

from __future__ import annotations

import dataclasses
import logging
import os

DISABLE = "DFLASH_ROCM_DISABLE"
ALLOW_UNTESTED_HOST = "DFLASH_ROCM_ALLOW_UNTESTED_HOST"
SWITCHES = (DISABLE, ALLOW_UNTESTED_HOST)
ON = ("1", "true", "yes", "on")
OFF = ("", "0", "false", "no", "off")
# The entry-point name under which both hosts list the plugin (pyproject.toml); the name their
# allow-lists must contain.
ENTRY_POINT = "rocm_dflash"
ALLOW_LISTS = {"vllm": "VLLM_PLUGINS", "sglang": "SGLANG_PLUGINS"}
HOST_NAMES = {"vllm": "vLLM", "sglang": "SGLang"}

_logged: set[tuple[str, str]] = set()


@dataclasses.dataclass(frozen=True)
class Switch:
    name: str
    value: str | None     # as set in the environment; None when unset
    on: bool
    problem: str | None   # a value that is neither on nor off (read as off)

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def read(name: str, environ=None) -> Switch:
    value = (os.environ if environ is None else environ).get(name)
    text = (value or "").strip().lower()
    if text in ON:
        return Switch(name, value, True, None)
    problem = None if text in OFF else (
        f"{name}={value!r} is not understood (on: {', '.join(ON)}; off: unset or {', '.join(OFF[1:])}); read as off")
    return Switch(name, value, False, problem)


def disabled() -> bool:
    return read(DISABLE).on


def untested_host_allowed() -> bool:
    return read(ALLOW_UNTESTED_HOST).on


def state() -> dict[str, dict]:
    """Every switch as ``dflash-rocm doctor`` shows it."""
    return {name: read(name).as_dict() for name in SWITCHES}


def log_once(logger: logging.Logger, host: str, message: str, level: int = logging.WARNING) -> None:
    """Log ``message`` once per process and host (``register()`` may run many times in one process)."""
    key = (host, message)
    if key not in _logged:
        _logged.add(key)
        logger.log(level, message)


def warn_misread(logger: logging.Logger, host: str) -> None:
    for name in SWITCHES:
        problem = read(name).problem
        if problem:
            log_once(logger, host, f"dflash_rocm_plugin: {problem}")


def disabled_message(host: str) -> str:
    return (f"dflash_rocm_plugin: {DISABLE}=1: nothing is registered with {HOST_NAMES[host]} and no host fix "
            f"is applied; --attention-backend {ENTRY_POINT} is unavailable in this process")


def _range_word(tested: str) -> str:
    return "ranges" if ", " in tested else "range"


def refused_host_message(host: str, version: str | None, tested: str) -> str:
    return (f"dflash_rocm_plugin: {HOST_NAMES[host]} {version} is outside the supported {_range_word(tested)} "
            f"{tested}; the "
            f"{ENTRY_POINT} attention backend is NOT registered (set {ALLOW_UNTESTED_HOST}=1 to register it on an "
            "untested version)")


def untested_host_message(host: str, version: str | None, tested: str) -> str:
    return (f"dflash_rocm_plugin: UNTESTED HOST: {HOST_NAMES[host]} {version} is outside the tested "
            f"{_range_word(tested)} {tested}; {ALLOW_UNTESTED_HOST}=1, so {ENTRY_POINT} is registered anyway. The backend still "
            "validates every layer and refuses what it cannot serve, but its hooks into this version's internals "
            "are untested: check outputs against another backend before serving, and run `dflash-rocm doctor`")


def allow_list_problem(host: str, listed: list[str] | set[str] | None) -> str | None:
    """Why the host will not load the plugin under its allow-list (``listed``: the host's own reading,
    None when unset), or None when it will."""
    if listed is None or ENTRY_POINT in listed:
        return None
    variable = ALLOW_LISTS[host]
    return (f"{variable}={os.environ.get(variable, '')!r} does not list {ENTRY_POINT!r}, so {HOST_NAMES[host]} "
            f"does not load the plugin: add {ENTRY_POINT} to {variable} (or unset it) to use the backend")
