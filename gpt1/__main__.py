"""`gpt1 <stage> [--task NAME] [--params FILE]`: the CLI every DVC stage calls.

argparse and the STAGES table only; the work is in gpt1.stages. Any Gpt1Error or ParamsError
becomes one line on stderr and exit code 2, with nothing half-written.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpt1.config import ParamsError, load_params
from gpt1.errors import Gpt1Error

# Stage name (as in dvc.yaml) -> stages.<function>. Stages taking --task are listed in TASK_STAGES.
STAGES: dict[str, str] = {
    "download_corpus": "download_corpus",
    "clean_corpus": "clean_corpus",
    "check_corpus": "check_corpus",
    "train_bpe": "train_bpe",
    "shard_corpus": "shard_corpus",
    "pretrain": "pretrain",
    "pretrain_lstm": "pretrain_lstm",
    "prepare_task": "prepare_task",
    "finetune": "finetune",
    "ablation": "ablation",
    "transfer_layers": "transfer_layers",
    "zeroshot": "zeroshot",
    "zeroshot_lstm": "zeroshot_lstm",
    "report": "report",
}
TASK_STAGES: set[str] = {"prepare_task", "finetune", "ablation", "transfer_layers"}
# Stages taking more arguments than --task: stage -> {argument: type} (all required).
STAGE_ARGS: dict[str, dict[str, type]] = {"ablation": {"variant": str},
                                          "transfer_layers": {"layers": int}}

# Commands that are not pipeline stages: name -> module with add_arguments(parser) and
# run(args, params).
TOOLS: dict[str, str] = {"serve": "gpt1.serve", "export-hf": "gpt1.export"}


def quiet_telemetry() -> None:
    """Turn off every tool's telemetry and pin MLflow to an absolute sqlite store (ENV.md)."""
    defaults = {
        "DO_NOT_TRACK": "true",
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "MLFLOW_DISABLE_TELEMETRY": "true",
        "DVC_NO_ANALYTICS": "1",
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "TOKENIZERS_PARALLELISM": "true",
        "MLFLOW_TRACKING_URI": f"sqlite:///{Path.cwd().resolve() / 'mlflow.db'}",
    }
    for key, value in defaults.items():
        os.environ.setdefault(key, value)


def passive_openmp() -> None:
    """OMP_WAIT_POLICY=PASSIVE unless the user set it; before torch loads (libgomp reads it then).

    Idle OpenMP workers then sleep instead of spinning, so a stage sharing its cores slows by
    about its fair share (benchmarks/under_load.py); spinning made a step several times slower.
    """
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gpt1", description=__doc__)
    parser.add_argument("--params", default="params.yaml", help="params file (default params.yaml)")
    parser.add_argument("-v", "--verbose", action="store_true")
    sub = parser.add_subparsers(dest="command", required=True)
    for name in STAGES:
        p = sub.add_parser(name, help=f"run the `{name}` pipeline stage")
        if name in TASK_STAGES:
            p.add_argument("--task", required=True)
        for arg, kind in STAGE_ARGS.get(name, {}).items():
            p.add_argument(f"--{arg}", type=kind, required=True)
    for name, module in TOOLS.items():
        tool = importlib.import_module(module)
        tool.add_arguments(sub.add_parser(name, help=(tool.__doc__ or name).splitlines()[0]))
    return parser


def run_stage(name: str, params_path: str, **kwargs: Any) -> Any:
    params = load_params(params_path)  # fail on bad params before importing anything heavy
    from gpt1 import stages

    fn: Callable[..., Any] = getattr(stages, STAGES[name])
    return fn(params, **kwargs)


def main(argv: list[str] | None = None) -> int:
    passive_openmp()  # first: build_parser imports the tools, which import torch
    quiet_telemetry()
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
    )
    kwargs = {"task": args.task} if args.command in TASK_STAGES else {}
    kwargs.update({arg: getattr(args, arg) for arg in STAGE_ARGS.get(args.command, {})})
    try:
        if args.command in TOOLS:
            importlib.import_module(TOOLS[args.command]).run(args, load_params(args.params))
        else:
            run_stage(args.command, args.params, **kwargs)
    except (Gpt1Error, ParamsError) as err:
        print(f"gpt1 {args.command}: error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
