"""The fine-tuning stages: finetune (the `full` row of every table), Table 5's ablation rows
and bag-of-words floor, and Figure 2 left (transfer_layers); one loop (gpt1.finetune) on the
params of each variant (gpt1/stages/variants.py)."""

from __future__ import annotations

import logging
from collections.abc import Collection
from pathlib import Path
from typing import Any

import pandas as pd

from gpt1 import atomic, bpe, checkpoint, floor, names, networks, predict, runtime, tracking
from gpt1.config import FULL_ARM, Params
from gpt1.errors import Gpt1Error
from gpt1.finetune import (
    Hparams,
    body_factory,
    finetune_task,
    resolve_hparams,
    train_subset_seed,
)
from gpt1.stage_table import StageRun, record_prefix, resolve_pretrain_seed
from gpt1.stages import logged_models
from gpt1.stages.data import task_spec
from gpt1.stages.recording import record
from gpt1.stages.variants import ablation_params, layers_caps, override, pilot_choice
from gpt1.tasks import formats, load
from gpt1.tasks.registry import TaskSpec

log = logging.getLogger(__name__)


def task_truncation(params: Params, task: str) -> formats.Truncation:
    """The truncation of one task: tasks.truncation unless tasks.truncation_overrides names it."""
    rule = params.tasks.truncation_overrides.get(task, params.tasks.truncation)
    return formats.Truncation(params.model.n_positions, rule, params.tasks.truncate_keep)


def finetune(params: Params, task: str, pretrain_seed: int | None = None) -> dict[str, Any]:
    """Fine-tune the pre-trained Transformer on one task (the `full` row of every table), at
    the (lr, warm-up) its pilot chose where ablations.pilot tunes `full` on the task."""
    lr, warmup = pilot_choice(params, FULL_ARM, task)
    return finetune_variant(ablation_params(params, FULL_ARM, lr, warmup), task, FULL_ARM,
                            names.TRANSFORMER, pretrain_seed,
                            record_params=params)


def finetune_variant(params: Params, task: str, variant: str, kind: str,
                     pretrain_seed: int | None = None, out: str = "", stem: str = "",
                     record_params: Params | None = None, step: int | None = None,
                     held_out: Collection[str] = ()) -> dict[str, Any]:
    """Fine-tune a `kind` body (transformer | lstm) of pre-training run `pretrain_seed` on
    `task`; the ablations, Figure 2 left and the curves reuse this with their own params and
    variant name. Writes to <paths.finetuned>/p<pretrain_seed>/<out> (default <task> or
    <variant>/<task>) and the record <stem>_p<pretrain_seed> (default
    finetune[_<variant>]_<task>); record_params = the params whose digest the record carries
    (default params); `step` = the kept zero-shot checkpoint of that step to start from
    (default: the final weights). Only the finetune stage (the `full` variant at its default
    `out`) keeps the task model `gpt1 predict` uses.

    Fine-tuning seed f trains on its own seeded subset of the training pool (when capped) in
    its own order, never on a row whose id is in `held_out` (the curves: the pilot's split);
    every seed and every pre-training run is scored on the same test examples.
    """
    spec = task_spec(params, task)
    pretrain_seed = resolve_pretrain_seed(params.pretrain.seeds, pretrain_seed)
    run_dir = checkpoint.pretrain_dir(params, kind, pretrain_seed)
    if params.finetune.init == "pretrained":
        checkpoint.check_model_shape(run_dir, params)
    tok = bpe.load_bpe(params.paths.tokenizer)
    hp = resolve_hparams(params, task)
    tables = load.read_tables(Path(params.paths.tasks) / task)
    splits = ("dev", "test") if hp.select == "dev" else ("test",)
    capped = {s: load.cap_table(tables[s], hp.max_eval_examples, hp.data_seed) for s in splits}
    pool = load.without_ids(tables["train"], held_out)
    trains = {f: load.cap_table(pool, hp.max_train_examples,
                                train_subset_seed(hp.data_seed, f)) for f in hp.seeds}
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
    train_sets = {f: encoded(t) for f, t in trains.items()}
    data["train"] = train_sets[hp.seeds[0]]
    keep_model = variant == "full" and not out
    out = out or (task if variant == "full" else f"{variant}/{task}")
    out_dir = Path(params.paths.finetuned) / names.run_tag(pretrain_seed) / out
    default = (record_prefix("finetune", task=task) if variant == "full"
               else record_prefix("ablation", task=task, variant=variant))
    stem = names.record_stem(stem or default, pretrain_seed)
    n_train = len(trains[hp.seeds[0]])
    sample = {s: (f" (seeded random {len(capped[s])} of {len(tables[s])})"
                  if len(capped[s]) < len(tables[s]) else f" (all {len(tables[s])})")
              for s in splits}
    held = len(tables["train"]) - len(pool)
    outside = f" outside the pilot's split of {held}" if held else ""
    sample["train"] = (f" (seeded random {n_train} of {len(pool)}{outside} per fine-tuning seed)"
                       if n_train < len(pool) else f" (all {n_train}{outside})")
    model_dir = out_dir / predict.MODEL_DIR  # the `full` row only: what `gpt1 predict` uses
    save = (None if not keep_model else lambda m, d: predict.save_task_model(
        d / predict.MODEL_DIR, m, params, task, kind, tok, pretrain_seed))
    with tracking.start_run(stem, params) as on_metrics:
        used = {**capped, "train": trains[hp.seeds[0]]}  # the first seed's training sample
        tracking.log_datasets(task, {s: (t, Path(params.paths.tasks) / task / f"{s}.parquet")
                                     for s, t in used.items()})
        result = finetune_task(spec, hp, data, make_body, out_dir, on_metrics, save,
                               runtime.device(params.device), train_sets)
        if save is not None:
            logged_models.log_model(params, model_dir, kind, spec, used["train"])
        atomic.write_json(out_dir / "result.json", result)
        metrics = finetune_record(params, spec, hp, kind, variant, result, sample,
                                  out_dir, pretrain_seed)
        if step is not None:
            metrics["pretrain_step"] = step
        record(record_params or params, stem, metrics, ("scores",), summary=metrics)
    log.info("%s %s p%d: %s = %.4f", variant, task, pretrain_seed, spec.metric,
             result["scores"][spec.metric]["mean"])
    return metrics


def finetune_record(params: Params, spec: TaskSpec, hp: Hparams, kind: str, variant: str,
                    result: dict[str, Any], sample: dict[str, str], out_dir: Path,
                    pretrain_seed: int) -> dict[str, Any]:
    """The record of one fine-tuning run (what the report reads: task, variant, metric, scores,
    baselines, predictions (per-seed files of the reported `test` split, which it bootstraps),
    eval_split, scored_on, origins, n_train, n_eval, pretrain_seed, select, lr, warmup_steps,
    warmup_frac, train_history (per seed and epoch: train accuracy, classifier and LM losses);
    the prediction files carry each example's head probabilities;
    plus provenance of splits, truncation and speed). `hp` = the run's resolved fine-tuning
    hyperparameters (seeds, lm_coef, lr), `sample` = split -> how it was sampled. Under
    `select: dev` the dev predictions are `selection_predictions`, never a reported split."""
    ft = params.finetune
    files = {prefix: [str(Path(out_dir) / f"{prefix}predictions_seed{s}.parquet")
                      for s in hp.seeds] for prefix in ("", "selection_")}
    chosen = (f"epoch chosen on dev = {spec.sources['dev']}{sample['dev']} (never reported)"
              if hp.select == "dev" else "last epoch scored (no selection)")
    return {
        "task": spec.name, "variant": variant, "metric": spec.metric,
        "scores": result["scores"], "baselines": result["baselines"],
        "predictions": {"test": files[""]},
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


def ablation(params: Params, task: str, variant: str, pretrain_seed: int | None = None
             ) -> dict[str, Any]:
    """Table 5: the finetune stage on `task` with the overrides of `variant` (same loop), at
    the lr its pilot chose where ablations.pilot tunes it."""
    if task not in params.ablations.tasks:
        raise Gpt1Error(f"task {task!r} not in ablations.tasks {list(params.ablations.tasks)}")
    ablation_params(params, variant)  # an unknown variant: one line, listed
    variant_params = ablation_params(params, variant, *pilot_choice(params, variant, task))
    kind = params.ablations.presets[variant].body
    return finetune_variant(variant_params, task, variant, kind, pretrain_seed)


def transfer_layers(params: Params, task: str, layers: int, pretrain_seed: int | None = None
                    ) -> dict[str, Any]:
    """Figure 2 left: the finetune stage (the `full` row at the (lr, warm-up) its pilot chose,
    where ablations.pilot tunes it on `task`) with the embeddings + first `layers` blocks
    transferred, scored like every fine-tune on the task's test split (disjoint from its
    training rows and from the dev split that `select: dev` chooses on)."""
    if task not in params.layers.tasks or not 0 <= layers <= params.model.n_layer:
        raise Gpt1Error(f"{task!r} / {layers} layers: not in layers.tasks "
                        f"{list(params.layers.tasks)} or outside 0..{params.model.n_layer}")
    tuned = ablation_params(params, FULL_ARM, *pilot_choice(params, FULL_ARM, task))
    run = override(layers_caps(tuned, task),
                    finetune={"layers_transferred": layers, "init": "pretrained"})
    return finetune_variant(run, task, f"layers_{layers}", names.TRANSFORMER, pretrain_seed,
                            out=f"layers/{task}_{layers}",
                            stem=record_prefix("transfer_layers", task=task, layers=layers),
                            record_params=params)


def floor_stage(params: Params, task: str) -> dict[str, Any]:
    """Table 5's bag-of-words floor on one task (stage floor@<task>), recorded like every arm
    (record finetune_bow_<task>, logged to its own MLflow run)."""
    stem = StageRun.of("floor", task=task).stem
    with tracking.start_run(stem, params):
        metrics = floor.run(params, task)
        record(params, stem, metrics, ("scores",) if "scores" in metrics else ())
    return metrics

