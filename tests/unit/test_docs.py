"""docs/architecture.md cannot drift from the code: every rule it states names the tests that
enforce it, those tests exist, and every `rule N` the prose cites is a row of its table."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.helpers.repo import REPO

ARCHITECTURE = REPO / "docs" / "architecture.md"
REFERENCE = re.compile(r"`([\w/]+\.py)::(\w+)`")


def rules(text: str) -> dict[int, list[tuple[str, str]]]:
    """Rule number -> the (test file, test function) pairs its row names."""
    section = text.split("## Rules and the tests that enforce them", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if re.match(r"\| \d+ \|", line)]
    return {int(row.split("|")[1]): REFERENCE.findall(row.split("|")[3]) for row in rows}


def defined_functions(tests_dir: Path = REPO / "tests") -> dict[str, list[set[str]]]:
    """Test file name -> the names of the functions defined in each file of that name."""
    found: dict[str, list[set[str]]] = {}
    for path in sorted(tests_dir.rglob("test_*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        found.setdefault(path.name, []).append(
            {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)})
    return found


def test_every_rule_names_tests_that_exist() -> None:
    text = ARCHITECTURE.read_text(encoding="utf-8")
    table = rules(text)
    assert sorted(table) == list(range(1, len(table) + 1)), "rules are numbered 1..n"
    assert not [n for n, refs in table.items() if not refs], "a rule that names no test"
    functions = defined_functions()
    missing = [f"rule {n}: {file}::{name}" for n, refs in table.items() for file, name in refs
               if len(functions.get(Path(file).name, [])) != 1
               or name not in functions[Path(file).name][0]]
    assert not missing, f"tests named in {ARCHITECTURE.name} that do not exist: {missing}"
    cited = {int(n) for n in re.findall(r"\brules? (\d+)", text.split("## Rules", 1)[0])}
    assert cited <= set(table), f"prose cites rules with no row: {sorted(cited - set(table))}"


def test_rule_reader_on_a_known_table(tmp_path: Path) -> None:
    text = ("## Rules and the tests that enforce them\n\n| # | rule | enforced by |\n"
            "|---|---|---|\n| 1 | a | `test_a.py::test_x`, `test_b.py::test_y` |\n"
            "| 2 | b | none |\n\n## After\n| 3 | c | `test_c.py::test_z` |\n")
    assert rules(text) == {1: [("test_a.py", "test_x"), ("test_b.py", "test_y")], 2: []}
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "test_a.py").write_text("def test_x():\n    def helper(): pass\n")
    assert defined_functions(tmp_path) == {"test_a.py": [{"test_x", "helper"}]}
