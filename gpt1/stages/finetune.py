"""The fine-tuning stages: finetune (the `full` arm of every table), Table 5's ablation rows
and bag-of-words floor, and Figure 2 left (transfer_layers); each runs one arm
(gpt1/arms/run.py) on the params gpt1/arms composes for it."""

from __future__ import annotations

from typing import Any

from gpt1 import arms, names
from gpt1.arms.run import run_arm, run_floor
from gpt1.config import FULL_ARM, Params, override
from gpt1.errors import Gpt1Error
from gpt1.records import StageContext
from gpt1.stage_table import StageRun, record_prefix


def finetune(params: Params, task: str, pretrain_seed: int | None = None, *,
             context: StageContext | None = None) -> dict[str, Any]:
    """Fine-tune the pre-trained Transformer on one task (the `full` row of every table), at
    the (lr, warm-up) its pilot chose where ablations.pilot tunes `full` on the task. Every
    fine-tuning stage here draws its samples outside the task's pilot split
    (gpt1.arms.pilot_ids)."""
    return run_arm(arms.arm_params(params, FULL_ARM, task), task, FULL_ARM, names.TRANSFORMER,
                   pretrain_seed, stem=record_prefix("finetune", task=task),
                   record_params=params, context=context)


def ablation(params: Params, task: str, arm: str, pretrain_seed: int | None = None, *,
             context: StageContext | None = None) -> dict[str, Any]:
    """Table 5: the finetune stage on `task` with the overrides of `arm` (same loop), at the
    lr its pilot chose where ablations.pilot tunes it."""
    if task not in params.ablations.tasks:
        raise Gpt1Error(f"task {task!r} not in ablations.tasks {list(params.ablations.tasks)}")
    arms.ablation_params(params, arm)  # an unknown arm: one line, listed
    return run_arm(arms.arm_params(params, arm, task), task, arm, arms.arm_body(params, arm),
                   pretrain_seed, stem=record_prefix("ablation", task=task, arm=arm),
                   context=context)


def transfer_layers(params: Params, task: str, layers: int, pretrain_seed: int | None = None,
                    *, context: StageContext | None = None) -> dict[str, Any]:
    """Figure 2 left: the finetune stage (the `full` arm at the (lr, warm-up) its pilot chose,
    where ablations.pilot tunes it on `task`) with the embeddings + first `layers` blocks
    transferred, scored like every fine-tune on the task's test split (disjoint from its
    training rows and from the dev split that `select: dev` chooses on)."""
    if task not in params.layers.tasks or not 0 <= layers <= params.model.n_layer:
        raise Gpt1Error(f"{task!r} / {layers} layers: not in layers.tasks "
                        f"{list(params.layers.tasks)} or outside 0..{params.model.n_layer}")
    run = override(arms.layers_caps(arms.arm_params(params, FULL_ARM, task), task),
                        finetune={"layers_transferred": layers, "init": "pretrained"})
    return run_arm(run, task, f"layers_{layers}", names.TRANSFORMER, pretrain_seed,
                   out=f"layers/{task}_{layers}",
                   stem=record_prefix("transfer_layers", task=task, layers=layers),
                   record_params=params, context=context)


def floor_stage(params: Params, task: str, *, context: StageContext | None = None
                ) -> dict[str, Any]:
    """Table 5's bag-of-words floor on one task (stage floor@<task>), recorded like every arm
    (its own record and MLflow run)."""
    return run_floor(params, task, StageRun.of("floor", task=task).stem, context=context)
