"""Where pre-training can show, as stages: the labelled-data curve (each
arm of curves.arms fine-tuned on n training examples, stage curve_n; the bag-of-words floor
at the same n, stage curve_floor) and the pre-training-compute curve (the `full` recipe
fine-tuned from each kept zero-shot checkpoint of a pre-training run, stage curve_step). One
fine-tuning loop (gpt1/stages/finetune.py) on the params of each point, its training samples
drawn outside the rows the task's pilot scored (`pilot_rows`); every point is its own
record, which the report's curves (gpt1/report/curves.py) read; a record's variant is
curve_n_<arm> or curve_step, never a table row's (the tables read finetune_* records)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpt1 import atomic, floor, names, tracking
from gpt1 import checkpoint as ckpt
from gpt1.config import FULL_ARM, Params
from gpt1.errors import Gpt1Error
from gpt1.stage_table import StageRun, record_prefix, resolve_pretrain_seed
from gpt1.stages import import_hf
from gpt1.stages.finetune import finetune_variant
from gpt1.stages.lr_pilot import pilot_split
from gpt1.stages.recording import record
from gpt1.stages.variants import ablation_params, pilot_choice, with_caps
from gpt1.tasks import load

N_PREFIX, STEP_PREFIX = "curve_n", "curve_step"
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


def pilot_rows(params: Params, task: str) -> tuple[frozenset[str], int]:
    """(the ids of the training-pool rows the pilots of `task` score: gpt1/stages/lr_pilot.py
    `pilot_split` for each arm of ablations.pilot.variants, none where no pilot runs on the
    task; the pool's size). The pilot chose the lr the curve arms use, so no curve point
    trains on them; Table 5's and finetune's samples lie outside them by construction."""
    pool = load.read_tables(Path(params.paths.tasks) / task)["train"]
    if task not in params.ablations.tasks:
        return frozenset(), len(pool)
    splits = (pilot_split(params, arm, task, pool)[1] for arm in params.ablations.pilot.variants)
    return frozenset().union(*(s["id"] for s in splits)), len(pool)


def _outside_pilot(params: Params, task: str, n: int, key: str) -> frozenset[str]:
    """The pilot's rows of `task` (`pilot_rows`), once n (params key `key`) fits outside them."""
    held, size = pilot_rows(params, task)
    if size - len(held) < n:
        raise Gpt1Error(f"{key} asks for {n} training examples of {task}, but only "
                        f"{size - len(held)} of its {size}-row training pool lie outside the "
                        f"pilot's split of {len(held)}; lower {key}")
    return held


def arm_params(params: Params, task: str, arm: str) -> tuple[Params, str]:
    """(the finetune params of `arm`, its body): `full` or a Table 5 row (ablations.presets), at
    the (lr, warm-up) its pilot chose where ablations.pilot tunes it on `task` (as the finetune
    and ablation stages do), else at its recipe."""
    run = ablation_params(params, arm, *pilot_choice(params, arm, task))
    if arm == FULL_ARM:
        return run, names.TRANSFORMER
    return run, names.body(params.ablations.presets[arm].body)


def curve_n(params: Params, task: str, n: int, arm: str, pretrain_seed: int | None = None
            ) -> dict[str, Any]:
    """The labelled-data curve at one point: `arm` fine-tuned on n training examples of `task`
    per fine-tuning seed (each seed its own seeded sample), scored on the task's test split
    like every fine-tune; record curve_n_<task>_<n>_<arm>_p<pretrain_seed>."""
    _check(params, task, n, arm)
    held = _outside_pilot(params, task, n, "curves.ns")
    run, kind = arm_params(params, task, arm)
    return finetune_variant(with_caps(run, task, n, None), task, f"{N_PREFIX}_{arm}", kind,
                            pretrain_seed,
                            out=f"{N_PREFIX}/{arm}/{task}_{n}",
                            stem=record_prefix("curve_n", task=task, n=n, arm=arm),
                            record_params=params, held_out=held)


def curve_floor(params: Params, task: str, n: int) -> dict[str, Any]:
    """The bag-of-words floor of the labelled-data curve at n (gpt1/floor.py on the same
    training samples the neural arms draw at n); record curve_floor_<task>_<n>."""
    _check(params, task, n)
    held = _outside_pilot(params, task, n, "curves.ns")
    stem = StageRun.of("curve_floor", task=task, n=n).stem
    with tracking.start_run(stem, params):
        metrics = floor.run(with_caps(params, task, n, None), task,
                            out=f"{N_PREFIX}/{floor.VARIANT}/{task}_{n}", held_out=held)
        record(params, stem, metrics, ("scores",) if "scores" in metrics else ())
    return metrics


def kept_steps(params: Params, pretrain_seed: int) -> list[int]:
    """The steps of the kept zero-shot checkpoints of Transformer pre-training run
    `pretrain_seed`."""
    meta = ckpt.read_model_meta(ckpt.pretrain_dir(params, names.TRANSFORMER, pretrain_seed))
    return sorted(int(s) for s in meta["zeroshot"])


def curve_step(params: Params, task: str, checkpoint: int,
               pretrain_seed: int | None = None) -> dict[str, Any]:
    """The pre-training-compute curve at one point: the `full` row's recipe (at the (lr,
    warm-up) its pilot chose, as arm_params gives it) on curves.compute_n training examples of
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
        return import_hf.not_run(params, names.record_stem(stem, pretrain_seed))
    steps = kept_steps(params, pretrain_seed)
    if checkpoint >= len(steps):
        raise Gpt1Error(f"pre-training run {tag} kept {len(steps)} zero-shot checkpoints "
                        f"(steps {steps}); curves.checkpoints names index {checkpoint}",
                        ckpt.pretrain_dir(params, names.TRANSFORMER, pretrain_seed)
                        / ckpt.MODEL_META)
    held = _outside_pilot(params, task, params.curves.compute_n, "curves.compute_n")
    run = with_caps(arm_params(params, task, FULL_ARM)[0], task, params.curves.compute_n,
                    None)
    return finetune_variant(run, task, STEP_PREFIX, names.TRANSFORMER, pretrain_seed,
                            out=f"{STEP_PREFIX}/{task}_{checkpoint}", stem=stem,
                            record_params=params, step=steps[checkpoint], held_out=held)
