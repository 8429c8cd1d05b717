"""`pip install` into a ROCm image changes nothing but the plugin.

A ROCm image's torch (``2.9.0+rocm6.4``) requires the distribution ``pytorch-triton-rocm``, which
provides the module ``triton``.  PyPI's ``triton`` is a CUDA build; if the plugin required that
distribution, pip would unpack it over the ROCm one and break every Triton kernel in the image.
Stand-in wheels of all three sit in one folder, so pip *could* pick PyPI's Triton; the plugin's own
wheel, built from this checkout, must make it install nothing but the plugin.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.core import standin_wheels

ROOT = Path(__file__).resolve().parents[2]


def _pip(*args, cwd=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env["PIP_CONFIG_FILE"] = os.devnull  # no site index, find-links or constraints: only our folder
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    res = subprocess.run([sys.executable, "-m", "pip", *args], capture_output=True, text=True, env=env,
                         cwd=cwd, timeout=600)
    assert res.returncode == 0, f"pip {' '.join(args)} failed:\n{res.stdout}\n{res.stderr}"
    return res.stdout


@pytest.fixture(scope="module")
def plugin_wheel(tmp_path_factory):
    # Build from a copy, so the checkout gets no build/ or egg-info that could shadow metadata.
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "dflash_rocm_plugin", src / "dflash_rocm_plugin",
                    ignore=shutil.ignore_patterns("__pycache__"))
    dist = tmp_path_factory.mktemp("dist")
    _pip("wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q", "-w", str(dist), str(src))
    (wheel,) = dist.glob("dflash_rocm_plugin-*.whl")
    return wheel


@pytest.fixture(scope="module")
def rocm_image(tmp_path_factory):
    """A venv holding a stand-in ROCm torch and its Triton, and a folder that also offers PyPI's Triton."""
    wheels = tmp_path_factory.mktemp("wheels")
    standin_wheels.build(wheels, "torch", "2.9.0+rocm6.4", requires=["pytorch-triton-rocm==3.5.0"],
                         modules={"torch": "__version__ = '2.9.0+rocm6.4'\n"})
    standin_wheels.build(wheels, "pytorch-triton-rocm", "3.5.0",
                         modules={"triton": "__version__ = '3.5.0'  # the ROCm build\n"})
    standin_wheels.build(wheels, "triton", "3.9.0", modules={"triton": "__version__ = '3.9.0'  # CUDA\n"})
    venv = tmp_path_factory.mktemp("image") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    _pip("--python", str(python), "install", "-q", "--no-index", "--find-links", str(wheels), "torch==2.9.0+rocm6.4")
    return python, wheels


def test_the_image_stand_in_is_what_rocm_images_look_like(rocm_image):
    python, _ = rocm_image
    out = subprocess.run([str(python), "-c", "import torch, triton; print(torch.__version__, triton.__version__)"],
                         capture_output=True, text=True, check=True).stdout.split()
    assert out == ["2.9.0+rocm6.4", "3.5.0"]


def test_pip_installs_nothing_but_the_plugin(rocm_image, plugin_wheel):
    python, wheels = rocm_image
    report = json.loads(_pip("--python", str(python), "install", "--dry-run", "--quiet", "--report", "-",
                             "--no-index", "--find-links", str(wheels), str(plugin_wheel)))
    would_install = sorted(item["metadata"]["name"] for item in report["install"])
    assert would_install == ["dflash-rocm-plugin"], (
        f"pip would install {would_install} into a ROCm image; only the plugin may be installed")
