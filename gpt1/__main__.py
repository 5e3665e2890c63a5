"""`gpt1 <stage> [--task NAME] [--params FILE]`: the CLI every DVC stage calls.

The parser is built from the stage table (gpt1/stage_table.py) and the TOOLS below; a stage
runs through gpt1.stage_run (its lock, device, ranks, run name, record clock), a tool through
`run_tool`. `guarded` is the one error boundary: a Gpt1Error or ParamsError becomes one line
on stderr and exit code 2, a stopped training run one line and 128 + signal, anything
unexpected one "internal error" line naming the log file that holds its traceback (exit 1).
Outputs are written atomically, so nothing is half-written either way.
"""

from __future__ import annotations

import argparse
import ast
import errno
import importlib
import logging
import os
import re
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

import gpt1
from gpt1 import (
    install_check,  # noqa: F401  (first: one line, not a traceback, outside the venv)
    stage_run,
)
from gpt1.config import ParamsError, load_params
from gpt1.errors import Gpt1Error
from gpt1.interrupt import StoppedError
from gpt1.stage_table import ARGUMENTS, PRETRAIN_SEED, STAGES, function_doc
from gpt1.tasks.registry import TASKS

DESCRIPTION = """GPT-1 (Radford et al. 2018) as a pipeline: each subcommand runs one DVC stage or a
tool. Stages normally run through `dvc repro` (dvc.yaml) or a Prefect deployment; see README."""

DEFAULT_PARAMS = "params.yaml"
# Commands that are not pipeline stages: name -> module with add_arguments(parser) and
# run(args, params).
TOOLS: dict[str, str] = {"serve": "gpt1.serve", "export-hf": "gpt1.export",
                         "import-hf": "gpt1.hf_import",
                         "generate": "gpt1.generate", "predict": "gpt1.predict",
                         "relog": "gpt1.tracking.relog", "verdicts": "gpt1.report.verdicts"}


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


class OneLineParser(argparse.ArgumentParser):
    """Usage errors as one line (the valid choices included), as every other CLI error."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _first_paragraph(doc: str) -> str:
    """A docstring's user-facing part: the rest is notes for readers of the code."""
    return doc.split("\n\n", 1)[0]


def summary(doc: str) -> str:
    """A command's one-line help: the docstring's first sentence, whole (its wrapped lines
    joined), never a line cut mid-sentence."""
    text = " ".join(_first_paragraph(doc).split())
    match = re.search(r"(?<![ .]e\.g)(?<![ .]i\.e)[.!?](?=\s)", text)
    return text[:match.end()] if match else text


def tool_doc(module: str) -> str:
    """A tool module's docstring, read without importing it (the tools import torch)."""
    path = Path(gpt1.__file__).parent.joinpath(*module.split(".")[1:]).with_suffix(".py")
    return ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""


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


def custom_tasks(argv: list[str]) -> list[str]:
    """The names of params tasks.custom in the params file argv names (default params.yaml),
    read before parsing so that `--task` accepts them; [] when there is no readable file (the
    params load then says what is wrong)."""
    path = DEFAULT_PARAMS
    for i, arg in enumerate(argv):
        if arg == "--params" and i + 1 < len(argv):
            path = argv[i + 1]
        elif arg.startswith("--params="):
            path = arg.split("=", 1)[1]
    try:
        import yaml

        raw = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError, yaml.YAMLError):
        return []
    tasks = raw.get("tasks") if isinstance(raw, dict) else None
    custom = tasks.get("custom") if isinstance(tasks, dict) else None
    return [str(name) for name in custom] if isinstance(custom, dict) else []


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
        doc = function_doc(stage) or f"the `{name}` pipeline stage"
        p = sub.add_parser(command_name(name), aliases=_aliases(name), help=summary(doc),
                           description=_first_paragraph(doc))
        p.set_defaults(command=name)  # the canonical name, whichever alias was typed
        _common_options(p, top=False)
        for arg in stage.arguments:
            kind, help_ = ARGUMENTS[arg]
            choices = (list(dict.fromkeys([*TASKS, *custom_tasks(argv or [])]))
                       if arg == "task" else None)
            p.add_argument(f"--{arg}", type=kind, required=True, help=help_, choices=choices)
        if stage.seeded:
            kind, help_ = ARGUMENTS[PRETRAIN_SEED]
            p.add_argument("--pretrain-seed", type=kind, help=help_)
    for name, module in TOOLS.items():
        doc = tool_doc(module) or name
        p = sub.add_parser(command_name(name), aliases=_aliases(name), help=summary(doc),
                           description=_first_paragraph(doc))
        p.set_defaults(command=name)
        _common_options(p, top=False)
        if argv is None or wanted == name:
            importlib.import_module(module).add_arguments(p)
    return parser


def _aliases(name: str) -> list[str]:
    """The other spelling of a subcommand (snake_case <-> kebab-case), kept as an alias."""
    other = {name, name.replace("-", "_")} - {command_name(name)}
    return sorted(other)


def run_tool(tool: Any, args: argparse.Namespace) -> Any:
    """Run a tool. With `--model` its location is resolved first (gpt1.locate); the params
    file is then optional: without one, the model's own recorded params stand in (a
    self-contained model works outside the repository). A tool declaring PARAMS_OPTIONAL
    gets None without a params file."""
    location = getattr(args, "model", None)
    if not location:
        optional = getattr(tool, "PARAMS_OPTIONAL", False)  # the tool can do without (None)
        absent = args.params == DEFAULT_PARAMS and not Path(args.params).is_file()
        return tool.run(args, None if optional and absent else load_params(args.params))
    params = (load_params(args.params)
              if Path(args.params).is_file() or args.params != DEFAULT_PARAMS else None)
    from gpt1 import checkpoint, locate

    uri = None
    if params is not None and location.startswith(locate.MLFLOW_SCHEMES):
        from gpt1 import tracking

        uri = tracking.tracking_uri(params)
    with locate.located(location, None if params is None else params.paths.tokenizer,
                        uri) as (model_dir, tok_dir):
        args.model, args.tokenizer = str(model_dir), str(tok_dir)
        if params is None:
            params = checkpoint.recorded_params(checkpoint.read_model_meta(model_dir),
                                                model_dir / checkpoint.MODEL_META)
        return tool.run(args, params)


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
        tool = importlib.import_module(TOOLS[args.command])
        return guarded(command_name(args.command), lambda: run_tool(tool, args))
    return guarded(args.command,
                   lambda: stage_run.run_stage(args.command, args.params, gpt1.STARTED,
                                               vars(args)))


# OS errors that are the environment's, not a bug: said in one line naming the file.
_ENVIRONMENT_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EACCES, errno.EPERM, errno.EROFS,
                       errno.ENOENT, errno.EIO}


def guarded(command: str, work: Callable[[], Any]) -> int:
    """Run `work`; every failure ends in one line on stderr and a non-zero exit code."""

    def say(line: str) -> None:
        print(f"gpt1 {command}: {' '.join(line.split())}", file=sys.stderr)

    try:
        work()
    except StoppedError as err:
        say(str(err))
        return err.exit_code
    except (Gpt1Error, ParamsError) as err:
        say(f"error: {err}")
        return 2
    except KeyboardInterrupt:
        say("interrupted; outputs are written atomically, re-run to start again")
        return 130
    except OSError as err:
        if err.errno in (errno.ENOSPC, errno.EDQUOT):  # not written through gpt1.atomic
            from gpt1.atomic import DiskFullError

            say(f"error: {DiskFullError(err.filename or Path.cwd(), 0)}")
            return 2
        if err.errno not in _ENVIRONMENT_ERRNOS or not err.filename:
            say(f"internal error: {type(err).__name__}: {err}; traceback in "
                f"{write_traceback(command)}")
            return 1
        say(f"error: {err.filename}: {err.strerror}")
        return 2
    except Exception as err:
        first = next(iter(str(err).strip().splitlines()), "")
        say(f"internal error: {type(err).__name__}: {first}; traceback in "
            f"{write_traceback(command)}")
        return 1
    return 0


def write_traceback(command: str) -> Path:
    """The current exception's traceback in <cache>/gpt1/errors/ (XDG_CACHE_HOME or ~/.cache;
    the system temp dir if that is not writable); returns the file."""
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "gpt1" / "errors"
    name = f"{command}-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{os.getpid()}.log"
    text = f"gpt1 {' '.join(sys.argv[1:])}\n\n{traceback.format_exc()}"
    for folder in (cache, Path(tempfile.gettempdir()) / "gpt1-errors"):
        try:
            folder.mkdir(parents=True, exist_ok=True)
            (folder / name).write_text(text, encoding="utf-8")
            return folder / name
        except OSError:
            continue
    return Path("<not written: no writable cache or temp directory>")


if __name__ == "__main__":
    sys.exit(main())
