"""Minimal stand-in wheels: just enough metadata for pip's resolver, and modules of one line."""

from __future__ import annotations

import zipfile
from pathlib import Path


def build(out_dir: Path, dist: str, version: str, *, requires=(), modules: dict[str, str] | None = None) -> Path:
    """Write ``{dist}-{version}-py3-none-any.whl`` into ``out_dir``; ``modules`` maps a package name to
    its ``__init__.py`` text."""
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = dist.replace("-", "_")
    info = f"{stem}-{version}.dist-info"
    metadata = ["Metadata-Version: 2.1", f"Name: {dist}", f"Version: {version}"]
    metadata += [f"Requires-Dist: {r}" for r in requires]
    files = {f"{info}/METADATA": "\n".join(metadata) + "\n",
             f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: stand-in\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    for package, text in (modules or {}).items():
        files[f"{package}/__init__.py"] = text
    files[f"{info}/RECORD"] = "".join(f"{name},,\n" for name in files) + f"{info}/RECORD,,\n"
    path = out_dir / f"{stem}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        for name, text in files.items():
            z.writestr(name, text)
    return path
