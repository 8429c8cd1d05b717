"""What the DeepSeek-V4 ROCm fixes share: where SGLang keeps the HIP radix backend, and code reading.

sgl-project/sglang#26383 made DeepSeek-V4 with an EAGLE/MTP (or DSpark) draft run on ROCm under
graph capture: (1) ``draft_utils.DraftBackendFactory._create_dsv4_decode_backend`` /
``_create_dsv4_prefill_backend`` build the HIP radix backends (``DeepseekV4MultiStepBackend``,
``DeepseekV4HipRadixBackend`` in ``layers/attention/deepseek_v4_backend_hip_radix.py``) when
``is_hip()``; (2) that backend's ``init_forward_metadata_target_verify`` builds the metadata
eagerly instead of deferring it into the graph under ``SGLANG_PREP_IN_CUDA_GRAPH``; (3) each
multi-step draft step bakes its own slice of the shared ``out_cache_loc``
(``eagle_utils.per_step_draft_out_cache_loc``).  Released sglang 0.5.11 has no DeepSeek-V4;
0.5.12 has DeepSeek-V4 with only the CUDA backend (no HIP radix module, so no patch can make it
run on ROCm); 0.5.13.post1 - 0.5.23 carry all three.  The fixes exist for images that back-ported
the HIP backend without all of them.
"""

from __future__ import annotations

import ast
import importlib.util

from dflash_rocm_plugin.hostfix import Probe
from dflash_rocm_plugin.hostfix import code as _code

HIP_MODULE = "sglang.srt.layers.attention.deepseek_v4_backend_hip_radix"
CUDA_MODULE = "sglang.srt.layers.attention.deepseek_v4_backend"
HIP_BACKEND = "DeepseekV4HipRadixBackend"
HIP_MULTI_STEP = "DeepseekV4MultiStepBackend"
FIRST_RELEASE = "0.5.13.post1"


def module_exists(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def no_hip_backend() -> Probe:
    return Probe.refuse(
        "this sglang has DeepSeek-V4 but no HIP radix backend (layers/attention/"
        "deepseek_v4_backend_hip_radix.py): DeepSeek-V4 and its MTP/DSpark draft cannot run on ROCm "
        f"with it and no patch can add the backend; move to sglang {FIRST_RELEASE} or later")


def hip_backend_class():
    """(the HIP radix backend class or None, the verdict when there is no class to inspect)."""
    if not (module_exists(CUDA_MODULE) or module_exists(HIP_MODULE)):
        return None, Probe.not_needed("this sglang has no DeepSeek-V4")
    module = _code.optional_module(HIP_MODULE)
    if module is None:
        return None, no_hip_backend()
    cls = getattr(module, HIP_BACKEND, None)
    if cls is None:
        return None, Probe.refuse(f"{HIP_MODULE} has no {HIP_BACKEND}")
    return cls, None


def _tree(fn):
    src = _code.source_of(fn)
    return None if src is None else ast.parse(src)


def names_in(fn) -> set[str] | None:
    """Every name, attribute and imported module the function's code reads (None: no source)."""
    tree = _tree(fn)
    if tree is None:
        return None
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.Attribute):
            names.add(node.attr)
        elif isinstance(node, ast.ImportFrom):
            names.add(node.module or "")
            names.update(a.name for a in node.names)
    return names


def returns_pair(fn) -> bool:
    """The function returns a tuple literal (the draft factories of 0.5.18+: ``("dsv4", backend)``)."""
    tree = _tree(fn)
    return tree is not None and any(isinstance(n, ast.Return) and isinstance(n.value, ast.Tuple)
                                    for n in ast.walk(tree))


def self_calls(fn) -> set[str]:
    """The names of ``self.<name>(...)`` calls in the function's code."""
    tree = _tree(fn)
    if tree is None:
        return set()
    return {n.func.attr for n in ast.walk(tree)
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
            and isinstance(n.func.value, ast.Name) and n.func.value.id == "self"}
