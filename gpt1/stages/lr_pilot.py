"""The pilot stages: the (lr, warm-up) an arm's runs use on a task, chosen by gpt1/arms/pilot.py on
a split carved from the training pool, recorded and written as the choice the stages that run
the arm depend on (gpt1.arms.write_choice)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpt1 import arms, tracking
from gpt1.arms import pilot
from gpt1.config import FULL_ARM, Params
from gpt1.errors import Gpt1Error
from gpt1.recording import record, record_in_own_run
from gpt1.records import StageContext


def lr_pilot(params: Params, task: str, arm: str, *,
             context: StageContext | None = None) -> dict[str, Any]:
    """The pilot of `arm` on `task` (gpt1.arms.pilot.run_pilot; an arm ablations.pilot does
    not tune on the task records the recipe's lr), then its choice file."""
    pilot.check_arm(params, arm, task)
    stem = arms.pilot_run(arm, task).stem
    metrics = pilot.not_piloted(params, arm, task)
    if metrics is not None:
        record_in_own_run(params, stem, metrics, (), context=context)
    else:
        metrics = pilot.run_pilot(params, arm, task, context=context)
        with tracking.start_run(stem, params, context=context):  # the stage's own run
            record(params, stem, metrics, pilot.SCORES, summary=pilot.summary(metrics),
                   context=context)
    arms.write_choice(params, arm, task, metrics)
    return metrics


def lr_pilot_full(params: Params, task: str, *, context: StageContext | None = None
                  ) -> dict[str, Any]:
    """The pilot of the `full` row (the finetune stage's arm) on one task of finetune.tasks
    (piloted on ablations.tasks)."""
    return lr_pilot(params, task, FULL_ARM, context=context)


def pilot_dose(params: Params, task: str, tokens: int, *, context: StageContext | None = None
               ) -> dict[str, Any]:
    """The pilot of the dose curve's budget of `tokens` pre-training tokens on `task`: the
    `full` row's pilot (the same grid, training sample and carved split) fine-tuning that
    budget's own pre-training run (stage pretrain_dose) instead of the main one; recorded as
    its own stage (read by curve_dose, gpt1.arms.read_choice)."""
    if task not in params.curves.dose_tasks:
        raise Gpt1Error(f"task {task!r} not in curves.dose_tasks {list(params.curves.dose_tasks)}")
    stem = arms.dose_pilot_run(task, tokens).stem
    metrics = pilot.run_pilot(arms.dose_params(params, tokens), FULL_ARM, task,
                              base=Path(params.paths.finetuned) / arms.DOSE_PILOT_DIR
                              / f"{task}_{tokens}", context=context)
    with tracking.start_run(stem, params, context=context):  # the stage's own run
        record(params, stem, metrics, pilot.SCORES, summary=pilot.summary(metrics),
               context=context)
    return metrics
