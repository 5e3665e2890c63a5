"""The pilot of an arm: the (lr, warm-up) its confirmatory runs use,
chosen on a split carved from the training pool; the fine-tuning recipe scored beside it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from gpt1 import atomic, tracking
from gpt1.arm_run import run_arm
from gpt1.arms import (
    DOSE_PILOT_DIR,
    ablation_params,
    arm_body,
    dose_params,
    dose_pilot_run,
    pilot_run,
    pilot_split,
)
from gpt1.config import FULL_ARM, Params, override
from gpt1.errors import Gpt1Error
from gpt1.finetune import pilot_key, resolve_hparams
from gpt1.recording import record, record_in_own_run
from gpt1.records import StageContext
from gpt1.tasks import load
from gpt1.tasks.registry import TaskSpec

PAPER_RECIPE = "paper recipe"


def config_key(lr: float, warmup: float) -> str:
    """A pilot configuration's name in the record (`dev_scores`' keys)."""
    return f"lr {lr:g}, warm-up {warmup:g}"


def majority_share(spec: TaskSpec, train: pd.DataFrame, dev: pd.DataFrame) -> float | None:
    """Share of `dev`'s labels equal to `train`'s most frequent label (what a constant
    predictor fitted on the training part scores); None for a regression task."""
    if spec.regression or not len(dev):
        return None
    top = train["label"].value_counts().sort_index().idxmax()
    return float((dev["label"] == top).mean())


def pilot_accuracy(spec: TaskSpec, predictions: pd.DataFrame, dev: pd.DataFrame
                   ) -> float | None:
    """Share of a pilot run's predictions (`id`, `prediction`) equal to the carved split's
    label of the same id: the gate's measure, comparable with `majority_share` whatever the
    task's metric (MCC, F1); None for a regression task."""
    if spec.regression or not len(predictions):
        return None
    labels = dev.set_index("id")["label"].loc[predictions["id"]].to_numpy()
    return float((predictions["prediction"].to_numpy() == labels).mean())


def lr_pilot(params: Params, task: str, variant: str, *,
             context: StageContext | None = None) -> dict[str, Any]:
    """The pilot of one arm on one task: every (lr, warm-up) of ablations.pilot's grid (the
    same for every arm) fine-tunes on the arm's fine-tuning sample and is scored on the carved
    split (gpt1.arms.pilot_split); the best (one class last, then score, log-loss, the larger lr) is
    the configuration the arm's confirmatory runs use. The fine-tuning recipe (finetune.lr and
    warmup_frac) is scored too, as its own row, never chosen. Runs on the first pre-training
    seed; no scored split is touched."""
    abl = params.ablations
    if variant not in (*abl.variants, FULL_ARM) or task not in abl.tasks:
        raise Gpt1Error(f"{variant!r} / {task!r}: not in ablations.variants "
                        f"{list(abl.variants)} (or full) x ablations.tasks {list(abl.tasks)}")
    return _pilot(params, params, task, variant, pilot_run(variant, task).stem,
                  Path(params.paths.finetuned) / "lr_pilot" / f"{variant}_{task}", context)


def _pilot(params: Params, record_params: Params, task: str, variant: str, stem: str,
           base: Path, context: StageContext | None) -> dict[str, Any]:
    """`lr_pilot` of `variant` on `task` fine-tuning the pre-training runs `params` name,
    written under `base` and recorded as `stem` with `record_params`."""
    cfg = params.ablations.pilot
    spec, pretrain_seed = load.task_spec(params, task), params.pretrain.seeds[0]
    if variant not in cfg.variants:  # a row the pilot does not tune runs at the recipe's lr
        why = {"variant": variant, "task": task,
               "not_piloted": "not in ablations.pilot.variants: the fine-tuning recipe's lr"}
        atomic.write_json(base / "not_piloted.json", why)
        record_in_own_run(record_params, stem, why, (), context=context)
        return why
    pool = load.read_tables(Path(params.paths.tasks) / task)["train"]
    train, dev, split_words = pilot_split(params, variant, task, pool)
    # the pilot's runs score (as their `test`) the carved split; they select nothing
    load.write_tables({"train": train, "dev": dev, "test": dev}, base / "tables" / task)
    recipe = resolve_hparams(ablation_params(params, variant), task)
    grid = [(lr, w) for lr in cfg.lr_grid for w in cfg.warmup_grid]
    keys, scores, losses, accuracy = {}, {}, {}, {}
    kind = arm_body(params, variant)
    for lr, w in dict.fromkeys([*grid, (recipe.lr, params.finetune.warmup_frac)]):
        run = ablation_params(params, variant, lr, w)
        run = override(run, finetune={"seeds": [cfg.seed], "select": "final"},
                       paths={"tasks": str(base / "tables"), "metrics": str(base / "metrics"),
                              "finetuned": str(base / "runs")})
        name = f"lr_{lr:g}_w{w:g}"
        with tracking.child_scope(f"lr={lr:g},warmup={w:g}", run,
                                  {"gpt1.lr_candidate": f"{lr:g}",
                                   "gpt1.warmup_candidate": f"{w:g}"}):
            m = run_arm(run, task, variant, kind, pretrain_seed, out=name, stem=name,
                        context=context)
        frame = pd.read_parquet(m["predictions"]["test"][0])
        pred = frame["prediction"].to_numpy()
        accuracy[(lr, w)] = pilot_accuracy(spec, frame, dev)
        flat = {k: v["mean"] for k, v in m["scores"].items()}
        scores[(lr, w)], losses[(lr, w)] = flat[spec.metric], m["log_loss"][0]
        keys[(lr, w)] = pilot_key(spec, flat, pred, m["log_loss"][0], lr)
    chosen = max(grid, key=keys.__getitem__)
    paper = (recipe.lr, params.finetune.warmup_frac)
    metrics = {"variant": variant, "task": task, "metric": spec.metric,
               "grid": list(cfg.lr_grid), "warmup_grid": list(cfg.warmup_grid),
               "dev_scores": {config_key(*c): scores[c] for c in grid},
               "dev_log_loss": {config_key(*c): losses[c] for c in grid},
               "chosen_lr": chosen[0], "chosen_warmup": chosen[1],
               "chosen_score": scores[chosen], "chosen_accuracy": accuracy[chosen],
               "dev_majority": majority_share(spec, train, dev),
               PAPER_RECIPE.replace(" ", "_"): {
                   "lr": paper[0], "warmup_frac": paper[1], "score": scores[paper],
                   "log_loss": losses[paper], "in_grid": paper in grid,
                   "label": PAPER_RECIPE + " (reported beside the pilot, never chosen)"},
               "n_pilot": len(dev), "n_pilot_train": len(train), "dev_split": split_words,
               "chosen_by": ("pilot-split " + ("accuracy" if spec.metric == "f1"
                                               else spec.metric)
                             + "; >= 95 % one class last, lower log-loss next, larger lr on "
                             "ties"), "pretrain_seed": pretrain_seed, "seed": cfg.seed}
    with tracking.start_run(stem, record_params):  # the stage's own run
        summary = {"chosen_lr": chosen[0], "chosen_warmup": chosen[1],
                   f"chosen_dev_{spec.metric}": scores[chosen]}
        if metrics["dev_majority"] is not None:
            summary["dev_majority"] = metrics["dev_majority"]
        if metrics["chosen_accuracy"] is not None:
            summary["chosen_dev_accuracy"] = metrics["chosen_accuracy"]
        record(record_params, stem, metrics, ("dev_scores", "chosen_lr", "chosen_warmup",
                                       "chosen_score", "chosen_accuracy", "dev_majority"),
               summary=summary, context=context)
    return metrics


def lr_pilot_full(params: Params, task: str, *, context: StageContext | None = None
                  ) -> dict[str, Any]:
    """The pilot of the `full` row (the finetune stage's arm) on one task of ablations.tasks."""
    return lr_pilot(params, task, FULL_ARM, context=context)


def pilot_dose(params: Params, task: str, tokens: int, *, context: StageContext | None = None
               ) -> dict[str, Any]:
    """The pilot of the dose curve's budget of `tokens` pre-training tokens on `task`: the
    `full` row's pilot (the same grid, training sample and carved split) fine-tuning that
    budget's own pre-training run (stage pretrain_dose) instead of the main one."""
    if task not in params.curves.dose_tasks:
        raise Gpt1Error(f"task {task!r} not in curves.dose_tasks {list(params.curves.dose_tasks)}")
    return _pilot(dose_params(params, tokens), params, task, FULL_ARM,
                  dose_pilot_run(task, tokens).stem,
                  Path(params.paths.finetuned) / DOSE_PILOT_DIR / f"{task}_{tokens}", context)
