"""Where pre-training can show, as stages: the labelled-data curve (each
arm of curves.arms fine-tuned on n training examples, stage curve_n; the bag-of-words floor
at the same n, stage curve_floor) and the pre-training-compute curve (the `full` recipe
fine-tuned from each kept zero-shot checkpoint of a pre-training run, stage curve_step). One
fine-tuning loop (gpt1/stages/finetune.py) on the params of each point; every point is its
own record, which the report's curves (gpt1/report/curves.py) read; a record's variant is
curve_n_<arm> or curve_step, never a table row's (the tables read finetune_* records)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpt1 import atomic, floor, names, tracking
from gpt1 import checkpoint as ckpt
from gpt1.config import Params
from gpt1.errors import Gpt1Error
from gpt1.stage_table import resolve_pretrain_seed
from gpt1.stages import import_hf
from gpt1.stages.finetune import finetune_variant
from gpt1.stages.recording import record
from gpt1.stages.variants import ablation_params, pilot_choice, with_caps

N_PREFIX, FLOOR_PREFIX, STEP_PREFIX = "curve_n", "curve_floor", "curve_step"
"""Record stems: curve_n_<task>_<n>_<arm>_p<seed>, curve_floor_<task>_<n>,
curve_step_<task>_<checkpoint>_p<seed>."""


def _check(params: Params, task: str, n: int | None = None, arm: str | None = None) -> None:
    cfg = params.curves
    if task not in cfg.tasks:
        raise Gpt1Error(f"task {task!r} not in curves.tasks {list(cfg.tasks)}")
    if n is not None and n not in cfg.ns:
        raise Gpt1Error(f"n = {n} not in curves.ns {list(cfg.ns)}")
    if arm is not None and arm not in cfg.arms:
        raise Gpt1Error(f"arm {arm!r} not in curves.arms {list(cfg.arms)}")


def arm_params(params: Params, task: str, arm: str) -> tuple[Params, str]:
    """(the finetune params of `arm`, its body): `full` or a Table 5 row (ablations.presets), at
    the (lr, warm-up) its pilot chose where ablations.pilot tunes it on `task` (as the finetune
    and ablation stages do), else at its recipe."""
    run = ablation_params(params, arm, *pilot_choice(params, arm, task))
    if arm == "full":
        return run, names.TRANSFORMER
    return run, names.body(params.ablations.presets[arm].body)


def curve_n(params: Params, task: str, n: int, arm: str, pretrain_seed: int | None = None
            ) -> dict[str, Any]:
    """The labelled-data curve at one point: `arm` fine-tuned on n training examples of `task`
    per fine-tuning seed (each seed its own seeded sample), scored on the task's test split
    like every fine-tune; record curve_n_<task>_<n>_<arm>_p<seed>."""
    _check(params, task, n, arm)
    run, kind = arm_params(params, task, arm)
    return finetune_variant(with_caps(run, task, n, None), task, f"{N_PREFIX}_{arm}", kind,
                            pretrain_seed,
                            out=f"{N_PREFIX}/{arm}/{task}_{n}", stem=f"{N_PREFIX}_{task}_{n}_{arm}",
                            record_params=params)


def curve_floor(params: Params, task: str, n: int) -> dict[str, Any]:
    """The bag-of-words floor of the labelled-data curve at n (gpt1/floor.py on the same
    training samples the neural arms draw at n); record curve_floor_<task>_<n>."""
    _check(params, task, n)
    stem = f"{FLOOR_PREFIX}_{task}_{n}"
    with tracking.start_run(stem, params):
        metrics = floor.run(with_caps(params, task, n, None), task,
                            out=f"{N_PREFIX}/{floor.VARIANT}/{task}_{n}")
        record(params, stem, metrics, ("scores",) if "scores" in metrics else ())
    return metrics


def kept_steps(params: Params, seed: int) -> list[int]:
    """The steps of the kept zero-shot checkpoints of Transformer pre-training run `seed`."""
    meta = ckpt.read_model_meta(ckpt.pretrain_dir(params, names.TRANSFORMER, seed))
    return sorted(int(s) for s in meta["zeroshot"])


def curve_step(params: Params, task: str, checkpoint: int,
               pretrain_seed: int | None = None) -> dict[str, Any]:
    """The pre-training-compute curve at one point: the `full` recipe on curves.compute_n
    training examples of `task`, fine-tuned from the `checkpoint`-th kept zero-shot
    checkpoint (step order) of pre-training run `pretrain_seed`; the record carries its
    pretrain_step. Record curve_step_<task>_<checkpoint>_p<seed>."""
    _check(params, task)
    if checkpoint not in params.curves.checkpoints:
        raise Gpt1Error(f"checkpoint {checkpoint} not in curves.checkpoints "
                        f"{list(params.curves.checkpoints)}")
    seed = resolve_pretrain_seed(params.pretrain.seeds, pretrain_seed)
    stem = f"{STEP_PREFIX}_{task}_{checkpoint}"
    if params.pretrain.import_hf is not None:  # released final weights: no checkpoints
        with atomic.atomic_path(Path(params.paths.finetuned) / names.run_tag(seed) / STEP_PREFIX
                                / f"{task}_{checkpoint}") as tmp:
            tmp.mkdir()  # the stage's (empty) output
        return import_hf.not_run(params, names.record_stem(stem, seed))
    steps = kept_steps(params, seed)
    if checkpoint >= len(steps):
        raise Gpt1Error(f"pre-training run {names.run_tag(seed)} kept {len(steps)} zero-shot "
                        f"checkpoints (steps {steps}); curves.checkpoints names index {checkpoint}",
                        ckpt.pretrain_dir(params, names.TRANSFORMER, seed) / ckpt.MODEL_META)
    run = with_caps(params, task, params.curves.compute_n, None)
    return finetune_variant(run, task, STEP_PREFIX, names.TRANSFORMER, seed,
                            out=f"{STEP_PREFIX}/{task}_{checkpoint}",
                            stem=stem,
                            record_params=params, step=steps[checkpoint])
