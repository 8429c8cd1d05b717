"""The plugin's switches and vLLM's allow-list, each in a fresh process through vLLM's own plugin loader.

* ``DFLASH_ROCM_DISABLE=1``: the host is left untouched -- no backend name, the CUSTOM slot free, no
  draft or selection hook, no host fix evaluated -- and one log line says so however often
  ``register()`` runs; it wins over the untested-host opt-in.  A value that is neither on nor off is
  named in one line and read as off.
* ``VLLM_PLUGINS`` without ``rocm_dflash``: vLLM never calls ``register()``; nothing is registered,
  and the adapter's reading of the list (what ``dflash-rocm doctor`` prints) says which variable left
  the plugin out (vLLM itself logs it at DEBUG only).  Listing it registers as usual.
* A version outside the tested range (a nightly reporting 0.35.0.dev): refused by default, in one
  line naming the opt-in; with ``DFLASH_ROCM_ALLOW_UNTESTED_HOST=1`` registered with one warning
  naming the tested range, and the backend's validation still refuses what it cannot serve.

The runs start together (two at a time) and each test reads one.
"""

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]

STATE = r"""
import json, logging, sys
logging.basicConfig(level=logging.INFO, stream=sys.stderr)
{setup}
import vllm.plugins
vllm.plugins.load_general_plugins()
from dflash_rocm_plugin.vllm import registration as r
r._registered = False  # as a second plugin load in the same process would find it
r.register(); r.register()
from vllm.v1.attention.backends.registry import AttentionBackendEnum as E
from vllm.engine.arg_utils import EngineArgs
from vllm.v1.attention import selector
from dflash_rocm_plugin import hostfix, switches
state = {{
    "name": "ROCM_DFLASH" in E._member_map_,
    "custom": E.CUSTOM.get_path() if E.CUSTOM.is_overridden() else None,
    "draft_hook": hasattr(EngineArgs.create_speculative_config, "_dflash_rocm_inherits_backend"),
    "selection_hook": hasattr(selector._cached_get_attn_backend, "_dflash_rocm_selection_check"),
    "fixes": [s.id for s in hostfix.statuses("vllm")],
    "allow_list_problem": switches.allow_list_problem("vllm", r.allow_list()),
}}
{after}
print("STATE " + json.dumps(state))
"""

# vLLM does not call register() when VLLM_PLUGINS leaves it out; neither may the script.
NOT_CALLED = "import dflash_rocm_plugin.vllm.registration as _r; _r.register = lambda: None"
NIGHTLY = "import dflash_rocm_plugin.vllm.registration as _r; _r.host_version = lambda: '0.35.0.dev17+g0123abc'"
VALIDATE = """
import torch
from dflash_rocm_plugin.vllm.backend import RocmDFlashBackend as B
def reasons(**o):
    a = dict(head_size=128, dtype=torch.bfloat16, kv_cache_dtype='auto', block_size=16, use_mla=False,
             has_sink=False, use_sparse=False, use_mm_prefix=False, use_per_head_quant_scales=False,
             device_capability=None, attn_type='decoder', use_non_causal=True)
    a.update(o)
    return B.validate_configuration(**a)
state['ok_layer'] = reasons()
state['head_520'] = reasons(head_size=520)
state['mla'] = reasons(use_mla=True)
"""

RUNS = {
    "default": ({"DFLASH_ROCM_DISABLE": "maybe"}, "", ""),
    "disabled": ({"DFLASH_ROCM_DISABLE": "1", "DFLASH_ROCM_ALLOW_UNTESTED_HOST": "1"}, NIGHTLY, ""),
    "not_listed": ({"VLLM_PLUGINS": "some_other_plugin"}, NOT_CALLED, ""),
    "listed": ({"VLLM_PLUGINS": "some_other_plugin,rocm_dflash"}, "", ""),
    "nightly": ({}, NIGHTLY, ""),
    "nightly_opted_in": ({"DFLASH_ROCM_ALLOW_UNTESTED_HOST": "1"}, NIGHTLY, VALIDATE),
}


def _run(env, setup, after):
    full = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))}
    for name in ("VLLM_PLUGINS", "DFLASH_ROCM_DISABLE", "DFLASH_ROCM_ALLOW_UNTESTED_HOST"):
        full.pop(name, None)
    full.update(env)
    proc = subprocess.run([sys.executable, "-c", STATE.format(setup=setup, after=after)], cwd=REPO_ROOT,
                          env=full, capture_output=True, text=True, timeout=600)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("STATE ")]
    assert proc.returncode == 0 and lines, proc.stdout[-2000:] + proc.stderr[-4000:]
    return json.loads(lines[-1][len("STATE "):]), proc.stderr


@pytest.fixture(scope="module")
def runs():
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {name: pool.submit(_run, *spec) for name, spec in RUNS.items()}
        yield {name: f.result() for name, f in futures.items()}


REGISTERED = {"name": True, "custom": "dflash_rocm_plugin.vllm.backend.RocmDFlashBackend",
              "draft_hook": True, "selection_hook": True}
UNTOUCHED = {"name": False, "custom": None, "draft_hook": False, "selection_hook": False, "fixes": []}


def _ours(stderr: str, text: str) -> list[str]:
    return [ln for ln in stderr.splitlines() if "dflash_rocm_plugin" in ln and text in ln]


def _keys(state, like):
    return {k: state[k] for k in like}


def test_default_registers_and_names_an_unreadable_switch(runs):
    state, stderr = runs["default"]
    assert _keys(state, REGISTERED) == REGISTERED
    assert state["fixes"] and state["allow_list_problem"] is None
    lines = _ours(stderr, "DFLASH_ROCM_DISABLE='maybe' is not understood")
    assert len(lines) == 1 and "read as off" in lines[0], stderr[-3000:]


def test_off_switch_leaves_vllm_untouched_and_wins_over_the_opt_in(runs):
    state, stderr = runs["disabled"]
    assert _keys(state, UNTOUCHED) == UNTOUCHED
    lines = _ours(stderr, "DFLASH_ROCM_DISABLE=1")
    assert len(lines) == 1, stderr[-3000:]
    assert "nothing is registered with vLLM and no host fix is applied" in lines[0]
    assert not _ours(stderr, "UNTESTED HOST") and not _ours(stderr, "outside the supported")


def test_allow_list_without_the_plugin_registers_nothing(runs):
    state, _ = runs["not_listed"]
    assert _keys(state, UNTOUCHED) == UNTOUCHED
    assert state["allow_list_problem"] == (
        "VLLM_PLUGINS='some_other_plugin' does not list 'rocm_dflash', so vLLM does not load the plugin: add "
        "rocm_dflash to VLLM_PLUGINS (or unset it) to use the backend")


def test_allow_list_with_the_plugin_registers(runs):
    state, _ = runs["listed"]
    assert _keys(state, REGISTERED) == REGISTERED
    assert state["allow_list_problem"] is None


def test_untested_version_is_refused_by_default(runs):
    state, stderr = runs["nightly"]
    assert state["name"] is False and state["custom"] is None and not state["draft_hook"]
    lines = _ours(stderr, "outside the supported range")
    assert len(lines) == 1, stderr[-3000:]
    assert "vLLM 0.35.0.dev17+g0123abc" in lines[0] and ">=0.32,<0.35" in lines[0]
    assert "set DFLASH_ROCM_ALLOW_UNTESTED_HOST=1 to register it" in lines[0]


def test_untested_version_registers_under_the_opt_in_and_validation_still_guards(runs):
    state, stderr = runs["nightly_opted_in"]
    assert _keys(state, REGISTERED) == REGISTERED
    lines = _ours(stderr, "UNTESTED HOST")
    assert len(lines) == 1, stderr[-3000:]
    assert "vLLM 0.35.0.dev17+g0123abc is outside the tested range >=0.32,<0.35" in lines[0]
    assert "DFLASH_ROCM_ALLOW_UNTESTED_HOST=1" in lines[0] and "validates every layer" in lines[0]
    assert not _ours(stderr, "is NOT registered")
    assert state["ok_layer"] == []
    assert any("rocm_dflash: head_dim 520 is not supported" in r for r in state["head_520"])
    assert any("MLA" in r for r in state["mla"])
