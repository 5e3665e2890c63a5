"""The code's layout: one concept per module, layers as docs/architecture.md draws them, and
an import graph without cycles.

Read with `ast` (nothing is imported), over every module of gpt1/ and pipelines/:

- **One concept per module.** Every module says its concept in its docstring. A file is split
  when it gains a second concept, not at a line count (a tight cap invites packing lines);
  GUARD_LINES is only a loose guard no single concept here comes near. gpt1/config.py (the
  typed schema that mirrors params.yaml key for key) and gpt1/backends/kernels.c (C source)
  are exempt.
- **Layers.** docs/architecture.md's layer table lists every module, and a module imports
  only from its own layer or those below (ALLOWED_UPWARD aside).
- **Frameworks at the edges.** Each third-party framework is imported only where FRAMEWORKS
  says (ruff's banned-API rule in pyproject.toml says the same while editing).
- **File level.** No import cycle between modules. Every import counts, at module level or
  inside a function: an import deferred into a function hides a cycle, it does not remove one.
  `from pkg import name` counts as importing `pkg.name` when that is a module, else `pkg`.
- **Folder level.** Each subpackage (gpt1/data, gpt1/tasks, gpt1/backends, gpt1/report,
  gpt1/tracking, pipelines) is one unit and each module directly in gpt1/ is its own unit; the
  graph of imports between units has no cycle. A subpackage's modules may import the root
  modules below them (errors, atomic, config, ...): that is a cycle only when one of those
  root modules also imports the subpackage.
- **Upward imports.** An upward import is an import from unit A of a module in unit B where B,
  through its own imports, already reaches A: B is the higher layer, A the lower one, and the
  import points up, closing a cycle. ALLOWED_UPWARD lists the ones the layout accepts (at most
  one), each with a comment on its import line saying why; removing them leaves the unit graph
  acyclic.
- **Depth.** The unit graph has at most MAX_UNIT_EDGES imports in MAX_UNIT_LAYERS layers (each
  unit one above the highest it imports): a ceiling that only goes down.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Mapping, Set
from pathlib import Path
from typing import cast

from tests.helpers.imports import ROOTS, Import, all_imports, module_files, package_of
from tests.helpers.repo import REPO

GUARD_LINES = 700
EXEMPT = {"gpt1/config.py", "gpt1/backends/kernels.c"}
# (importing module, imported module): the schema validates task names against the task table
# (gpt1/tasks/registry.py imports nothing from gpt1), while the task readers take typed params.
ALLOWED_UPWARD = {("gpt1.config", "gpt1.tasks.registry")}


def unit_of(module: str, files: Mapping[str, Path]) -> str:
    """A subpackage of ROOTS is one unit; a module directly in gpt1/ is its own."""
    package = package_of(module, files[module])
    return module if package == "gpt1" else package


def cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one node (Tarjan), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def unit_graph(edges: Iterable[Import], files: Mapping[str, Path],
               skip: Set[tuple[str, str]] = frozenset()) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {unit_of(m, files): set() for m in files}
    for edge in edges:
        a, b = unit_of(edge.importer, files), unit_of(edge.imported, files)
        if a != b and (edge.importer, edge.imported) not in skip:
            graph[a].add(b)
    return graph


def test_every_module_says_its_one_concept() -> None:
    silent = sorted(str(p.relative_to(REPO)) for p in module_files().values()
                    if not (ast.get_docstring(ast.parse(p.read_text(encoding="utf-8"))) or "")
                    .strip())
    assert not silent, f"modules whose docstring does not say what they are: {silent}"


def test_no_module_grows_past_the_guard() -> None:
    sizes = {str(p.relative_to(REPO)): len(p.read_text(encoding="utf-8").splitlines())
             for root in ROOTS for p in sorted((REPO / root).rglob("*"))
             if p.suffix in {".py", ".c"}}
    long = {name: n for name, n in sizes.items() if n > GUARD_LINES and name not in EXEMPT}
    assert not long, f"modules over {GUARD_LINES} lines: more than one concept? {long}"


FRAMEWORKS = {"mlflow": ("gpt1/tracking/",), "prefect": ("pipelines/",),
              "great_expectations": ("gpt1/data/checks.py",), "tokenizers": ("gpt1/bpe.py",),
              "sklearn": ("gpt1/floor.py",)}
"""Third-party framework -> the only files (or folders) of ROOTS that import it."""


def framework_imports(source: str) -> set[str]:
    """The FRAMEWORKS that `source` imports, anywhere in it."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names.add(node.module.split(".")[0])
    return names & set(FRAMEWORKS)


def test_frameworks_stay_behind_their_module() -> None:
    assert framework_imports("import mlflow.pyfunc\nfrom prefect import flow\nimport torch\n"
                             "def f():\n    from sklearn.pipeline import make_pipeline\n"
                             ) == {"mlflow", "prefect", "sklearn"}
    stray = sorted(f"{path.relative_to(REPO)} imports {name}"
                   for path in module_files().values()
                   for name in framework_imports(path.read_text(encoding="utf-8"))
                   if not str(path.relative_to(REPO)).startswith(FRAMEWORKS[name]))
    assert not stray, f"frameworks outside their module: {stray}"


def test_no_import_cycle_between_files() -> None:
    files = module_files()
    graph: dict[str, set[str]] = {m: set() for m in files}
    for edge in all_imports(files):
        graph[edge.importer].add(edge.imported)
    assert not cycles(graph), f"modules importing each other: {cycles(graph)}"


def test_no_import_cycle_between_folders_but_the_allowed_upward_imports() -> None:
    files = module_files()
    edges = all_imports(files)
    assert len(ALLOWED_UPWARD) <= 1, "at most one upward import"
    graph = unit_graph(edges, files, skip=ALLOWED_UPWARD)
    assert not cycles(graph), f"folders importing each other: {cycles(graph)}"
    for importer, imported in ALLOWED_UPWARD:
        lines = files[importer].read_text(encoding="utf-8").splitlines()
        at = [e.lineno for e in edges if (e.importer, e.imported) == (importer, imported)]
        assert at, f"{importer} no longer imports {imported}: drop it from ALLOWED_UPWARD"
        assert all("#" in lines[n - 1] for n in at), f"{importer}:{at}: say why, in a comment"


def layer_count(graph: Mapping[str, set[str]]) -> int:
    """Layers of an acyclic graph: each node one above the highest node it imports (a node
    importing nothing is layer 1)."""
    memo: dict[str, int] = {}

    def layer(node: str) -> int:
        if node not in memo:
            memo[node] = 1 + max((layer(n) for n in graph.get(node, ())), default=0)
        return memo[node]

    return max(map(layer, graph), default=0)


# The import graph of gpt1/ and pipelines/ between units (unit_of), every import counted,
# without ALLOWED_UPWARD: 50 units, 229 edges, 15 layers before the stage table and the
# gpt1/stages/ package (commit 8443507); 49, 209 and 12 with them; 225 and 12 once
# gpt1/names.py (the one vocabulary), gpt1/repo.py (the one git helper), zero1.py and
# report/pilots.py joined; 230 once the stage table became the one name-giver of a run
# (the records' readers, freshness, report and export, ask it for stems); 278 in 13 once the
# arms' rules, the arm runner, the record path, the registered models and the import-hf path
# left gpt1/stages/ (one unit, whose stage modules imported each other 23 times) for modules
# of their own, so that no stage module imports another; 279 with gpt1/graphs.py
# (CUDA graphs, imported by pretraining only); 269 once the arms' rules, the arm runner and
# the lr pilot became one package (gpt1/arms/); 288 with the one-shot run (gpt1/one_shot.py,
# an entry point running every model stage through stage_run, and gpt1/gpu_carry.py, its carry,
# which reads the tasks, the tokenizer and the zero-shot builder to standardise the carried
# texts), gpt1/data/clean.py asking gpt1/repo.py where that table is, and gpt1/hardware.py
# (the CPU a record names, imported by records only). A ceiling, so it only drops.
MAX_UNIT_EDGES = 288
MAX_UNIT_LAYERS = 13


def test_the_import_graph_is_no_deeper_or_denser_than_its_ceiling() -> None:
    files = module_files()
    graph = unit_graph(all_imports(files), files, skip=ALLOWED_UPWARD)
    edges, layers = sum(map(len, graph.values())), layer_count(graph)
    assert edges <= MAX_UNIT_EDGES and layers <= MAX_UNIT_LAYERS, (
        f"{edges} imports between units in {layers} layers (ceiling {MAX_UNIT_EDGES} in "
        f"{MAX_UNIT_LAYERS}): import from a lower layer, or lower the ceiling once it drops")


def test_cycle_finder_and_import_reader_on_known_graphs(tmp_path: Path) -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
    assert layer_count({"a": {"b", "c"}, "b": {"c"}, "c": set(), "d": set()}) == 3
    for name, text in {"gpt1/__init__.py": "", "gpt1/errors.py": "",
                       "gpt1/stages.py": "from gpt1.data import shards\n",
                       "gpt1/data/__init__.py": "from ..errors import Gpt1Error\n",
                       "gpt1/data/shards.py": "def f():\n    from gpt1 import stages\n",
                       "pipelines/__init__.py": "import torch\n"}.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    files = module_files(tmp_path)
    edges = {(e.importer, e.imported) for e in all_imports(files)}
    assert edges == {("gpt1.stages", "gpt1.data.shards"), ("gpt1.data", "gpt1.errors"),
                     ("gpt1.data.shards", "gpt1.stages")}
    graph = unit_graph(all_imports(files), files)
    assert graph["gpt1.data"] == {"gpt1.errors", "gpt1.stages"}
    assert cycles(graph) == [["gpt1.data", "gpt1.stages"]]


ARCHITECTURE = REPO / "docs" / "architecture.md"


def layer_table(text: str) -> list[list[str]]:
    """The layer table of docs/architecture.md ("## Modules and layers"), bottom layer first:
    each layer's paths (`gpt1/errors.py`, folders as `gpt1/data/`) as its modules column
    lists them."""
    section = text.split("## Modules and layers", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("|")][2:]  # head, rule
    return [re.findall(r"`([^`]+)`", row.split("|")[2]) for row in rows]


def layer_of(path: str, layers: list[list[str]]) -> int | None:
    """The index of the layer listing `path` (a file, or the longest listed folder above it)."""
    best: tuple[int, int] | None = None
    for i, entries in enumerate(layers):
        for entry in entries:
            if path == entry or (entry.endswith("/") and path.startswith(entry)):
                if best is None or len(entry) > best[1]:
                    best = (i, len(entry))
    return None if best is None else best[0]


def test_imports_follow_the_documented_layers() -> None:
    """docs/architecture.md's layer table lists every module once, and a module imports only
    from its own layer or those below (ALLOWED_UPWARD aside)."""
    layers = layer_table(ARCHITECTURE.read_text(encoding="utf-8"))
    files = module_files()
    where = {m: str(p.relative_to(REPO)) for m, p in files.items()}
    unlisted = sorted(path for m, path in where.items()
                      if layer_of(path, layers) is None and not path.endswith("__init__.py"))
    assert not unlisted, f"modules missing from the layer table of {ARCHITECTURE.name}: {unlisted}"
    up = sorted({f"{where[e.importer]}:{e.lineno} imports {where[e.imported]}"
                for e in all_imports(files)
                if (e.importer, e.imported) not in ALLOWED_UPWARD
                and not where[e.importer].endswith("__init__.py")
                and not where[e.imported].endswith("__init__.py")
                and cast(int, layer_of(where[e.imported], layers))
                > cast(int, layer_of(where[e.importer], layers))})
    assert not up, f"imports upward through the layers of {ARCHITECTURE.name}: {up}"


def test_layer_table_reader_on_a_known_table() -> None:
    text = ("## Modules and layers\n\n| layer | modules | role |\n|---|---|---|\n"
            "| base | `gpt1/errors.py`, `gpt1/data/` | x |\n| top | `gpt1/data/checks.py` | y |\n"
            "\n## Next\n| no | `gpt1/stages.py` | z |\n")
    layers = layer_table(text)
    assert layers == [["gpt1/errors.py", "gpt1/data/"], ["gpt1/data/checks.py"]]
    assert layer_of("gpt1/data/shards.py", layers) == 0
    assert layer_of("gpt1/data/checks.py", layers) == 1  # the most specific entry
    assert layer_of("gpt1/stages.py", layers) is None
