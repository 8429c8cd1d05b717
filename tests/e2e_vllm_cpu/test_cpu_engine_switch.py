"""The test plugin (``tests/e2e_vllm_cpu/cpu_engine_plugin``) is inert unless asked, and refuses a setup that would crash.

* Without ``DFLASH_ROCM_TEST_CPU_ENGINE=1`` it returns False and touches nothing (production).
* With the switch but without ``TRITON_INTERPRET=1`` from process start, ``register()`` (via the
  real entry-point loader) leaves vLLM's CPU_ATTN in place and says why: Triton is already
  imported by vLLM, so its own helpers are compiled-mode functions that an interpreted kernel
  cannot call.  Once the interpreter is on, the same call takes the CPU_ATTN slot.
"""

import json
import os
import subprocess
import sys

import dflash_rocm_test_cpu_engine as cpu_engine_testing
from tests.e2e_vllm_cpu.conftest import REPO_ROOT, engine_env

PROBE = r"""
import json, os
import vllm.plugins
from vllm.v1.attention.backends.registry import AttentionBackendEnum
import dflash_rocm_test_cpu_engine as cpu_engine_testing
vllm.plugins.load_general_plugins()  # register() -> maybe_enable()
without = AttentionBackendEnum.CPU_ATTN.get_path()
os.environ["TRITON_INTERPRET"] = "1"
enabled = cpu_engine_testing.maybe_enable()
print(json.dumps({"without_interpreter": without, "enabled": enabled,
                  "with_interpreter": AttentionBackendEnum.CPU_ATTN.get_path()}))
"""


def test_switch_off_does_nothing(monkeypatch):
    for value in (None, "0", "", "yes"):
        if value is None:
            monkeypatch.delenv(cpu_engine_testing.SWITCH, raising=False)
        else:
            monkeypatch.setenv(cpu_engine_testing.SWITCH, value)
        assert cpu_engine_testing.maybe_enable() is False


def test_switch_needs_interpreter_from_process_start():
    env = engine_env(plugin=True)
    env.pop("TRITON_INTERPRET")
    proc = subprocess.run([sys.executable, "-c", PROBE], cwd=REPO_ROOT, env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["without_interpreter"] == "vllm.v1.attention.backends.cpu_attn.CPUAttentionBackend"
    assert "needs TRITON_INTERPRET=1" in proc.stderr
    assert result["enabled"] is True
    assert result["with_interpreter"] == "dflash_rocm_plugin.vllm.backend.RocmDFlashBackend"
    assert os.environ.get(cpu_engine_testing.SWITCH) != "1"  # the suite itself never turns it on
