"""The tests' own layout, read with `ast` (nothing is imported):

- **Shared builders live in tests/helpers/.** No file under tests/ (nor a benchmark) imports a
  test module (a `test_*.py` or a `conftest.py`) or loads one by path: a builder two test
  modules need moves to tests/helpers/, and fixtures to tests/conftest.py.
- **No `sys.path` edits in tests.** tests/ is a package (an `__init__.py` in every folder), so
  pytest puts the repository root on the path and `tests.helpers` imports as it is;
  benchmarks/ goes on the path through pytest's `pythonpath` setting (pyproject.toml).
- **tests/unit/ mirrors the package.** Each of its folders is named after a subpackage of gpt1/
  (or pipelines/, benchmarks/), and a test named after a module of a subpackage
  (`test_kernels.py` for gpt1/backends/kernels.py) sits in that subpackage's folder.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.helpers.repo import REPO

# A path edit as code or as code handed to a child process (`python -c "..."`).
SYS_PATH = re.compile(r"\bsys\s*\.\s*path\b")
LOADERS = {"spec_from_file_location", "run_path", "import_module"}  # a module loaded by name
TOP_FOLDERS = ("pipelines", "benchmarks")  # tested folders beside gpt1/'s subpackages


def python_files(root: Path) -> dict[str, Path]:
    """Dotted module name (from the repository root) -> file, for every .py below `root`."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        if "__pycache__" not in path.parts:
            found[".".join(path.relative_to(root.parent).with_suffix("").parts)] = path
    return found


def is_test_module(name: str) -> bool:
    """A module pytest collects or runs as a conftest, or a name inside one; nothing under
    tests/helpers/ is."""
    parts = name.split(".")
    return parts[:2] != ["tests", "helpers"] and any(
        part.startswith("test_") or part == "conftest" for part in parts)


def imported_names(module: str, path: Path, tree: ast.Module) -> list[tuple[int, str]]:
    """(line, module name) of every import, relative ones resolved; `from m import a` gives
    both m and m.a (a may be a module)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            origin = ".".join(p for p in (base, node.module or "") if p)
            out.append((node.lineno, origin))
            out += [(node.lineno, f"{origin}.{alias.name}") for alias in node.names]
    return out


def cross_test_imports(files: dict[str, Path], tests_root: Path) -> list[str]:
    """`file:line: imports X` for each import of a test module, by its dotted name or by the
    bare name a sys.path edit would allow (`from test_load import ...`), and each module
    loaded by name or path (importlib, runpy)."""
    stems = {p.stem for p in tests_root.rglob("*.py") if is_test_module(p.stem)}
    found = []
    for module, path in files.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        where = path.relative_to(tests_root.parent)
        for line, name in imported_names(module, path, tree):
            if (name.startswith("tests.") and is_test_module(name)) or \
                    name.split(".")[0] in stems:
                found.append(f"{where}:{line}: imports {name}")
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                func = node.func
                called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
                if called in LOADERS:
                    found.append(f"{where}:{node.lineno}: loads a module with {called}()")
    return sorted(set(found))


def sys_path_edits(files: dict[str, Path], tests_root: Path) -> list[str]:
    """`file:line` of each use of sys.path: in code, in `from sys import path`, or inside a
    string (code a test hands to a child process; docstrings aside)."""
    found = []
    for path in files.values():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        where = path.relative_to(tests_root.parent)
        docs = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr)}
        for node in ast.walk(tree):
            code = (isinstance(node, ast.Attribute) and node.attr == "path"
                    and isinstance(node.value, ast.Name) and node.value.id == "sys")
            imported = (isinstance(node, ast.ImportFrom) and node.module == "sys"
                        and any(a.name == "path" for a in node.names))
            text = (isinstance(node, ast.Constant) and isinstance(node.value, str)
                    and id(node) not in docs and SYS_PATH.search(node.value))
            if code or imported or text:
                found.append(f"{where}:{node.lineno}")
    return sorted(set(found))


def misplaced_tests(repo: Path) -> list[str]:
    """Folders of tests/unit/ that name no package folder, folders of tests/ without an
    __init__.py, and tests named after a subpackage's module outside that subpackage's folder."""
    unit = repo / "tests" / "unit"
    homes = {p.name: p for p in (repo / "gpt1").iterdir() if (p / "__init__.py").is_file()}
    homes |= {name: repo / name for name in TOP_FOLDERS}
    found = [f"tests/unit/{d.name}/ names no package folder (one of {sorted(homes)})"
             for d in sorted(unit.iterdir()) if d.is_dir() and d.name != "__pycache__"
             and d.name not in homes]
    found += [f"{d.relative_to(repo)}/ has no __init__.py"
              for d in sorted({p.parent for p in (repo / "tests").rglob("*.py")})
              if "__pycache__" not in d.parts and not (d / "__init__.py").is_file()]
    for test in sorted(unit.rglob("test_*.py")):
        target = test.stem.removeprefix("test_")
        owners = [name for name, folder in homes.items() if (folder / f"{target}.py").is_file()]
        at_root = (repo / "gpt1" / f"{target}.py").is_file()  # a module of gpt1/ itself
        if owners and not at_root and test.parent.name not in owners:
            found.append(f"{test.relative_to(repo)} tests {owners[0]}/{target}.py: "
                         f"move it to tests/unit/{owners[0]}/")
    return found


def test_no_test_module_imports_another() -> None:
    files = python_files(REPO / "tests") | python_files(REPO / "benchmarks")
    found = cross_test_imports(files, REPO / "tests")
    assert not found, ("a shared builder belongs in tests/helpers/, a fixture in "
                       "tests/conftest.py:\n" + "\n".join(found))


def test_no_sys_path_edit_in_tests() -> None:
    found = sys_path_edits(python_files(REPO / "tests"), REPO / "tests")
    assert not found, ("tests import through the tests package (and pyproject.toml's pytest "
                       "pythonpath), never by editing the import path: " + ", ".join(found))


def test_unit_tests_mirror_the_package() -> None:
    found = misplaced_tests(REPO)
    assert not found, "\n".join(found)


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


def test_the_checks_catch_known_cases(tmp_path: Path) -> None:
    edit = "import sys\nsys" + ".path.insert(0, 'tests/unit')\n"
    child = "CODE = 'import sys; sys" + ".path.append(1)'\n"
    _write(tmp_path, {
        "tests/__init__.py": "", "tests/unit/__init__.py": "", "tests/helpers/__init__.py": "",
        "tests/helpers/runs.py": "from tests.helpers import params\n",
        "tests/conftest.py": "from tests.helpers.runs import x\n",
        "tests/unit/test_a.py": "from tests.unit.test_b import _helper\n" + edit,
        "tests/unit/test_b.py": "from test_a import VOCAB\nfrom conftest import TINY\n" + child,
        "tests/unit/test_c.py": "from . import test_a\nfrom .test_b import y\nimport importlib\n"
                                "m = importlib.util.spec_from_file_location('m', 'x.py')\n",
        "tests/unit/test_d.py": "from sys import path\nfrom tests.helpers.runs import ok\n",
        "tests/unit/data/test_shards.py": "", "tests/unit/test_kernels.py": "",
        "tests/unit/stuff/test_e.py": "",
        "gpt1/__init__.py": "", "gpt1/data/__init__.py": "", "gpt1/data/shards.py": "",
        "gpt1/backends/__init__.py": "", "gpt1/backends/kernels.py": "",
        "pipelines/__init__.py": "", "benchmarks/chaos.py": "from tests.unit.test_a import r\n",
    })
    files = python_files(tmp_path / "tests") | python_files(tmp_path / "benchmarks")
    assert cross_test_imports(files, tmp_path / "tests") == [
        "benchmarks/chaos.py:1: imports tests.unit.test_a",
        "benchmarks/chaos.py:1: imports tests.unit.test_a.r",
        "tests/unit/test_a.py:1: imports tests.unit.test_b",
        "tests/unit/test_a.py:1: imports tests.unit.test_b._helper",
        "tests/unit/test_b.py:1: imports test_a", "tests/unit/test_b.py:1: imports test_a.VOCAB",
        "tests/unit/test_b.py:2: imports conftest", "tests/unit/test_b.py:2: imports conftest.TINY",
        "tests/unit/test_c.py:1: imports tests.unit.test_a",
        "tests/unit/test_c.py:2: imports tests.unit.test_b",
        "tests/unit/test_c.py:2: imports tests.unit.test_b.y",
        "tests/unit/test_c.py:4: loads a module with spec_from_file_location()"]
    assert sys_path_edits(files, tmp_path / "tests") == [
        "tests/unit/test_a.py:3", "tests/unit/test_b.py:3", "tests/unit/test_d.py:1"]
    assert misplaced_tests(tmp_path) == [
        "tests/unit/stuff/ names no package folder (one of ['backends', 'benchmarks', 'data', "
        "'pipelines'])",
        "tests/unit/data/ has no __init__.py", "tests/unit/stuff/ has no __init__.py",
        "tests/unit/test_kernels.py tests backends/kernels.py: move it to tests/unit/backends/"]
