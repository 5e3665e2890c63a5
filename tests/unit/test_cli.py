"""First contact with the CLI: one line and no traceback for each mistake; helpful help."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import gpt1
from gpt1.__main__ import STAGES, TOOLS, build_parser, command_name, main
from gpt1.tasks.registry import TASKS
from tests.helpers.params import make_params_dict
from tests.helpers.repo import REPO


def one_line_error(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_outside_the_venv_says_so_in_one_line(tmp_path: Path) -> None:
    bare = tmp_path / "bare"  # an interpreter without the project installed, like the system one
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    done = subprocess.run([str(bare / "bin" / "python"), "-m", "gpt1", "finetune", "--task",
                           "rte"], cwd=REPO, env=env, capture_output=True, text=True)
    assert done.returncode == 2
    assert "source .venv/bin/activate" in one_line_error(done.stderr)


def test_bad_task_lists_the_valid_ones(tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump(make_params_dict(tmp_path)))
    assert main(["finetune", "--task", "bogus", "--params", str(params)]) == 2
    line = one_line_error(capsys.readouterr().err)
    assert "'bogus'" in line and all(f"'{t}'" in line for t in TASKS)


def test_bad_variant_lists_the_valid_ones(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump(make_params_dict(tmp_path)))
    code = main(["ablation", "--variant", "bogus", "--task", "cola", "--params", str(params)])
    assert code == 2
    line = one_line_error(capsys.readouterr().err)
    assert "'bogus'" in line and "'scratch'" in line and "'lstm'" in line


def test_params_before_or_after_the_subcommand() -> None:
    parse = build_parser().parse_args
    assert parse(["finetune", "--task", "rte"]).params == "params.yaml"
    assert parse(["--params", "a.yaml", "finetune", "--task", "rte"]).params == "a.yaml"
    assert parse(["finetune", "--task", "rte", "--params", "b.yaml"]).params == "b.yaml"
    assert parse(["serve", "--stop", "--params", "c.yaml"]).params == "c.yaml"
    assert parse(["finetune", "--task", "rte", "-v"]).verbose is True
    assert parse(["finetune", "--task", "rte"]).verbose is False


def test_help_describes_every_command_without_internal_notes() -> None:
    parser = build_parser()
    top = parser.format_help()
    assert "STAGES table" not in top and "half-written" not in top
    sub = next(a for a in parser._actions if a.dest == "command")
    helps = {c.dest.split()[0]: c.help for c in sub._choices_actions}  # type: ignore[attr-defined]
    assert {command_name(s) for s in STAGES} <= set(helps)
    assert all(h and not h.startswith("run the `") for h in helps.values()), helps
    finetune = sub.choices["finetune"].format_help()  # type: ignore[attr-defined]
    assert "Fine-tune" in finetune and "{snli,mnli" in finetune
    serve = sub.choices["serve"].format_help()  # type: ignore[attr-defined]
    assert "imports neither prefect" not in serve  # the module's notes for code readers


def test_version_and_one_naming_style_with_the_old_names_as_aliases(capsys) -> None:
    """`gpt1 --version`; every subcommand is kebab-case, the dvc.yaml spelling an alias that
    runs the same command."""
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(["--version"])
    assert exit_.value.code == 0 and capsys.readouterr().out.strip() == f"gpt1 {gpt1.__version__}"
    parse = build_parser().parse_args
    names = [command_name(n) for n in [*STAGES, *TOOLS]]
    assert all(n == n.lower() and "_" not in n for n in names)
    assert parse(["prepare-task", "--task", "rte"]).command == "prepare_task"
    assert parse(["prepare_task", "--task", "rte"]).command == "prepare_task"
    assert parse(["export_hf", "out"]).command == parse(["export-hf", "out"]).command
    assert parse(["predict", "--model-dir", "m", "x"]).model == "m"  # the old flag names
    assert parse(["generate", "--run-dir", "r", "x"]).model == "r"


def test_every_help_line_is_whole_sentences() -> None:
    """No command's help stops mid-sentence (a docstring's first line cut at its wrap)."""
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    helps = {c.dest.split()[0]: c.help for c in sub._choices_actions}  # type: ignore[attr-defined]
    cut = {name: h for name, h in helps.items() if not h.rstrip().endswith((".", ")"))}
    assert not cut, cut


def test_every_gpt1_line_and_flag_the_readme_shows_parses() -> None:
    """The README's `gpt1 ...` lines parse as written, and the flag aliases it names for
    `predict` are accepted (`--run-dir` was rejected)."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    lines = [line.split("  #")[0] for line in readme.splitlines()
             if line.startswith(".venv/bin/gpt1 ")]
    assert len(lines) >= 6
    for line in lines:
        argv = shlex.split(line)[1:]
        build_parser(argv).parse_args(argv)  # an unknown flag: SystemExit 2
    for flag in re.findall(r"`(--[a-z][a-z-]*)", readme.split("## Using the model")[1]
                           .split("\n## ")[0]):
        argv = ["predict", "text", flag, "x"]
        if flag == "--overwrite":
            argv = ["export-hf", "--overwrite", "out"]
        elif flag == "--seed":
            argv = ["generate", "--seed", "1", "text"]
        build_parser(argv).parse_args(argv)
    for alias in ("--model-dir", "--run-dir"):
        assert build_parser().parse_args(["predict", alias, "m", "x"]).model == "m"


def test_export_usage_names_one_out_dir(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser(["export-hf", "--help"]).parse_args(["export-hf", "--help"])
    usage = capsys.readouterr().out.split("\n\n")[0]
    assert "OUT_DIR" in usage and "[OUT_DIR" not in usage, usage
    args = build_parser().parse_args(["export-hf", "run", "out"])  # the old form = --model
    assert args.paths == ["out"] and args.model == "run"
    for argv in (["export-hf", "run", "out", "--model", "m"],
                 ["export-hf", "--model", "m", "run", "out"]):
        with pytest.raises(SystemExit):
            build_parser().parse_args(argv)
    assert "the model with --model" in capsys.readouterr().err


def test_a_stage_parses_its_command_line_without_importing_torch() -> None:
    """The parser imports only the tool it runs: a stage's first line comes before torch."""
    code = ("import sys; from gpt1.__main__ import build_parser; "
            "a = ['finetune', '--task', 'rte']; build_parser(a).parse_args(a); "
            "print(sorted(m for m in ('torch', 'mlflow', 'pandas', 'great_expectations') "
            "if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=REPO, check=True)
    assert done.stdout.strip() == "[]", done.stdout
