"""Reading vLLM source: which calls hard-code ``causal=True``."""

from __future__ import annotations

import ast
import textwrap


def _callee(call: ast.Call) -> str:
    f = call.func
    return f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")


def hardcoded_causal_calls(source: str, callee: str, function: str | None = None) -> list[int]:
    """Line numbers of ``callee(..., causal=True, ...)`` calls (inside ``function`` if named)."""
    tree = ast.parse(textwrap.dedent(source))
    scopes = [tree]
    if function is not None:
        scopes = [n for n in ast.walk(tree)
                  if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == function]
    lines = []
    for scope in scopes:
        for node in ast.walk(scope):
            if isinstance(node, ast.Call) and _callee(node) == callee:
                for kw in node.keywords:
                    if kw.arg == "causal" and isinstance(kw.value, ast.Constant) and kw.value.value is True:
                        lines.append(node.lineno)
    return sorted(set(lines))


def reads_causal_flag(source: str) -> bool:
    """The code consults a causal flag (``x.causal`` or a ``causal`` variable) somewhere."""
    tree = ast.parse(textwrap.dedent(source))
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr == "causal" and isinstance(node.ctx, ast.Load):
            return True
        if isinstance(node, ast.keyword) and node.arg == "causal" and not isinstance(node.value, ast.Constant):
            return True
    return False
