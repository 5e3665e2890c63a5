"""The import reader over gpt1/ and pipelines/, with `ast` (nothing is imported): each module's
file, and every import of one module that resolves to another, at module level or inside a
function (tests/unit/test_layout.py's graph, tests/unit/test_stage_deps.py's closures)."""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from tests.helpers.repo import REPO

ROOTS = ("gpt1", "pipelines")


@dataclass(frozen=True)
class Import:
    """One import statement's edge: importer -> imported module, and the line it sits on."""

    importer: str
    imported: str
    lineno: int


def module_files(repo: Path = REPO) -> dict[str, Path]:
    """Dotted module name -> file, for every Python module under ROOTS (packages by __init__)."""
    found: dict[str, Path] = {}
    for root in ROOTS:
        for path in sorted((repo / root).rglob("*.py")):
            parts = list(path.relative_to(repo).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def package_of(module: str, path: Path) -> str:
    """The package a module belongs to (a package's __init__ belongs to itself)."""
    return module if path.name == "__init__.py" else module.rpartition(".")[0]


def imports_of(module: str, source: str, package: str, known: Iterable[str]) -> list[Import]:
    """Every import in `source` that resolves to a module in `known` (third-party ones drop)."""
    known = set(known)

    def resolve(name: str) -> str | None:
        while name and name not in known:
            name = name.rpartition(".")[0]
        return name or None

    edges: list[Import] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            origin = ".".join(p for p in (base, node.module or "") if p)
            targets = [f"{origin}.{a.name}" if f"{origin}.{a.name}" in known else origin
                       for a in node.names]
        else:
            continue
        for target in targets:
            resolved = resolve(target)
            if resolved and resolved != module:
                edges.append(Import(module, resolved, node.lineno))
    return edges


def all_imports(files: Mapping[str, Path]) -> list[Import]:
    """Every import between the modules of `files` (module_files)."""
    return [edge for module, path in files.items()
            for edge in imports_of(module, path.read_text(encoding="utf-8"),
                                   package_of(module, path), files)]
