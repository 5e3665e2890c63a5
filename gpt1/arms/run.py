"""Running one arm on one task and recording it: the one fine-tuning loop (gpt1.finetune) on
an arm's params (gpt1.arms), or Table 5's bag-of-words floor (gpt1/floor.py) on the same
training samples; what every fine-tuning stage (finetune, ablation, floor, transfer_layers,
lr_pilot, the curves) runs under its own record stem."""

from __future__ import annotations

import logging
from collections.abc import Collection
from pathlib import Path
from typing import Any

import pandas as pd

from gpt1 import (
    atomic,
    bpe,
    checkpoint,
    floor,
    logged_models,
    names,
    networks,
    predict,
    runtime,
    tracking,
)
from gpt1.arms import pilot_ids, training_samples
from gpt1.config import FULL_ARM, Params
from gpt1.errors import Gpt1Error
from gpt1.finetune import Hparams, body_factory, finetune_task, resolve_hparams
from gpt1.recording import record
from gpt1.records import StageContext
from gpt1.stage_table import resolve_pretrain_seed
from gpt1.tasks import formats, load
from gpt1.tasks.registry import FRESH, TASKS, TaskSpec

log = logging.getLogger(__name__)


def task_truncation(params: Params, task: str) -> formats.Truncation:
    """The truncation of one task: tasks.truncation unless tasks.truncation_overrides names it."""
    rule = params.tasks.truncation_overrides.get(task, params.tasks.truncation)
    return formats.Truncation(params.model.n_positions, rule, params.tasks.truncate_keep)


def run_arm(params: Params, task: str, variant: str, kind: str, pretrain_seed: int | None,
            *, stem: str, out: str = "", record_params: Params | None = None,
            step: int | None = None, held_out: Collection[str] | None = None,
            context: StageContext | None = None) -> dict[str, Any]:
    """Fine-tune a `kind` body (transformer | lstm) of pre-training run `pretrain_seed` on
    `task` on `params` (an arm's: gpt1.arms); every fine-tuning stage runs this with its own
    params and variant name. Writes to <paths.finetuned>/p<pretrain_seed>/<out> (default
    <task> or <variant>/<task>) and the record <stem>_p<pretrain_seed> (`stem`: its stage's
    gpt1.stage_table.record_prefix); record_params = the params whose digest the record carries
    (default params); `step` = the kept zero-shot checkpoint of that step to start from
    (default: the final weights); `context` stamps the record. Only the finetune stage (the
    `full` variant at its default `out`) keeps the task model `gpt1 predict` uses.

    Fine-tuning seed f trains on its own seeded subset of the training pool (when capped) in
    its own order, never on a row whose id is in `held_out` (default: the task's pilot split,
    gpt1.arms.pilot_ids, read once the pre-trained model's shape is checked; a pilot's own
    tables have none, so its runs pass ());
    every seed and every pre-training run is scored on the same test examples.
    """
    spec = load.task_spec(params, task)
    pretrain_seed = resolve_pretrain_seed(params.pretrain.seeds, pretrain_seed)
    run_dir = checkpoint.pretrain_dir(params, kind, pretrain_seed)
    if params.finetune.init == "pretrained":
        checkpoint.check_model_shape(run_dir, params)
    tok = bpe.load_bpe(params.paths.tokenizer)
    hp = resolve_hparams(params, task)
    tables = load.read_tables(Path(params.paths.tasks) / task)
    splits = ("dev", "test") if hp.select == "dev" else ("test",)
    capped = {s: load.cap_table(tables[s], hp.max_eval_examples, hp.data_seed) for s in splits}
    fresh = load.read_fresh(Path(params.paths.tasks) / task)  # scored whole by every arm
    pool = load.without_ids(tables["train"],
                            pilot_ids(params, task) if held_out is None else held_out)
    trains = training_samples(pool, hp)
    ft = params.finetune
    pretrained = (checkpoint.load_model(run_dir, tok.hash, step=step)[0]
                  if ft.init == "pretrained" else None)
    make_body = body_factory(ft.init, ft.layers_transferred, pretrained,
                             lambda: networks.build_model(kind, params, tok.vocab_size),
                             n_special=len(params.bpe.special_tokens))
    tr = task_truncation(params, task)
    encode = formats.text_encoder(tok)

    def encoded(table: pd.DataFrame) -> formats.Encoded:
        return formats.encode_table(table, spec, encode, formats.specials_of(tok), tr)

    data = {s: encoded(t) for s, t in capped.items()}
    if fresh is not None:
        data[FRESH] = encoded(fresh[0])
    train_sets = {f: encoded(t) for f, t in trains.items()}
    data["train"] = train_sets[hp.seeds[0]]
    keep_model = variant == FULL_ARM and not out
    out = out or (task if variant == FULL_ARM else f"{variant}/{task}")
    out_dir = Path(params.paths.finetuned) / names.run_tag(pretrain_seed) / out
    stem = names.record_stem(stem, pretrain_seed)
    n_train = len(trains[hp.seeds[0]])
    sample = {s: (f" (seeded random {len(capped[s])} of {len(tables[s])})"
                  if len(capped[s]) < len(tables[s]) else f" (all {len(tables[s])})")
              for s in splits}
    if fresh is not None:
        sample[FRESH] = f"{fresh[1]} (all {len(fresh[0])})"
    held = len(tables["train"]) - len(pool)
    outside = f" outside the pilot's split of {held}" if held else ""
    sample["train"] = (f" (seeded random {n_train} of {len(pool)}{outside} per fine-tuning seed)"
                       if n_train < len(pool) else f" (all {n_train}{outside})")
    model_dir = out_dir / predict.MODEL_DIR  # the `full` row only: what `gpt1 predict` uses
    save = (None if not keep_model else lambda m, d: predict.save_task_model(
        d / predict.MODEL_DIR, m, params, task, kind, tok, pretrain_seed))
    with tracking.start_run(stem, params, context=context) as on_metrics:
        used = {**capped, "train": trains[hp.seeds[0]]}  # the first seed's training sample
        tracking.log_datasets(task, {s: (t, Path(params.paths.tasks) / task / f"{s}.parquet")
                                     for s, t in used.items()})
        result = finetune_task(spec, hp, data, make_body, out_dir, on_metrics, save,
                               runtime.device(params.device), train_sets)
        if save is not None:
            logged_models.log_model(params, model_dir, kind, spec, used["train"])
        atomic.write_json(out_dir / "result.json", result)
        metrics = arm_record(params, spec, hp, kind, variant, result, sample,
                                  out_dir, pretrain_seed)
        if step is not None:
            metrics["pretrain_step"] = step
        record(record_params or params, stem, metrics,
               ("scores", f"{FRESH}_scores") if fresh is not None else ("scores",),
               summary=metrics, context=context)
    log.info("%s %s p%d: %s = %.4f", variant, task, pretrain_seed, spec.metric,
             result["scores"][spec.metric]["mean"])
    return metrics


def arm_record(params: Params, spec: TaskSpec, hp: Hparams, kind: str, variant: str,
                    result: dict[str, Any], sample: dict[str, str], out_dir: Path,
                    pretrain_seed: int) -> dict[str, Any]:
    """The record of one fine-tuning run (what the report reads: task, variant, metric, scores,
    baselines, predictions (per-seed files of the reported `test` split, which it bootstraps),
    eval_split, scored_on, origins, n_train, n_eval, pretrain_seed, select, lr, warmup_steps,
    warmup_frac, train_history (per seed and epoch: train accuracy, classifier and LM losses);
    the prediction files carry each example's head probabilities; where the task has a
    fresh split, `fresh_scores` and `fresh` (baselines, n_eval, log_loss, scored_on) and its
    files under predictions["fresh"];
    plus provenance of splits, truncation and speed). `hp` = the run's resolved fine-tuning
    hyperparameters (seeds, lm_coef, lr), `sample` = split -> how it was sampled. Under
    `select: dev` the dev predictions are `selection_predictions`, never a reported split."""
    ft = params.finetune
    files = {prefix: [str(Path(out_dir) / f"{prefix}predictions_seed{s}.parquet")
                      for s in hp.seeds] for prefix in ("", "selection_", f"{FRESH}_")}
    fresh = result.get(FRESH)
    chosen = (f"epoch chosen on dev = {spec.sources['dev']}{sample['dev']} (never reported)"
              if hp.select == "dev" else "last epoch scored (no selection)")
    return {
        "task": spec.name, "variant": variant, "metric": spec.metric,
        "scores": result["scores"], "baselines": result["baselines"],
        "predictions": {"test": files[""], **({FRESH: files[f"{FRESH}_"]} if fresh else {})},
        **fresh_fields(result, sample.get(FRESH, "")),
        **({"selection_predictions": files["selection_"]} if hp.select == "dev" else {}),
        "train_ids": [str(Path(out_dir) / f"train_ids_seed{s}.parquet") for s in hp.seeds],
        "eval_split": f"test = {spec.sources['test']}{sample['test']}; {chosen}",
        "scored_on": f"{spec.sources['test']}{sample['test']}", "origins": dict(spec.origins),
        "missing_scores": spec.missing_scores,
        "train_split": f"{spec.sources['train']}{sample['train']}",
        "n_train": result["n_train"], "n_dev": result["n_dev"], "n_eval": result["n_eval"],
        "truncated": result["truncated"], "truncation": params.tasks.truncation,
        "init": ft.init, "body": names.body(kind), "lm_coef": hp.lm_coef,
        "backend": result["backend"],
        "layers_transferred": ft.layers_transferred, "seeds": list(hp.seeds),
        "pretrain_seed": pretrain_seed, "select": hp.select, "lr": hp.lr,
        "warmup_steps": result["seeds"][0]["warmup_steps"], "warmup_frac": hp.warmup_frac,
        "kept_epoch": [r["kept_epoch"] for r in result["seeds"]],
        "log_loss": [r.get("log_loss") for r in result["seeds"]],
        # per seed, per epoch: running train accuracy and the classifier / LM losses apart
        "train_history": [r.get("train_history", []) for r in result["seeds"]],
        "train_examples_per_s": round(sum(r["train_examples_per_s"]
                                          for r in result["seeds"]) / len(result["seeds"]), 1),
        "eval_examples_per_s": round(sum(r["eval_examples_per_s"]
                                         for r in result["seeds"]) / len(result["seeds"]), 1),
    }


def fresh_fields(result: dict[str, Any], words: str) -> dict[str, Any]:
    """A record's fields of the fresh split from a run's result (none without one):
    `fresh_scores` (a score file's field) and `fresh` (baselines, n_eval, log_loss and
    `scored_on` = `words`); its prediction files go under the record's predictions["fresh"]."""
    fresh = result.get(FRESH)
    if not fresh:
        return {}
    return {f"{FRESH}_scores": fresh["scores"],
            FRESH: {"baselines": fresh["baselines"], "n_eval": fresh["n_eval"],
                    "log_loss": fresh["log_loss"], "scored_on": words}}


def run_floor(params: Params, task: str, stem: str, run: Params | None = None, out: str = "",
              held_out: Collection[str] | None = None, *,
              context: StageContext | None = None) -> dict[str, Any]:
    """The bag-of-words floor on one task under its own record `stem` and MLflow run:
    `floor_record` on `run` (default params), recorded with `params`."""
    with tracking.start_run(stem, params, context=context):
        metrics = floor_record(run or params, task, out, held_out)
        record(params, stem, metrics, tuple(k for k in ("scores", f"{FRESH}_scores")
                                            if k in metrics), context=context)
    return metrics


def floor_record(params: Params, task: str, out: str = "",
                 held_out: Collection[str] | None = None) -> dict[str, Any]:
    """The floor (gpt1/floor.py) on one task: every fine-tuning seed's training sample (as the
    neural arms draw it, outside the rows whose id is in `held_out`, default the task's pilot
    split: gpt1.arms.pilot_ids, read once the floor runs on the task) and the task's test split
    (capped as theirs), written under <paths.finetuned>/<out> (default bow/<task>); returns
    the stage's record."""
    if task not in params.ablations.tasks or task not in TASKS:
        raise Gpt1Error(f"task {task!r} not in ablations.tasks {list(params.ablations.tasks)}")
    spec, out_dir = TASKS[task], Path(params.paths.finetuned) / (out or f"{floor.VARIANT}/{task}")
    if spec.regression or spec.fmt == "choice":  # a record, so the stage's outputs exist
        why = {"task": task, "variant": floor.VARIANT, "not_run": "the bag-of-words floor is a "
               f"classifier; {task} is a {'regression' if spec.regression else 'choice'} task"}
        atomic.write_json(out_dir / "not_run.json", why)
        return why
    hp = resolve_hparams(params, spec.name)
    tables = load.read_tables(Path(params.paths.tasks) / spec.name)
    test = load.cap_table(tables["test"], hp.max_eval_examples, hp.data_seed)
    pool = load.without_ids(tables["train"],
                            pilot_ids(params, spec.name) if held_out is None else held_out)
    trains = training_samples(pool, hp)
    fresh = load.read_fresh(Path(params.paths.tasks) / spec.name)
    result = floor.fit_and_score(spec, params.ablations.floor, trains, test, out_dir,
                                 None if fresh is None else fresh[0])
    n_pool, n_test = len(pool), len(tables["test"])
    held = len(tables["train"]) - n_pool
    outside = f" outside the pilot's split of {held}" if held else ""
    sampled = (f" (seeded random {len(test)} of {n_test})" if len(test) < n_test
               else f" (all {n_test})")
    cfg = params.ablations.floor
    return {
        "task": spec.name, "variant": floor.VARIANT, "metric": spec.metric,
        "scores": result["scores"], "baselines": result["baselines"],
        "predictions": {split: [str(out_dir / f"{prefix}predictions_seed{f}.parquet")
                                for f in hp.seeds]
                        for split, prefix in (("test", ""), (FRESH, f"{FRESH}_"))
                        if split == "test" or fresh is not None},
        **fresh_fields(result, "" if fresh is None else f"{fresh[1]} (all {len(fresh[0])})"),
        "train_ids": [str(out_dir / f"train_ids_seed{f}.parquet") for f in hp.seeds],
        "eval_split": f"test = {spec.sources['test']}{sampled}; C chosen by "
                      f"{cfg.cv_folds}-fold CV on the training sample",
        "scored_on": f"{spec.sources['test']}{sampled}", "origins": dict(spec.origins),
        "missing_scores": spec.missing_scores,
        "train_split": f"{spec.sources['train']} (seeded random {result['n_train']} of "
                       f"{n_pool}{outside} per fine-tuning seed, the neural arms' samples)",
        "n_train": result["n_train"], "n_dev": 0, "n_eval": result["n_eval"],
        "init": "none", "body": floor.VARIANT, "select": "final",
        "seeds": list(hp.seeds), "chosen_c": [r["C"] for r in result["seeds"]],
        "cv_accuracy": [r["cv_accuracy"] for r in result["seeds"]],
        "model": f"TF-IDF word 1..{cfg.ngram_max}-grams (sublinear tf, min_df {cfg.min_df}) + "
                 f"logistic regression, C in {list(cfg.c_grid)} by {cfg.cv_folds}-fold CV",
        "seconds": [r["seconds"] for r in result["seeds"]],
    }
