"""dvc.yaml's code dependencies against the code each stage runs: a stage whose outputs a module
decides lists that module (a file, or a folder holding it) among its deps, so that DVC re-runs
it when the module changes instead of leaving its outputs silently stale; and it lists no
module of gpt1/ it does not run.

What a stage runs is read with `ast` (nothing is imported): from its function
(gpt1/stage_table.py), every name it refers to, followed through the modules that define them
(tests/helpers/imports.py `reached_modules`), not into the modules of NOT_DEPS.
"""

from __future__ import annotations

import functools
from pathlib import Path

import yaml

from gpt1.stage_table import STAGES
from tests.helpers.imports import module_files, reached_modules, read_modules
from tests.helpers.repo import REPO

NOT_DEPS = (
    # how a stage runs, not what it writes: error lines, progress lines, Ctrl-C handling,
    # temp-then-rename writes, the import clock (the sidecar's wall_seconds), where the
    # repository is
    "gpt1/errors.py", "gpt1/progress.py", "gpt1/interrupt.py", "gpt1/atomic.py",
    "gpt1/__init__.py", "gpt1/repo.py",
    # MLflow: runs, metrics and registered models, none of them a DVC output
    "gpt1/tracking/", "gpt1/logged_models.py",
    # the typed params: the values a stage reads are params.yaml's, which its `params:` declare
    "gpt1/config.py",
    # the stage's name and arguments: dvc.yaml's cmd passes every argument explicitly
    "gpt1/stage_table.py",
    # the record's file format and its one write path: records stay readable across format
    # changes (old records are read), and the report, which reads them, lists records.py
    "gpt1/records.py", "gpt1/recording.py",
)
LAUNCHER = "gpt1/launcher.py"
"""A launched stage's command starts pretrain.nproc ranks (gpt1/launcher.py) before its function
runs: a dependency its function does not reach."""


def covered(path: str, deps: list[str]) -> bool:
    """`path` is a listed file, or lies in a listed folder."""
    return any(path == d or path.startswith(d.rstrip("/") + "/") for d in deps)


def not_a_dep(path: str) -> bool:
    return covered(path, list(NOT_DEPS))


@functools.cache
def stage_code() -> dict[str, tuple[set[str], list[str]]]:
    """Stage -> (the gpt1/ files its function runs, its gpt1/ deps in dvc.yaml)."""
    files = module_files()
    where = {m: str(p.relative_to(REPO)) for m, p in files.items()}
    modules = read_modules(files)
    dvc = yaml.safe_load((REPO / "dvc.yaml").read_text(encoding="utf-8"))["stages"]
    out = {}
    for name, stage in STAGES.items():
        body = dvc[name].get("do", dvc[name])
        runs = reached_modules(modules, (stage.module, stage.attribute),
                               stop=lambda m: not_a_dep(where[m]))
        out[name] = ({where[m] for m in runs},
                     [d for d in body.get("deps", []) if d.startswith("gpt1")])
    return out


def test_every_module_a_stage_runs_is_its_dependency() -> None:
    missing = {name: sorted(p for p in runs if not covered(p, deps))
               for name, (runs, deps) in stage_code().items()}
    missing = {name: paths for name, paths in missing.items() if paths}
    assert not missing, f"dvc.yaml deps lack modules their stage runs: {missing}"


def test_no_stage_lists_a_module_it_does_not_run() -> None:
    stray = {}
    for name, (runs, deps) in stage_code().items():
        extra = [d for d in deps if not any(covered(p, [d]) for p in runs)
                 and not not_a_dep(d) and not (d == LAUNCHER and STAGES[name].launched)]
        if extra:
            stray[name] = extra
    assert not stray, f"dvc.yaml deps a stage does not run: {stray}"


def test_the_reader_follows_names_not_whole_modules(tmp_path: Path) -> None:
    for name, text in {
        "gpt1/__init__.py": "",
        "gpt1/stages.py": ("from gpt1 import lib, typed\nfrom gpt1.data import load\n"
                           "def helper():\n    from gpt1 import deferred\n"
                           "    return deferred.f()\n"
                           "def stage(params: typed.T) -> typed.T:\n"
                           "    return lib.run(load(), helper())\n"
                           "def other():\n    from gpt1 import unused\n    unused.g()\n"),
        "gpt1/lib.py": ("from gpt1 import model as m\ndef run(x, y):\n    return m.Net()\n"
                        "def spare():\n    from gpt1 import unused\n    unused.g()\n"),
        "gpt1/model.py": ("class Net:\n    def fit(self):\n        from gpt1 import inner\n"
                          "        return inner.g()\n"),
        "gpt1/data/__init__.py": "from gpt1.data.reader import load\n",
        "gpt1/data/reader.py": "def load():\n    return 1\n",
        "gpt1/deferred.py": "def f():\n    return 2\n",
        "gpt1/inner.py": "", "gpt1/unused.py": "", "gpt1/typed.py": "",
        "gpt1/stopped.py": "", "pipelines/__init__.py": "",
    }.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    modules = read_modules(module_files(tmp_path))
    assert reached_modules(modules, ("gpt1.stages", "stage")) == {
        "gpt1.stages", "gpt1.lib", "gpt1.model", "gpt1.inner", "gpt1.data", "gpt1.data.reader",
        "gpt1.deferred"}
    assert reached_modules(modules, ("gpt1.stages", "stage"),
                           stop=lambda m: m == "gpt1.model") == {
        "gpt1.stages", "gpt1.lib", "gpt1.data", "gpt1.data.reader", "gpt1.deferred"}
