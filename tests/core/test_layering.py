"""The floors hold, read statically from the source (not from what happens to be imported):

* ``kernels/`` imports Triton only; ``ops/`` and ``hostfix/`` import no host, no adapter and no
  tool above them, and name none in a string;
* outside ``ops/`` (the package and ``benchmarks/``), only ``dflash_rocm_plugin.ops`` itself is
  imported, never one of its submodules: the contract is the whole face (the one exception times
  the ops layer's own stages: ``benchmarks/host_breakdown.py``);
* only the adapters import a host, and the adapters never import each other;
* no module of the package takes part in an import cycle.

The checker is tested on synthetic sources too, so a rule that stopped seeing anything fails.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PKG = "dflash_rocm_plugin"
HOSTS = ("vllm", "sglang")
LOWER = ("kernels", "ops", "hostfix", "switches")
UPPER = ("vllm", "sglang", "demo", "bench", "tune", "doctor", "cli")
# Profilers of the ops layer's own repeat path (each stage's host time), which time its submodules
# by name, and the A/B of two kernel versions (launch_ab.py --other-kernel), which swaps the kernels
# the ops layer launches, and the probe that runs a launch ops refuses on NVIDIA to tell a compiler
# fault from the kernel's arithmetic (split_p_probe.py): no caller of the contract may do any of them.
OPS_STAGE_PROFILERS = ("benchmarks.host_breakdown", "benchmarks.launch_ab", "benchmarks.split_p_probe")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def imports(tree: ast.AST, module: str, is_package: bool, known=frozenset()) -> list[str]:
    """Every module a source imports (module level or inside functions), absolute dotted names;
    ``from X import name`` yields ``X.name`` when that is a module of this package, else ``X``."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".") if is_package else module.split(".")[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            for alias in node.names:
                candidate = f"{base}.{alias.name}"
                found.append(candidate if candidate in known or _is_module(candidate) else base)
    return found


def _is_module(dotted: str) -> bool:
    if not dotted.startswith(PKG):
        return False
    path = ROOT.joinpath(*dotted.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def floor(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == PKG else None


def violations(sources: dict[str, tuple[str, bool]]) -> list[str]:
    """Rule breaks in ``{module: (source, is_package)}``."""
    found = []
    graph: dict[str, set[str]] = {}
    for module, (source, is_package) in sources.items():
        tree = ast.parse(source)
        here = floor(module)
        in_package = module.startswith(PKG)
        targets = imports(tree, module, is_package, frozenset(sources))
        graph[module] = {t for t in targets if t in sources and t != module}
        for target in targets:
            top, there = target.split(".")[0], floor(target)
            if here == "kernels" and top not in ("triton", "__future__") and there != "kernels":
                found.append(f"{module}: kernels import only Triton, not {target}")
            if here in LOWER and (top in HOSTS or top == "aiter" or there in UPPER):
                found.append(f"{module}: a lower floor imports {target}")
            if here != "ops" and there == "ops" and target != f"{PKG}.ops" and module not in OPS_STAGE_PROFILERS:
                found.append(f"{module}: imports the ops submodule {target}; import {PKG}.ops")
            if top in HOSTS and not (in_package and here == top):
                found.append(f"{module}: imports the host {target} outside its adapter")
            if here in HOSTS and there in HOSTS and there != here:
                found.append(f"{module}: the {here} adapter imports the {there} adapter ({target})")
        if here in LOWER:
            for node in ast.walk(tree):
                if isinstance(node, ast.Constant) and isinstance(node.value, str):
                    for up in UPPER:
                        if f"{PKG}.{up}" in node.value:
                            found.append(f"{module}: a string names the upper floor {PKG}.{up}")
    found += [f"import cycle: {' -> '.join(c)}" for c in _cycles(graph)]
    return found


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    cycles, state = [], {}

    def visit(node, path):
        state[node] = "open"
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                cycles.append(path[path.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    return cycles


def project_sources() -> dict[str, tuple[str, bool]]:
    files = list((ROOT / PKG).rglob("*.py")) + list((ROOT / "benchmarks").glob("*.py"))
    return {module_name(f): (f.read_text(), f.name == "__init__.py") for f in files if "__pycache__" not in f.parts}


def test_the_floors_hold():
    assert violations(project_sources()) == []


@pytest.mark.parametrize("module, source, rule", [
    (f"{PKG}.kernels.k", "import torch", "kernels import only Triton"),
    (f"{PKG}.ops.x", "from vllm.config import VllmConfig", "a lower floor imports vllm.config"),
    (f"{PKG}.ops.x", f"def f():\n    import {PKG}.sglang.backend", "a lower floor imports"),
    (f"{PKG}.hostfix.x", "S = 'dflash_rocm_plugin.vllm.fixes:probe'", "a string names the upper floor"),
    (f"{PKG}.demo.report", f"from {PKG}.ops import _runtime", "imports the ops submodule"),
    ("benchmarks.sweep", f"from {PKG}.ops.launch_config import forced", "imports the ops submodule"),
    (f"{PKG}.doctor", "def f():\n    from sglang.srt.plugins import load_plugins", "outside its adapter"),
    (f"{PKG}.vllm.x", f"from {PKG}.sglang import compat", "the vllm adapter imports the sglang adapter"),
])
def test_each_rule_sees_its_break(module, source, rule):
    assert any(rule in v for v in violations({module: (source, False)})), rule


def test_cycles_are_found():
    sources = {f"{PKG}.vllm.a": (f"from {PKG}.vllm import b", False),
               f"{PKG}.vllm.b": (f"def f():\n    from {PKG}.vllm.a import g", False)}
    found = [v for v in violations(sources) if v.startswith("import cycle")]
    assert found, "a two-module cycle went unseen"
