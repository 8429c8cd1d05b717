"""The distribution promises what the product card says: torch is the only hard dependency
(Triton comes with each GPU build of torch under its own name; hosts and AITER are extras, so pip
never drags a CUDA torch or Triton into a ROCm environment: test_rocm_install.py), both hosts' entry points and the console script point at real callables, and
importing the package imports no host."""

import importlib
import importlib.metadata
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    tomllib = None

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def project():
    if tomllib is None:
        pytest.skip("tomllib needs Python 3.11")
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def test_the_only_hard_dependency_is_torch(project):
    names = sorted(d.split(">")[0].split("=")[0].split("<")[0].strip() for d in project["dependencies"])
    assert names == ["torch"]


def test_hosts_and_aiter_are_never_hard_dependencies(project):
    deps = " ".join(project["dependencies"]).lower()
    for host in ("vllm", "sglang", "aiter", "triton"):
        assert host not in deps
    assert any(d.startswith("vllm") for d in project["optional-dependencies"]["vllm"])
    assert any(d.startswith("sglang") for d in project["optional-dependencies"]["sglang"])


@pytest.mark.parametrize("group,name,target", [
    ("vllm.general_plugins", "rocm_dflash", "dflash_rocm_plugin.vllm:register"),
    ("sglang.srt.plugins", "rocm_dflash", "dflash_rocm_plugin.sglang:register"),
    ("console_scripts", "dflash-rocm", "dflash_rocm_plugin.cli:main"),
])
def test_installed_entry_points_resolve(group, name, target):
    eps = {ep.name: ep for ep in importlib.metadata.entry_points(group=group)}
    assert name in eps, f"{group} has no {name} (is the plugin installed?)"
    assert eps[name].value == target
    assert callable(eps[name].load())


def test_importing_the_plugin_imports_no_host():
    code = ("import sys, dflash_rocm_plugin, dflash_rocm_plugin.ops, dflash_rocm_plugin.vllm, "
            "dflash_rocm_plugin.sglang, dflash_rocm_plugin.cli; "
            "print(sorted(m for m in ('vllm', 'sglang', 'aiter') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_register_without_hosts_installed_never_raises():
    for host in ("vllm", "sglang"):
        if importlib.util.find_spec(host) is None:
            importlib.import_module(f"dflash_rocm_plugin.{host}").register()


def test_the_tuned_launch_files_ship_as_package_data():
    if tomllib is None:
        pytest.skip("tomllib needs Python 3.11")
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    assert "tuned/*.json" in data["dflash_rocm_plugin.ops"]
    from dflash_rocm_plugin.ops import tuned
    assert tuned.SHIPPED_DIR == ROOT / "dflash_rocm_plugin" / "ops" / "tuned" and tuned.SHIPPED_DIR.is_dir()
