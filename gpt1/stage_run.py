"""How the CLI runs one pipeline stage (gpt1/stage_table.py names its function).

`run_stage` loads the params, resolves the stage's arguments (the pre-training seed
included) and its run name (`stage_table.StageRun`: DVC's address), holds the stage's lock
(gpt1.stage_lock), checks the device, launches pretrain.nproc ranks for a launched stage
(gpt1.launcher), makes the stage context (gpt1.records.StageContext: run name,
params, start time, stage hash, rank) and runs the function on it inside the stage's MLflow
run. Errors propagate: the CLI's `guarded` turns them into one line.
"""

from __future__ import annotations

import dataclasses
import importlib
import time
from collections.abc import Callable
from typing import Any

from gpt1 import launcher
from gpt1.config import Params, load_params
from gpt1.records import StageContext
from gpt1.stage_table import STAGES, StageRun, stage_arguments


def run_stage(name: str, params_path: str, started: float | None = None,
              values: dict[str, Any] | None = None) -> Any:
    """Run one stage on its parsed CLI arguments `values`; its wall time counts from `started`
    (a perf_counter value; default now). The stage's lock (gpt1.stage_lock) is held
    throughout: a second run of it in this workspace stops in one line; a rank launched by the
    stage runs under its launcher's."""
    started = time.perf_counter() if started is None else started
    params = load_params(params_path)  # fail on bad params before importing anything heavy
    run = StageRun.of(name, **stage_arguments(name, values or {}, params.pretrain.seeds,
                                              params.tasks.names))
    run_name, kwargs = run.address, run.kwargs
    if launcher.rank() is not None:
        return _run_stage(name, run_name, params, params_path, started, kwargs)
    from gpt1 import stage_lock

    with stage_lock.held(run.lock_name, params):
        # the first line, before torch and mlflow load; on stdout: stderr stays the one line
        # of a failure (a rank launched by the stage prints none: its launcher did)
        print(f"gpt1 {run_name}: started ({params_path})", flush=True)
        return _run_stage(name, run_name, params, params_path, started, kwargs)


def _run_stage(name: str, run_name: str, params: Params, params_path: str,
               started: float, kwargs: dict[str, Any]) -> Any:
    from gpt1 import tracking

    stage = STAGES[name]
    tracking.check_store(params)  # an unusable tracking store stops the stage before its work
    if stage.device:
        from gpt1 import runtime

        runtime.check_device(params.device)  # `device: cuda` without a usable GPU: stop now
    if stage.launched and launcher.launch_if_needed(StageRun.of(name, **kwargs).argv, params,
                                                    params_path):
        return None  # the ranks ran the stage
    context = StageContext.of(name, run_name, params, started, launcher.rank())
    fn: Callable[..., Any] = getattr(importlib.import_module(stage.module), stage.attribute)
    if not stage.tracked or not context.records:  # torchrun: rank 0 logs
        return fn(params, **kwargs, context=context)
    with tracking.stage_scope(run_name, params, name) as run:  # open before the work
        return fn(params, **kwargs, context=dataclasses.replace(context, run=run))
