"""`gpt1 <stage> [--task NAME] [--params FILE]`: the CLI every DVC stage calls.

The parser is built from the stage table (gpt1/stage_table.py) and the TOOLS below; a stage
runs through gpt1.stage_run (its lock, device, ranks, run name, stage context), a tool through
gpt1.locate.run_tool (its model located first). Every command runs inside the one error
boundary, gpt1.boundary.guarded: a failure is one line on stderr and an exit code.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from pathlib import Path
from typing import Any, NoReturn

import gpt1
from gpt1 import (
    install_check,  # noqa: F401  (first: one line, not a traceback, outside the venv)
    stage_run,
    stage_table,
)
from gpt1.boundary import guarded
from gpt1.stage_table import ARGUMENTS, PRETRAIN_SEED, STAGES
from gpt1.tasks.registry import TASKS

DESCRIPTION = """GPT-1 (Radford et al. 2018) as a pipeline: each subcommand runs one DVC stage or a
tool. Stages normally run through `dvc repro` (dvc.yaml) or a Prefect deployment; see README."""

DEFAULT_PARAMS = "params.yaml"
# Commands that are not pipeline stages: name -> module with add_arguments(parser) and
# run(args, params).
TOOLS: dict[str, str] = {"serve": "gpt1.serve", "export-hf": "gpt1.export",
                         "import-hf": "gpt1.hf_import",
                         "generate": "gpt1.generate", "predict": "gpt1.predict",
                         "relog": "gpt1.tracking.relog", "verdicts": "gpt1.report.verdicts",
                         "seeds": "gpt1.report.design",
                         "one-shot": "gpt1.one_shot"}


def quiet_telemetry() -> None:
    """Turn off every tool's telemetry and pin MLflow to an absolute sqlite store."""
    defaults = {
        "DO_NOT_TRACK": "true",
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "MLFLOW_DISABLE_TELEMETRY": "true",
        "DVC_NO_ANALYTICS": "1",
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "TOKENIZERS_PARALLELISM": "true",
        "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false",  # no progress bars in stage logs
        "MLFLOW_TRACKING_URI": f"sqlite:///{Path.cwd().resolve() / 'mlflow.db'}",
    }
    for key, value in defaults.items():
        os.environ.setdefault(key, value)


OLD_FLAGS = {"--variant": "--arm"}
"""Flags under their old name, still accepted (not in --help): the old word for an arm."""


def _new_flag(arg: str) -> str:
    name, eq, value = arg.partition("=")
    return OLD_FLAGS.get(name, name) + eq + value if arg.startswith("--") else arg


class OneLineParser(argparse.ArgumentParser):
    """Usage errors as one line (the valid choices included), as every other CLI error; an old
    flag (OLD_FLAGS) read as its new name."""

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        if args is not None:  # a subcommand's parser gets its part of argv as a list
            args = [_new_flag(a) for a in args]
        return super().parse_known_args(args, namespace)

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def chosen_command(argv: list[str]) -> str | None:
    """The subcommand named in argv (either spelling), found without parsing: the one tool
    whose module (and torch) `build_parser` then imports."""
    names = {n for name in [*STAGES, *TOOLS] for n in (name, command_name(name))}
    return next((a.replace("-", "_") if a.replace("-", "_") in STAGES else
                 next((t for t in TOOLS if command_name(t) == command_name(a)), a)
                 for a in argv if a in names), None)


def _common_options(parser: argparse.ArgumentParser, top: bool) -> None:
    """--params and -v, accepted before and after the subcommand (the subcommand's copies
    default to SUPPRESS, so they never hide a value given before it)."""
    parser.add_argument("--params", default=DEFAULT_PARAMS if top else argparse.SUPPRESS,
                        help="params file (default params.yaml)")
    parser.add_argument("-v", "--verbose", action="store_true",
                        default=False if top else argparse.SUPPRESS, help="debug logging")


def passive_openmp() -> None:
    """OMP_WAIT_POLICY=PASSIVE unless the user set it; before torch loads (libgomp reads it then).

    Idle OpenMP workers then sleep instead of spinning, so a stage sharing its cores slows by
    about its fair share (benchmarks/under_load.py); spinning made a step several times slower.
    """
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def command_name(name: str) -> str:
    """A subcommand's name as typed: kebab-case, as dvc, mlflow and prefect name theirs (the
    snake_case stage name of dvc.yaml stays an alias)."""
    return name.replace("_", "-")


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The CLI's parser. With `argv`, only the tool it names is imported for its arguments
    (the other tools get their help line only), so a stage starts without loading torch."""
    wanted = None if argv is None else chosen_command(argv)
    parser = OneLineParser(prog="gpt1", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"gpt1 {gpt1.__version__}")
    _common_options(parser, top=True)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND",
                                parser_class=OneLineParser)
    for name, stage in STAGES.items():
        p = _add_command(sub, name, stage_table.function_doc(stage)
                         or f"the `{name}` pipeline stage")
        for arg in stage.arguments:
            kind, help_ = ARGUMENTS[arg]  # a --task is checked once the params load (custom)
            p.add_argument(f"--{arg}", type=kind, required=True, help=help_,
                           metavar="{" + ",".join(TASKS) + "}" if arg == "task" else None)
        if stage.seeded:
            kind, help_ = ARGUMENTS[PRETRAIN_SEED]
            p.add_argument("--pretrain-seed", type=kind, help=help_)
    for name, module in TOOLS.items():
        p = _add_command(sub, name, stage_table.module_doc(module) or name)
        if argv is None or wanted == name:
            importlib.import_module(module).add_arguments(p)
    return parser


def _add_command(sub: Any, name: str, doc: str) -> argparse.ArgumentParser:
    """The subparser of command `name` (both spellings), its help from its docstring `doc`."""
    p: argparse.ArgumentParser = sub.add_parser(
        command_name(name), aliases=_aliases(name), help=stage_table.summary(doc),
        description=stage_table.first_paragraph(doc))
    p.set_defaults(command=name)  # the canonical name, whichever alias was typed
    _common_options(p, top=False)
    return p


def _aliases(name: str) -> list[str]:
    """The other spelling of a subcommand (snake_case <-> kebab-case), kept as an alias."""
    other = {name, name.replace("-", "_")} - {command_name(name)}
    return sorted(other)


def main(argv: list[str] | None = None) -> int:
    passive_openmp()  # first: build_parser imports the tools, which import torch
    quiet_telemetry()
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser(argv).parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
    )
    if args.command in TOOLS:
        from gpt1 import locate

        tool = importlib.import_module(TOOLS[args.command])
        return guarded(command_name(args.command),
                       lambda: locate.run_tool(tool, args, DEFAULT_PARAMS))
    return guarded(args.command,
                   lambda: stage_run.run_stage(args.command, args.params, gpt1.STARTED,
                                               vars(args)))


if __name__ == "__main__":
    sys.exit(main())
