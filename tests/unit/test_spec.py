"""The repository stands alone: the spec lives in docs/paper.md, every `spec §n` the code cites
exists there, no line points at files beside the repository (other than the data mirror), at an
issue tracker, a requirement id, an owner or the code's history, and gpt1.data never imports
gpt1.tasks (the tasks package builds on the data package)."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

from tests.helpers.repo import REPO
from tests.helpers.spec_doc import sections, spec_text

SCANNED_DIRS = ["gpt1", "pipelines", "tests", "benchmarks", "configs", "docs"]
SCANNED_FILES = ["README.md", "params.yaml", "dvc.yaml", "prefect.yaml", "pyproject.toml",
                 "setup.sh"]
SUFFIXES = {".py", ".c", ".md", ".yaml", ".toml", ".sh"}
# "spec §3", "spec §1-2", "spec §1, 5", "spec §1 and 5", "docs/paper.md §5".
SECTION = r"\d+(?:\.\d+)*"
CITATION = re.compile(rf"(?:spec|docs/paper\.md) §({SECTION}(?:(?:-|, | and ){SECTION})*)")
# A pointer out of the repository: notes kept beside it (the environment, style and paper notes),
# ../shared other than the data mirror, an issue number, an owner tag or the code's history.
# Written as patterns (escapes, classes) so that this file's source does not match them itself.
OUTSIDE = re.compile(r"(?:ENV|STYLE|PAPER)\.md|\.\./shared/(?!data\b)|\bowner\s*:|\b[Ii]ssue\s+\d+"
                     r"|previous\s+commit")
# A requirement id such as S7, M3 or B12, in a Python comment, docstring or test name. Names of
# things that look alike are listed: the S3 object store, the L4 GPU, the F1 score, L1/L2 norms.
REQUIREMENT_ID = re.compile(r"(?<![\w.-])[A-Z]\d{1,2}(?![\w.-])")
LOOKALIKES = {"S3", "L4", "F1", "L1", "L2"}


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


def test_outside_pattern_catches_every_kind_of_pointer() -> None:
    beside, md = "../shared", ".md"
    pointers = [f"{beside}/notes/x.md", f"see ENV{md}", f"STYLE{md} B7", f"PAPER{md} §2",
                "(owner" + ": TASKS)", "Is" + "sue 11 item 4", "is" + "sue  3",
                "the previous" + " commit"]
    assert all(OUTSIDE.search(text) for text in pointers), pointers
    fine = [f"{beside}/data", "tis" + "sue 3x", "an owner tag", "the previous step"]
    assert not any(OUTSIDE.search(text) for text in fine), fine


def requirement_ids(source: str) -> list[tuple[int, str]]:
    """(line, id) for each requirement id in a Python source's comments, docstrings and test
    names; strings that are data (messages, paths) are not read."""
    found: list[tuple[int, str]] = []

    def scan(lineno: int, text: str) -> None:
        found.extend((lineno, m) for m in REQUIREMENT_ID.findall(text) if m not in LOOKALIKES)

    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            scan(token.start[0], token.string)
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                scan(node.body[0].lineno, doc)
        is_function = isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        if is_function and node.name.startswith("test"):
            scan(node.lineno, node.name.replace("_", " ").upper())
    return found


def test_requirement_id_reader_sees_comments_docstrings_and_test_names() -> None:
    source = ('"""Faults (R' '2)."""\n'
              "def test_kill_b" "4_resumes():\n"
              '    """B' '4: kills."""\n'
              "    x = 'M" "3'  # see S" "7\n"
              "    remote = 'S3'  # an S3 bucket, an L4 GPU, H100, A100, 4L/256d\n")
    assert [m for _, m in requirement_ids(source)] == ["S7", "R2", "B4", "B4"]


def test_no_requirement_ids_in_comments_docstrings_or_test_names() -> None:
    hits = [f"{path.relative_to(REPO)}:{lineno}: {ident}"
            for path in _scanned() if path.suffix == ".py"
            for lineno, ident in requirement_ids(path.read_text(encoding="utf-8"))]
    assert not hits, f"requirement ids (say what the code does instead): {hits}"


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
    """gpt1.tasks builds on gpt1.data (gate rules, text standardisation); the
    other direction would bring back the import cycle."""
    offenders = [p.name for p in sorted((REPO / "gpt1" / "data").glob("*.py"))
                 if _imports_tasks(imported_modules(p.read_text(encoding="utf-8"), "gpt1.data"))]
    assert not offenders, f"gpt1/data modules importing gpt1.tasks: {offenders}"
    tasks_src = "\n".join(p.read_text(encoding="utf-8")
                          for p in sorted((REPO / "gpt1" / "tasks").glob("*.py")))
    assert any(n.startswith("gpt1.data") for n in imported_modules(tasks_src, "gpt1.tasks"))
