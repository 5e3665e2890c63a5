"""The lr pilot of an arm on a task, as a library: every (lr, warm-up) of the one grid
fine-tuned on the arm's fine-tuning sample and scored on a split carved from the training pool
(gpt1.arms.pilot_split), the best chosen, the fine-tuning recipe scored beside it as its own
row; the record it leaves (read by gpt1/report/pilots.py) and the choice later stages read
(gpt1.arms.write_choice)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from gpt1 import atomic, tracking
from gpt1.arms import ablation_params, arm_body, pilot_dir, pilot_split
from gpt1.arms.run import run_arm
from gpt1.config import FULL_ARM, Params, at_grid_edge, override
from gpt1.errors import Gpt1Error
from gpt1.finetune import pilot_key, resolve_hparams
from gpt1.records import StageContext
from gpt1.tasks import load
from gpt1.tasks.registry import TaskSpec

PAPER_RECIPE = "paper recipe"
SCORES = ("dev_scores", "chosen_lr", "chosen_warmup", "chosen_score", "chosen_accuracy",
          "dev_majority")
"""The pilot record's scores (the rest goes to its sidecar, gpt1.records)."""


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


def check_arm(params: Params, arm: str, task: str) -> None:
    """One line unless a pilot stage runs `arm` on `task`: `full` on every task of
    finetune.tasks (lr_pilot_full), a row of ablations.variants on ablations.tasks (lr_pilot)."""
    abl = params.ablations
    if arm == FULL_ARM and task in params.finetune.tasks:
        return
    if arm not in abl.variants or task not in abl.tasks:
        raise Gpt1Error(f"{arm!r} / {task!r}: not in ablations.variants {list(abl.variants)} "
                        f"x ablations.tasks {list(abl.tasks)} (nor full x finetune.tasks)")


def not_piloted(params: Params, arm: str, task: str) -> dict[str, str] | None:
    """The record of an arm the pilot does not tune on `task` (it runs at the fine-tuning
    recipe's (lr, warm-up)), None where it does. Writes the stage's output folder."""
    if task not in params.ablations.tasks:
        why = "not in ablations.tasks: the fine-tuning recipe's lr"
    elif arm not in params.ablations.pilot.variants:
        why = "not in ablations.pilot.variants: the fine-tuning recipe's lr"
    else:
        return None
    record = {"variant": arm, "task": task, "not_piloted": why}
    atomic.write_json(pilot_dir(params, arm, task) / "not_piloted.json", record)
    return record


def summary(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """What a pilot logs to its MLflow run: the chosen configuration, its scores, the split's
    majority (the gate's inputs)."""
    out = {"chosen_lr": metrics["chosen_lr"], "chosen_warmup": metrics["chosen_warmup"],
           f"chosen_dev_{metrics['metric']}": metrics["chosen_score"]}
    if metrics["dev_majority"] is not None:
        out["dev_majority"] = metrics["dev_majority"]
    if metrics["chosen_accuracy"] is not None:
        out["chosen_dev_accuracy"] = metrics["chosen_accuracy"]
    return out


def run_pilot(params: Params, arm: str, task: str, *, base: Path | None = None,
              context: StageContext | None = None) -> dict[str, Any]:
    """The pilot of `arm` on `task` (ablations.pilot): every (lr, warm-up) of the grid (the
    same for every arm) fine-tunes on the arm's fine-tuning sample and is scored on the carved
    split; the best (one class last, then score, log-loss, the larger lr) is the choice, and
    whether it lies at an edge of either grid is said. The recipe (finetune.lr and
    warmup_frac) is scored too, as its own row, never chosen. Runs on the first pre-training
    seed; no scored split is touched. Writes under `base` (default: the arm's pilot folder).
    Returns the pilot's record."""
    cfg = params.ablations.pilot
    spec, pretrain_seed = load.task_spec(params, task), params.pretrain.seeds[0]
    base = pilot_dir(params, arm, task) if base is None else base
    pool = load.read_tables(Path(params.paths.tasks) / task)["train"]
    train, dev, split_words = pilot_split(params, arm, task, pool)
    # the pilot's runs score (as their `test`) the carved split; they select nothing
    load.write_tables({"train": train, "dev": dev, "test": dev}, base / "tables" / task)
    recipe = resolve_hparams(ablation_params(params, arm), task)
    grid = [(lr, w) for lr in cfg.lr_grid for w in cfg.warmup_grid]
    keys, scores, losses, accuracy = {}, {}, {}, {}
    kind = arm_body(params, arm)
    for lr, w in dict.fromkeys([*grid, (recipe.lr, params.finetune.warmup_frac)]):
        run = ablation_params(params, arm, lr, w)
        run = override(run, finetune={"seeds": [cfg.seed], "select": "final"},
                       paths={"tasks": str(base / "tables"), "metrics": str(base / "metrics"),
                              "finetuned": str(base / "runs")})
        name = f"lr_{lr:g}_w{w:g}"
        with tracking.child_scope(f"lr={lr:g},warmup={w:g}", run,
                                  {"gpt1.lr_candidate": f"{lr:g}",
                                   "gpt1.warmup_candidate": f"{w:g}"}, context) as candidate:
            m = run_arm(run, task, arm, kind, pretrain_seed, out=name, stem=name, held_out=(),
                        context=candidate)
        frame = pd.read_parquet(m["predictions"]["test"][0])
        accuracy[(lr, w)] = pilot_accuracy(spec, frame, dev)
        flat = {k: v["mean"] for k, v in m["scores"].items()}
        scores[(lr, w)], losses[(lr, w)] = flat[spec.metric], m["log_loss"][0]
        keys[(lr, w)] = pilot_key(spec, flat, frame["prediction"].to_numpy(),
                                  m["log_loss"][0], lr)
    chosen = max(grid, key=keys.__getitem__)
    paper = (recipe.lr, params.finetune.warmup_frac)
    return {"variant": arm, "task": task, "metric": spec.metric,
            "grid": list(cfg.lr_grid), "warmup_grid": list(cfg.warmup_grid),
            "dev_scores": {config_key(*c): scores[c] for c in grid},
            "dev_log_loss": {config_key(*c): losses[c] for c in grid},
            "chosen_lr": chosen[0], "chosen_warmup": chosen[1],
            "lr_at_edge": at_grid_edge(chosen[0], cfg.lr_grid),
            "warmup_at_edge": at_grid_edge(chosen[1], cfg.warmup_grid),
            "chosen_score": scores[chosen], "chosen_accuracy": accuracy[chosen],
            "dev_majority": majority_share(spec, train, dev),
            PAPER_RECIPE.replace(" ", "_"): {
                "lr": paper[0], "warmup_frac": paper[1], "score": scores[paper],
                "log_loss": losses[paper], "in_grid": paper in grid,
                "label": PAPER_RECIPE + " (reported beside the pilot, never chosen)"},
            "n_pilot": len(dev), "n_pilot_train": len(train), "dev_split": split_words,
            "chosen_by": ("pilot-split " + ("accuracy" if spec.metric == "f1" else spec.metric)
                          + "; >= 95 % one class last, lower log-loss next, larger lr on "
                          "ties"), "pretrain_seed": pretrain_seed, "seed": cfg.seed}
