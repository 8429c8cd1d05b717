"""A throwaway out-of-tree vLLM platform plugin standing in for AMD's ATOM, written to a directory.

ATOM ships a ``vllm.platform_plugins`` entry (``atom = atom.plugin.vllm.register:register_platform``)
whose platform subclasses ``RocmPlatform``; releases of it overrode ``get_attn_backend_cls`` to
return its own AITER backend whatever the user selected, and ``ATOM_DISABLE_VLLM_PLUGIN=1`` made the
entry return None (no platform).  The stand-in does the same with vLLM's TRITON_ATTN as "its"
backend; with ``STANDIN_PLATFORM_DEFERS=1`` it defers to ``RocmPlatform``'s selection instead (as
ATOM's later releases do).  Put the directory on ``PYTHONPATH``: vLLM finds the entry point there.
"""

from __future__ import annotations

from pathlib import Path

ENTRY_NAME = "atom"
DISTRIBUTION = "atom-standin"
PLATFORM = "atom.platform.StandInPlatform"
ITS_BACKEND = "vllm.v1.attention.backends.triton_attn.TritonAttentionBackend"

_PLATFORM_SOURCE = f'''
import os

from vllm.platforms.rocm import RocmPlatform


class StandInPlatform(RocmPlatform):
    @classmethod
    def get_attn_backend_cls(cls, selected_backend, attn_selector_config, num_heads=None):
        if os.environ.get("STANDIN_PLATFORM_DEFERS") == "1":
            return super().get_attn_backend_cls(selected_backend, attn_selector_config, num_heads)
        return "{ITS_BACKEND}"


def register_platform():
    return None if os.environ.get("ATOM_DISABLE_VLLM_PLUGIN") == "1" else "{PLATFORM}"
'''


def write(root: Path) -> str:
    package = root / "atom"
    package.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text("")
    (package / "platform.py").write_text(_PLATFORM_SOURCE)
    info = root / "atom_standin-0.0.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {DISTRIBUTION}\nVersion: 0.0\n")
    (info / "entry_points.txt").write_text(f"[vllm.platform_plugins]\n{ENTRY_NAME} = atom.platform:register_platform\n")
    return str(root)
