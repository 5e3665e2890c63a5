"""Where pre-training can show, as stages: the labelled-data curve (each
arm of curves.arms fine-tuned on n training examples, stage curve_n; the bag-of-words floor
at the same n, stage curve_floor), the pre-training-compute curve (the `full` recipe
fine-tuned from each kept zero-shot checkpoint of a pre-training run, stage curve_step) and
the dose curve (the `full` row fine-tuned from each budget's own pre-training run, stage
curve_dose). Each point runs one arm (gpt1/arms/run.py) on the params gpt1/arms composes for
it, its training samples drawn outside the rows the task's pilot scored (`arms.outside_pilot`;
the dose curve's are Table 5's, outside them by construction); every point is its own record,
which the report's curves (gpt1/report/curves.py) read; a record's variant is curve_n_<arm>,
curve_step or curve_dose, never a table row's (the tables read finetune_* records)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpt1 import atomic, hf_stand_in, names
from gpt1 import checkpoint as ckpt
from gpt1.arms import arm_body, arm_params, dose_arm_params, outside_pilot, with_caps
from gpt1.arms.run import run_arm, run_floor
from gpt1.config import FULL_ARM, Params
from gpt1.errors import Gpt1Error
from gpt1.floor import VARIANT as FLOOR_ARM
from gpt1.records import StageContext
from gpt1.stage_table import StageRun, record_prefix, resolve_pretrain_seed

N_PREFIX, STEP_PREFIX, DOSE_PREFIX = "curve_n", "curve_step", "curve_dose"
"""The points' folders under paths.finetuned and their records' variants (the stems are
gpt1.stage_table's)."""


def _check(params: Params, task: str, n: int | None = None, arm: str | None = None) -> None:
    cfg = params.curves
    if task not in cfg.tasks:
        raise Gpt1Error(f"task {task!r} not in curves.tasks {list(cfg.tasks)}")
    if n is not None and n not in cfg.ns:
        raise Gpt1Error(f"n = {n} not in curves.ns {list(cfg.ns)}")
    if arm is not None and arm not in cfg.arms:
        raise Gpt1Error(f"arm {arm!r} not in curves.arms {list(cfg.arms)}")


def curve_n(params: Params, task: str, n: int, arm: str, pretrain_seed: int | None = None, *,
            context: StageContext | None = None) -> dict[str, Any]:
    """The labelled-data curve at one point: `arm` fine-tuned on n training examples of `task`
    per fine-tuning seed (each seed its own seeded sample), scored on the task's test split
    like every fine-tune; record curve_n_<task>_<n>_<arm>_p<pretrain_seed>."""
    _check(params, task, n, arm)
    held = outside_pilot(params, task, n, "curves.ns")
    run = with_caps(arm_params(params, arm, task), task, n, None)
    return run_arm(run, task, f"{N_PREFIX}_{arm}", arm_body(params, arm), pretrain_seed,
                   out=f"{N_PREFIX}/{arm}/{task}_{n}",
                   stem=record_prefix("curve_n", task=task, n=n, arm=arm),
                   record_params=params, held_out=held, context=context)


def curve_floor(params: Params, task: str, n: int, *, context: StageContext | None = None
                ) -> dict[str, Any]:
    """The bag-of-words floor of the labelled-data curve at n (gpt1/floor.py on the same
    training samples the neural arms draw at n); record curve_floor_<task>_<n>."""
    _check(params, task, n)
    held = outside_pilot(params, task, n, "curves.ns")
    return run_floor(params, task, StageRun.of("curve_floor", task=task, n=n).stem,
                     with_caps(params, task, n, None), out=f"{N_PREFIX}/{FLOOR_ARM}/{task}_{n}",
                     held_out=held, context=context)


def kept_steps(params: Params, pretrain_seed: int) -> list[int]:
    """The steps of the kept zero-shot checkpoints of Transformer pre-training run
    `pretrain_seed`."""
    meta = ckpt.read_model_meta(ckpt.pretrain_dir(params, names.TRANSFORMER, pretrain_seed))
    return sorted(int(s) for s in meta["zeroshot"])


def curve_step(params: Params, task: str, checkpoint: int,
               pretrain_seed: int | None = None, *,
               context: StageContext | None = None) -> dict[str, Any]:
    """The pre-training-compute curve at one point: the `full` row's recipe (at the (lr,
    warm-up) its pilot chose, as arms.arm_params gives it) on curves.compute_n training examples of
    `task`, fine-tuned from the `checkpoint`-th kept zero-shot checkpoint (step order) of
    pre-training run `pretrain_seed`; the record carries its pretrain_step. Record
    curve_step_<task>_<checkpoint>_p<pretrain_seed>."""
    _check(params, task)
    if checkpoint not in params.curves.checkpoints:
        raise Gpt1Error(f"checkpoint {checkpoint} not in curves.checkpoints "
                        f"{list(params.curves.checkpoints)}")
    pretrain_seed = resolve_pretrain_seed(params.pretrain.seeds, pretrain_seed)
    stem = record_prefix("curve_step", task=task, checkpoint=checkpoint)
    tag = names.run_tag(pretrain_seed)
    if params.pretrain.import_hf is not None:  # released final weights: no checkpoints
        with atomic.atomic_path(Path(params.paths.finetuned) / tag / STEP_PREFIX
                                / f"{task}_{checkpoint}") as tmp:
            tmp.mkdir()  # the stage's (empty) output
        return hf_stand_in.not_run(params, names.record_stem(stem, pretrain_seed),
                                   context=context)
    steps = kept_steps(params, pretrain_seed)
    if checkpoint >= len(steps):
        raise Gpt1Error(f"pre-training run {tag} kept {len(steps)} zero-shot checkpoints "
                        f"(steps {steps}); curves.checkpoints names index {checkpoint}",
                        ckpt.pretrain_dir(params, names.TRANSFORMER, pretrain_seed)
                        / ckpt.MODEL_META)
    held = outside_pilot(params, task, params.curves.compute_n, "curves.compute_n")
    run = with_caps(arm_params(params, FULL_ARM, task), task, params.curves.compute_n, None)
    return run_arm(run, task, STEP_PREFIX, names.TRANSFORMER, pretrain_seed,
                   out=f"{STEP_PREFIX}/{task}_{checkpoint}", stem=stem, record_params=params,
                   step=steps[checkpoint], held_out=held, context=context)


def curve_dose(params: Params, task: str, tokens: int, pretrain_seed: int | None = None, *,
               context: StageContext | None = None) -> dict[str, Any]:
    """The dose curve at one budget: Table 5's `full` row on `task` (its training samples,
    seeds and scored split) fine-tuned from pre-training run `pretrain_seed` of `tokens` tokens
    (stage pretrain_dose), at the (lr, warm-up) that budget's own pilot chose (stage
    pilot_dose). Record curve_dose_<task>_<tokens>_p<pretrain_seed>; the curve's top dose and
    dose 0 are Table 5's own full and scratch records."""
    if task not in params.curves.dose_tasks:
        raise Gpt1Error(f"task {task!r} not in curves.dose_tasks {list(params.curves.dose_tasks)}")
    return run_arm(dose_arm_params(params, task, tokens), task, DOSE_PREFIX, names.TRANSFORMER,
                   pretrain_seed, out=f"{DOSE_PREFIX}/{task}_{tokens}",
                   stem=record_prefix("curve_dose", task=task, tokens=tokens),
                   record_params=params, context=context)
