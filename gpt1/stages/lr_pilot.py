"""The pilot of an arm: the (lr, warm-up) its confirmatory runs use,
chosen on a split carved from the training pool; the fine-tuning recipe scored beside it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from gpt1 import atomic, names, tracking
from gpt1.config import FULL_ARM, Params
from gpt1.errors import Gpt1Error
from gpt1.finetune import pilot_key, resolve_hparams, train_subset_seed
from gpt1.stages.data import task_spec
from gpt1.stages.finetune import finetune_variant
from gpt1.stages.recording import record, record_in_own_run
from gpt1.stages.variants import ablation_params, override, pilot_run
from gpt1.tasks import load
from gpt1.tasks.registry import TaskSpec

PAPER_RECIPE = "paper recipe"


def config_key(lr: float, warmup: float) -> str:
    """A pilot configuration's name in the record (`dev_scores`' keys)."""
    return f"lr {lr:g}, warm-up {warmup:g}"


def pilot_split(params: Params, variant: str, task: str, pool: pd.DataFrame
                ) -> tuple[pd.DataFrame, pd.DataFrame, str]:
    """(the pilot's training sample, its carved split, the split in words). The training sample
    is the arm's fine-tuning sample at the pilot seed; the split is ablations.pilot.dev_examples
    rows of the pool outside every fine-tuning seed's sample (so it is neither trained on by a
    confirmatory run nor a scored split). A task fine-tuned on its whole pool leaves no such
    row: the split is then carved from the pool and the pilot trains on the rest (said so)."""
    cfg = params.ablations.pilot
    hp = resolve_hparams(ablation_params(params, variant), task)
    if hp.max_train_examples is None or hp.max_train_examples >= len(pool):  # the whole pool
        if len(pool) < 2 * cfg.dev_examples:
            raise Gpt1Error(f"{task}: training pool of {len(pool)} is too small to carve "
                            f"ablations.pilot.dev_examples={cfg.dev_examples} from it")
        train, dev = load.carve(pool, cfg.dev_examples, cfg.seed)
        return train, dev, (f"{len(dev)} examples carved (seed {cfg.seed}) from the "
                            f"{len(pool)}-example training pool; trained on the rest (the task "
                            "fine-tunes on its whole pool, so confirmatory runs train on them)")
    samples = {f: load.cap_table(pool, hp.max_train_examples, train_subset_seed(hp.data_seed, f))
               for f in {*hp.seeds, cfg.seed}}
    taken = set().union(*(set(t["id"]) for t in samples.values()))
    rest = pool[~pool["id"].isin(taken)].reset_index(drop=True)
    if len(rest) < cfg.dev_examples:
        raise Gpt1Error(f"{task}: only {len(rest)} of {len(pool)} training-pool rows lie outside "
                        f"the fine-tuning samples; ablations.pilot.dev_examples="
                        f"{cfg.dev_examples} cannot be carved from them")
    dev = load.cap_table(rest, cfg.dev_examples, cfg.seed)
    return samples[cfg.seed], dev, (
        f"{len(dev)} examples (seed {cfg.seed}) of the {len(pool)}-example training pool "
        f"outside every fine-tuning seed's sample; trained on fine-tuning seed {cfg.seed}'s "
        f"sample of {len(samples[cfg.seed])}")


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


def lr_pilot(params: Params, task: str, variant: str) -> dict[str, Any]:
    """The pilot of one arm on one task: every (lr, warm-up) of ablations.pilot's grid (the
    same for every arm) fine-tunes on the arm's fine-tuning sample and is scored on the carved
    split (`pilot_split`); the best (one class last, then score, log-loss, the larger lr) is
    the configuration the arm's confirmatory runs use. The fine-tuning recipe (finetune.lr and
    warmup_frac) is scored too, as its own row, never chosen. Runs on the first pre-training
    seed; no scored split is touched."""
    cfg = params.ablations.pilot
    abl = params.ablations
    if variant not in (*abl.variants, FULL_ARM) or task not in abl.tasks:
        raise Gpt1Error(f"{variant!r} / {task!r}: not in ablations.variants "
                        f"{list(abl.variants)} (or full) x ablations.tasks {list(abl.tasks)}")
    spec, pretrain_seed = task_spec(params, task), params.pretrain.seeds[0]
    base = Path(params.paths.finetuned) / "lr_pilot" / f"{variant}_{task}"
    stem = pilot_run(variant, task).stem
    if variant not in cfg.variants:  # a row the pilot does not tune runs at the recipe's lr
        why = {"variant": variant, "task": task,
               "not_piloted": "not in ablations.pilot.variants: the fine-tuning recipe's lr"}
        atomic.write_json(base / "not_piloted.json", why)
        record_in_own_run(params, stem, why, ())
        return why
    pool = load.read_tables(Path(params.paths.tasks) / task)["train"]
    train, dev, split_words = pilot_split(params, variant, task, pool)
    # the pilot's runs score (as their `test`) the carved split; they select nothing
    load.write_tables({"train": train, "dev": dev, "test": dev}, base / "tables" / task)
    recipe = resolve_hparams(ablation_params(params, variant), task)
    grid = [(lr, w) for lr in cfg.lr_grid for w in cfg.warmup_grid]
    keys, scores, losses, accuracy = {}, {}, {}, {}
    kind = names.TRANSFORMER if variant == FULL_ARM else abl.presets[variant].body
    for lr, w in dict.fromkeys([*grid, (recipe.lr, params.finetune.warmup_frac)]):
        run = ablation_params(params, variant, lr, w)
        run = override(run, finetune={"seeds": [cfg.seed], "select": "final"},
                       paths={"tasks": str(base / "tables"), "metrics": str(base / "metrics"),
                              "finetuned": str(base / "runs")})
        name = f"lr_{lr:g}_w{w:g}"
        with tracking.child_scope(f"lr={lr:g},warmup={w:g}", run,
                                  {"gpt1.lr_candidate": f"{lr:g}",
                                   "gpt1.warmup_candidate": f"{w:g}"}):
            m = finetune_variant(run, task, variant, kind, pretrain_seed, out=name,
                                 stem=name)
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
    with tracking.start_run(stem, params):  # the stage's own run
        summary = {"chosen_lr": chosen[0], "chosen_warmup": chosen[1],
                   f"chosen_dev_{spec.metric}": scores[chosen]}
        if metrics["dev_majority"] is not None:
            summary["dev_majority"] = metrics["dev_majority"]
        if metrics["chosen_accuracy"] is not None:
            summary["chosen_dev_accuracy"] = metrics["chosen_accuracy"]
        record(params, stem, metrics, ("dev_scores", "chosen_lr", "chosen_warmup",
                                       "chosen_score", "chosen_accuracy", "dev_majority"),
               summary=summary)
    return metrics


def lr_pilot_full(params: Params, task: str) -> dict[str, Any]:
    """The pilot of the `full` row (the finetune stage's arm) on one task of ablations.tasks."""
    return lr_pilot(params, task, FULL_ARM)
