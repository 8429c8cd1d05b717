"""A pickled ``VllmConfig`` naming rocm_dflash unpickles in a fresh interpreter that has not
loaded any plugin (as vLLM's spawned engine-core / workers and Ray actors do), and the
plugin's ``register()`` there makes the same enum value resolve to the plugin class."""

import pickle
import subprocess
import sys

from tests.vllm.conftest import dflash_spec, engine_args

CHILD = r"""
import os, pickle, sys
os.environ["VLLM_TARGET_DEVICE"] = "cpu"
config = pickle.load(open(sys.argv[1], "rb"))
assert not any(m.startswith("dflash_rocm_plugin") for m in sys.modules), "plugin imported too early"
from vllm.v1.attention.backends.registry import AttentionBackendEnum
assert config.attention_config.backend is AttentionBackendEnum.CUSTOM
assert config.speculative_config.attention_backend is AttentionBackendEnum.CUSTOM
from vllm.plugins import load_general_plugins
load_general_plugins()  # what vLLM does in a worker before building the model
from dflash_rocm_plugin.vllm.backend import RocmDFlashBackend
assert config.attention_config.backend.get_class() is RocmDFlashBackend
assert config.speculative_config.attention_backend.get_class() is RocmDFlashBackend
print("OK")
"""


def test_pickled_config_unpickles_without_plugins(model_dirs, tmp_path):
    # A config fresh from create_engine_config, as the front-end process hands it over.
    engine_config = engine_args(model_dirs, attention_backend="rocm_dflash",
                                speculative_config=dflash_spec(model_dirs)).create_engine_config()
    path = tmp_path / "vllm_config.pkl"
    path.write_bytes(pickle.dumps(engine_config))
    proc = subprocess.run([sys.executable, "-c", CHILD, str(path)], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert proc.stdout.strip().endswith("OK")
