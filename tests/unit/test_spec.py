"""The repository stands alone (issue 12, M6): the spec lives in docs/paper.md, every `spec §n`
the code cites exists there, nothing points at files beside the repository other than the data
mirror, and gpt1.data never imports gpt1.tasks (the tasks package builds on the data package)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from spec_doc import REPO, sections, spec_text

# The places that cite the spec: code, pipelines, tests, benchmarks, presets, docs.
SCANNED_DIRS = ["gpt1", "pipelines", "tests", "benchmarks", "configs", "docs"]
SCANNED_FILES = ["README.md", "params.yaml", "dvc.yaml", "prefect.yaml", "pyproject.toml",
                 "setup.sh"]
SUFFIXES = {".py", ".c", ".md", ".yaml", ".toml", ".sh"}
# "spec §3", "spec §1-2", "spec §1, 5", "spec §1 and 5", "docs/paper.md §5".
SECTION = r"\d+(?:\.\d+)*"
CITATION = re.compile(rf"(?:spec|docs/paper\.md) §({SECTION}(?:(?:-|, | and ){SECTION})*)")
# A pointer out of the repository: the old spec beside it, or ../shared other than the data
# mirror (written as patterns so that this file does not match them itself).
OUTSIDE = re.compile(r"PAPER\.md|\.\./shared/(?!data\b)")


def _scanned() -> list[Path]:
    files = [REPO / name for name in SCANNED_FILES]
    for folder in SCANNED_DIRS:
        files += [p for p in sorted((REPO / folder).rglob("*")) if p.suffix in SUFFIXES]
    return [p for p in files if p.is_file() and p != Path(__file__)]  # this one holds examples


def cited_sections(text: str) -> list[str]:
    """Every section number a text cites; a range 'a-b' cites a, b and those between."""
    cited = []
    for group in CITATION.findall(text):
        for part in re.split(r", | and ", group):
            first, _, last = part.partition("-")
            if last and first.isdigit() and last.isdigit():
                cited += [str(n) for n in range(int(first), int(last) + 1)]
            else:
                cited.append(first)
    return cited


def test_spec_has_the_five_numbered_sections_and_says_how_it_is_cited() -> None:
    text = spec_text()
    assert list(sections(text)) == [1, 2, 3, 4, 5]
    assert "`spec §n`" in text.splitlines()[0]


def test_citation_parser_reads_every_form() -> None:
    text = "spec §3; spec §1-2, Table 5; (spec §1, 5: Adam); spec §2 and 4; docs/paper.md §5.2"
    assert cited_sections(text) == ["3", "1", "2", "1", "5", "2", "4", "5.2"]


def test_every_spec_citation_names_a_section_of_docs_paper_md() -> None:
    existing = {str(n) for n in sections(spec_text())}
    wrong, seen = [], 0
    for path in _scanned():
        for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for section in cited_sections(line):
                seen += 1
                if section not in existing:
                    wrong.append(f"{path.relative_to(REPO)}:{lineno}: spec §{section}")
    assert seen > 50, f"only {seen} citations found: the citation pattern no longer matches"
    assert not wrong, f"cited sections missing from docs/paper.md: {wrong}"


def test_nothing_points_outside_the_repository_but_the_data_mirror() -> None:
    hits = [f"{path.relative_to(REPO)}:{lineno}"
            for path in _scanned()
            for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
            if OUTSIDE.search(line)]
    assert not hits, f"these lines point outside the repository: {hits}"
    beside = "../shared"
    assert OUTSIDE.search(f"{beside}/notes/x.md") and not OUTSIDE.search(f"{beside}/data")


def imported_modules(source: str, package: str) -> set[str]:
    """Absolute names of the modules (and `from` targets) one module of `package` imports."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            module = ".".join(p for p in (base, node.module or "") if p)
            names.add(module)
            names.update(f"{module}.{alias.name}" for alias in node.names)
    return names


def _imports_tasks(names: set[str]) -> bool:
    return any(name == "gpt1.tasks" or name.startswith("gpt1.tasks.") for name in names)


def test_import_reader_sees_every_way_to_import_tasks() -> None:
    for line in ("from ..tasks import gate", "import gpt1.tasks.registry", "from gpt1 import tasks",
                 "from gpt1.tasks.formats import Encoded"):
        assert _imports_tasks(imported_modules(line, "gpt1.data")), line
    own = "from . import clean\nimport gpt1.data"
    assert not _imports_tasks(imported_modules(own, "gpt1.data"))


def test_data_package_never_imports_tasks() -> None:
    """Issue 12 item 6: gpt1.tasks builds on gpt1.data (gate rules, text standardisation); the
    other direction would bring back the import cycle."""
    offenders = [p.name for p in sorted((REPO / "gpt1" / "data").glob("*.py"))
                 if _imports_tasks(imported_modules(p.read_text(encoding="utf-8"), "gpt1.data"))]
    assert not offenders, f"gpt1/data modules importing gpt1.tasks: {offenders}"
    tasks_src = "\n".join(p.read_text(encoding="utf-8")
                          for p in sorted((REPO / "gpt1" / "tasks").glob("*.py")))
    assert any(n.startswith("gpt1.data") for n in imported_modules(tasks_src, "gpt1.tasks"))
