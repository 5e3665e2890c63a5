"""The import reader over gpt1/ and pipelines/, with `ast` (nothing is imported): each module's
file, every import of one module that resolves to another, at module level or inside a
function (tests/unit/test_layout.py's graph), and the modules a function can run, name by name
(tests/unit/test_stage_deps.py)."""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterable, Iterator, Mapping, Set
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


# ------------------------------------------------------------ what a function can run

ANNOTATIONS = {"returns", "annotation"}
"""Fields skipped: annotations are strings at run time (`from __future__ import annotations`)."""

Name = tuple[str, str | None]
"""(module, a name defined at its top level), or (module, None) for the module as a value."""


@dataclass
class Module:
    """One module's top-level names: what defines each, and what each import binds."""

    name: str
    path: Path
    tree: ast.Module
    defs: dict[str, list[ast.stmt]]
    binds: dict[str, Name]


def bindings(node: ast.AST, module: str, package: str, known: Set[str]) -> dict[str, Name]:
    """Local name -> what it binds, for every import in `node` of a module in `known`."""
    out: dict[str, Name] = {}
    for n in ast.walk(node):
        if isinstance(n, ast.Import):
            for a in n.names:
                if a.asname and a.name in known:
                    out[a.asname] = (a.name, None)
                elif not a.asname and a.name.split(".")[0] in known:
                    out[a.name.split(".")[0]] = (a.name.split(".")[0], None)
        elif isinstance(n, ast.ImportFrom):
            base = package.rsplit(".", n.level - 1)[0] if n.level else ""
            origin = ".".join(p for p in (base, n.module or "") if p)
            if origin in known:
                for a in n.names:
                    full = f"{origin}.{a.name}"
                    out[a.asname or a.name] = (full, None) if full in known else (origin, a.name)
    return out


def read_modules(files: Mapping[str, Path]) -> dict[str, Module]:
    """Every module of `files` (module_files) with its top-level definitions and imports."""
    known = set(files)
    out: dict[str, Module] = {}
    for name, path in files.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        defs: dict[str, list[ast.stmt]] = {}
        for stmt in tree.body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                defs.setdefault(stmt.name, []).append(stmt)
            elif isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                for n in (n for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)):
                    defs.setdefault(n.id, []).append(stmt)
        imports = ast.Module(body=[s for s in tree.body
                                   if isinstance(s, (ast.Import, ast.ImportFrom))],
                             type_ignores=[])
        out[name] = Module(name, path, tree, defs,
                           bindings(imports, name, package_of(name, path), known))
    return out


def _walk(node: ast.AST) -> Iterator[ast.AST]:
    """ast.walk without annotations."""
    todo = [node]
    while todo:
        n = todo.pop()
        yield n
        for field, value in ast.iter_fields(n):
            if field not in ANNOTATIONS:
                todo += [v for v in (value if isinstance(value, list) else [value])
                         if isinstance(v, ast.AST)]


def _names_used(modules: Mapping[str, Module], m: Module, node: ast.AST) -> list[Name]:
    """The names `node` refers to: a module's attribute (`bpe.train_bpe`), an imported name
    (deferred imports inside `node` included), a top-level name of its own module."""
    binds = {**m.binds, **bindings(node, m.name, package_of(m.name, m.path), set(modules))}
    out: list[Name] = []
    bases: set[int] = set()
    for n in _walk(node):
        if not isinstance(n, ast.Attribute):
            continue
        chain, base = [], n
        while isinstance(base, ast.Attribute):
            chain.append(base.attr)
            base = base.value
        if isinstance(base, ast.Name) and base.id in binds and binds[base.id][1] is None:
            mod, rest = binds[base.id][0], chain[::-1]
            while rest and f"{mod}.{rest[0]}" in modules:
                mod, rest = f"{mod}.{rest[0]}", rest[1:]
            out.append((mod, rest[0] if rest else None))
            bases.add(id(base))
    for n in _walk(node):
        if isinstance(n, ast.Name) and id(n) not in bases:
            if n.id in binds:
                out.append(binds[n.id])
            elif n.id in m.defs:
                out.append((m.name, n.id))
    return out


def reached_modules(modules: Mapping[str, Module], start: Name,
                    stop: Callable[[str], bool] = lambda _: False) -> set[str]:
    """The modules whose code running `start` (module, function) can run: the names it refers
    to, followed through the modules that define them (a class with all its methods; a module
    used as a value with all its names; its top-level expressions when a module is reached),
    not into modules where `stop` is true. Static: a name reached only through getattr or a
    string is missed, so keep such dispatch inside one module."""
    seen: set[Name] = set()
    reached: set[str] = set()
    todo = [start]
    while todo:
        name = todo.pop()
        mod, attr = name
        if name in seen or mod not in modules or stop(mod):
            continue
        seen.add(name)
        m = modules[mod]
        if mod not in reached:
            reached.add(mod)
            for stmt in m.tree.body:
                if isinstance(stmt, ast.Expr):
                    todo += _names_used(modules, m, stmt)
        if attr is not None and attr not in m.defs:
            todo += [m.binds[attr]] if attr in m.binds else []  # a re-export
            continue
        nodes = [n for ns in m.defs.values() for n in ns] if attr is None else m.defs[attr]
        for node in nodes:
            todo += _names_used(modules, m, node)
    return reached
