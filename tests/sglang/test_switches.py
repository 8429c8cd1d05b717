"""The plugin's switches and SGLang's allow-list.

Fresh processes through SGLang's own ``load_plugins()``:

* ``DFLASH_ROCM_DISABLE=1``: nothing in ATTENTION_BACKENDS or the CLI choices, no host fix
  evaluated, one log line however often ``register()`` runs;
* ``SGLANG_PLUGINS`` without ``rocm_dflash``: SGLang skips the plugin (its own log line, "Skipping
  plugin rocm_dflash (not in SGLANG_PLUGINS)"), nothing is registered, and the adapter's reading of
  the list (what ``dflash-rocm doctor`` prints) names the variable; listing it registers.

In this process: SGLang 0.5.24 (a version past the tested ranges) is refused by default and, with
``DFLASH_ROCM_ALLOW_UNTESTED_HOST=1``, registered with one warning naming the tested ranges -- and
the backend's own start-up check still refuses a configuration it cannot serve.
"""

import json
import logging
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from dflash_rocm_plugin import switches
from dflash_rocm_plugin.sglang import registration

REPO_ROOT = Path(__file__).resolve().parents[2]

STATE = r"""
import json, logging, sys
logging.basicConfig(level=logging.INFO, stream=sys.stderr)
from sglang.srt.plugins import load_plugins
load_plugins()
from dflash_rocm_plugin.sglang import registration as r
if r.allow_list() is None or "rocm_dflash" in r.allow_list():  # what SGLang would have called
    r.register(); r.register()
from sglang.srt.layers.attention.attention_registry import ATTENTION_BACKENDS
from dflash_rocm_plugin import hostfix, switches
choices = r._choices_module()
print("STATE " + json.dumps({
    "backend": "rocm_dflash" in ATTENTION_BACKENDS,
    "choice": "rocm_dflash" in choices.ATTENTION_BACKEND_CHOICES,
    "fixes": [s.id for s in hostfix.statuses("sglang")],
    "allow_list_problem": switches.allow_list_problem("sglang", r.allow_list()),
}))
"""

RUNS = {
    "disabled": {"DFLASH_ROCM_DISABLE": "1"},
    "not_listed": {"SGLANG_PLUGINS": "some_other_plugin"},
    "listed": {"SGLANG_PLUGINS": "some_other_plugin, rocm_dflash"},
}


def _run(env):
    full = {**os.environ, "PYTHONWARNINGS": "ignore",
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))}
    for name in ("SGLANG_PLUGINS", *switches.SWITCHES):
        full.pop(name, None)
    full.update(env)
    proc = subprocess.run([sys.executable, "-c", STATE], cwd=REPO_ROOT, env=full, capture_output=True, text=True,
                          timeout=600)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("STATE ")]
    assert proc.returncode == 0 and lines, proc.stdout[-2000:] + proc.stderr[-4000:]
    return json.loads(lines[-1][len("STATE "):]), proc.stderr


@pytest.fixture(scope="module")
def runs():
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {name: pool.submit(_run, env) for name, env in RUNS.items()}
        yield {name: f.result() for name, f in futures.items()}


def test_off_switch_leaves_sglang_untouched(runs):
    state, stderr = runs["disabled"]
    assert state == {"backend": False, "choice": False, "fixes": [], "allow_list_problem": None}
    lines = [ln for ln in stderr.splitlines() if "DFLASH_ROCM_DISABLE=1" in ln]
    assert len(lines) == 1, stderr[-3000:]
    assert "nothing is registered with SGLang and no host fix is applied" in lines[0]


def test_allow_list_without_the_plugin_registers_nothing(runs):
    state, stderr = runs["not_listed"]
    assert state["backend"] is False and state["choice"] is False and state["fixes"] == []
    assert "Skipping plugin rocm_dflash (not in SGLANG_PLUGINS)" in stderr
    assert state["allow_list_problem"] == (
        "SGLANG_PLUGINS='some_other_plugin' does not list 'rocm_dflash', so SGLang does not load the plugin: add "
        "rocm_dflash to SGLANG_PLUGINS (or unset it) to use the backend")


def test_allow_list_with_the_plugin_registers(runs):
    state, _ = runs["listed"]
    assert state["backend"] and state["choice"] and state["fixes"]
    assert state["allow_list_problem"] is None


@pytest.fixture
def fresh_log(monkeypatch):
    monkeypatch.setattr(switches, "_logged", set())
    for name in switches.SWITCHES:
        monkeypatch.delenv(name, raising=False)


def test_untested_version_is_refused_by_default(monkeypatch, caplog, fresh_log):
    monkeypatch.setattr(registration, "installed_sglang_version", lambda: "0.5.24")
    touched = []
    monkeypatch.setattr(registration, "_register_backend", lambda: touched.append(1))
    with caplog.at_level(logging.WARNING, logger="dflash_rocm_plugin.sglang"):
        registration.register()
        registration.register()
    assert not touched
    lines = [r.getMessage() for r in caplog.records if "outside the supported" in r.getMessage()]
    assert lines == [
        "dflash_rocm_plugin: SGLang 0.5.24 is outside the supported ranges 0.5.11-0.5.18, 0.5.20-0.5.23; the "
        "rocm_dflash attention backend is NOT registered (set DFLASH_ROCM_ALLOW_UNTESTED_HOST=1 to register it "
        "on an untested version)"]


def test_untested_version_registers_under_the_opt_in_and_start_up_still_guards(monkeypatch, caplog, fresh_log):
    import harness as h
    from sglang.srt.layers.attention.attention_registry import ATTENTION_BACKENDS

    from dflash_rocm_plugin.sglang.config_check import UnsupportedConfig

    monkeypatch.setenv(switches.ALLOW_UNTESTED_HOST, "1")
    monkeypatch.setattr(registration, "installed_sglang_version", lambda: "0.5.24")
    monkeypatch.delitem(ATTENTION_BACKENDS, "rocm_dflash")
    with caplog.at_level(logging.WARNING, logger="dflash_rocm_plugin.sglang"):
        registration.register()
        registration.register()
    assert ATTENTION_BACKENDS["rocm_dflash"] is registration.create_rocm_dflash_backend
    lines = [r.getMessage() for r in caplog.records if "UNTESTED HOST" in r.getMessage()]
    assert len(lines) == 1
    assert "SGLang 0.5.24 is outside the tested ranges 0.5.11-0.5.18, 0.5.20-0.5.23" in lines[0]
    assert "DFLASH_ROCM_ALLOW_UNTESTED_HOST=1" in lines[0]
    h.make_backend("rocm_dflash", h.make_runner(h.Shape()))  # a supported layer builds
    runner = h.make_runner(h.Shape())
    runner.model_config.head_dim = runner.model_config.v_head_dim = 520
    with pytest.raises(UnsupportedConfig, match="head_dim 520"):
        h.make_backend("rocm_dflash", runner)


def test_off_switch_in_process_touches_nothing(monkeypatch, caplog, fresh_log):
    from dflash_rocm_plugin.sglang import host_fixes

    monkeypatch.setenv(switches.DISABLE, "1")
    touched = []
    for name in ("_register_backend", "_register_choices", "installed_sglang_version"):
        monkeypatch.setattr(registration, name, lambda name=name: touched.append(name))
    monkeypatch.setattr(host_fixes, "apply", lambda: touched.append("host_fixes"))
    with caplog.at_level(logging.WARNING, logger="dflash_rocm_plugin.sglang"):
        for _ in range(3):
            registration.register()
    assert touched == []
    assert sum("DFLASH_ROCM_DISABLE=1" in r.getMessage() for r in caplog.records) == 1
