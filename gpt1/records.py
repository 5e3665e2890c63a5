"""Stage records: the files every stage writes under paths.metrics and the report reads.

A record is two JSON files per stage: `<stage>.json` holds the scores only (the DVC metric, so
`dvc metrics show/diff` carry nothing that changes on a re-run with the same outputs) and the
sidecar `<stage>.info.json` the rest (splits, counts, throughput) plus `config_hash` and, once
`start_clock` ran, `wall_seconds`. `read_metrics` merges the two back into one dict per stage.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from gpt1 import atomic
from gpt1.config import Params
from gpt1.errors import Gpt1Error
from gpt1.tasks.registry import TASKS, Origin, TaskSpec

if TYPE_CHECKING:  # the fine-tuning module imports torch; a record needs only its fields
    from gpt1.finetune import Hparams

Metrics = dict[str, dict[str, Any]]
"""Record stem (e.g. finetune_cola) -> the record, scores and sidecar merged."""

INFO_SUFFIX = ".info.json"
"""The sidecar beside a stage's scores file: what is not a score."""

_clock: dict[str, float] = {}


def start_clock(at: float | None = None) -> None:
    """Start this process's stage clock at `at` (a time.perf_counter value; default now): the
    sidecar of every record written after it carries `wall_seconds` since then."""
    _clock["start"] = time.perf_counter() if at is None else at


def record_paths(metrics_dir: str | Path, stage: str) -> tuple[Path, Path]:
    """(scores file, sidecar) of a stage's record."""
    path = Path(metrics_dir) / f"{stage}.json"
    return path, path.with_name(stage + INFO_SUFFIX)


def write_metrics(params: Params, stage: str, metrics: Mapping[str, Any],
                  scores: tuple[str, ...]) -> tuple[Path, Path]:
    """Write the stage's record: the `scores` keys to `<stage>.json`, the rest with the params'
    config hash (and `wall_seconds` when the clock runs) to the sidecar; returns both paths."""
    path, info_path = record_paths(params.paths.metrics, stage)
    info = {k: v for k, v in metrics.items() if k not in scores}
    if "start" in _clock:
        info["wall_seconds"] = round(time.perf_counter() - _clock["start"], 1)
    atomic.write_json(info_path, {**info, "config_hash": params.digest()})
    atomic.write_json(path, {k: metrics[k] for k in scores})
    return path, info_path


def finetune_record(params: Params, spec: TaskSpec, hp: Hparams, kind: str, variant: str,
                    result: dict[str, Any], sample: dict[str, str], out_dir: Path,
                    pretrain_seed: int) -> dict[str, Any]:
    """The record of one fine-tuning run (what the report reads: task, variant, metric, scores,
    baselines, predictions (per-seed files of the reported `test` split, which it bootstraps),
    eval_split, scored_on, origins, n_train, n_eval, pretrain_seed, select, lr, warmup_steps;
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
        "init": ft.init, "body": kind, "lm_coef": hp.lm_coef, "backend": result["backend"],
        "layers_transferred": ft.layers_transferred, "seeds": list(hp.seeds),
        "pretrain_seed": pretrain_seed, "select": hp.select, "lr": hp.lr,
        "warmup_steps": result["seeds"][0]["warmup_steps"],
        "kept_epoch": [r["kept_epoch"] for r in result["seeds"]],
        "log_loss": [r.get("log_loss") for r in result["seeds"]],
        "train_examples_per_s": round(sum(r["train_examples_per_s"]
                                          for r in result["seeds"]) / len(result["seeds"]), 1),
        "eval_examples_per_s": round(sum(r["eval_examples_per_s"]
                                         for r in result["seeds"]) / len(result["seeds"]), 1),
    }


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise Gpt1Error(f"not valid JSON ({err})", path) from None


def read_metrics(metrics_dir: str | Path) -> Metrics:
    """Every stage record under metrics_dir by stem: `<stem>.json` (the scores) merged with its
    sidecar `<stem>.info.json` when there is one; a damaged file is a Gpt1Error naming it."""
    out: Metrics = {}
    for path in sorted(Path(metrics_dir).glob("*.json")):
        if path.name.endswith(INFO_SUFFIX):
            continue
        data = _read_json(path)
        info = path.with_name(path.stem + INFO_SUFFIX)
        if isinstance(data, dict):
            out[path.stem] = {**(_read_json(info) if info.is_file() else {}), **data}
    return out


def records_digest(metrics: Metrics) -> str:
    """sha256 (first 12 hex digits) of the stage records a report is built from: which
    records a saved verdict belongs to."""
    body = json.dumps(metrics, sort_keys=True, default=str)
    return hashlib.sha256(body.encode()).hexdigest()[:12]


RunKey = tuple[int, int]
"""A run: (pre-training seed, fine-tuning seed)."""


def record_runs(record: Mapping[str, Any]) -> list[RunKey]:
    """(pretrain_seed, seed) of each per-seed score of a fine-tuning record, aligned with its
    `per_seed` lists and prediction files; a record without `pretrain_seed` (one pre-training
    run, e.g. the committed demo records) counts as pre-training seed 0."""
    if "runs" in record:
        return [(int(p), int(f)) for p, f in record["runs"]]
    seeds = record.get("seeds")
    if not seeds:
        first: dict[str, Any] = next(iter(record.get("scores", {}).values()), {})
        seeds = list(range(len(first.get("per_seed") or [0])))
    return [(int(record.get("pretrain_seed", 0)), int(s)) for s in seeds]


def pool_runs(recs: list[dict[str, Any]]) -> dict[str, Any]:
    """One record from the records of one task and variant (one per pre-training seed): the
    first one's fields, per-seed scores, seeds and prediction files concatenated in pre-training
    seed order, mean and sample sd over all runs, and `runs` = [(pretrain_seed, seed)]."""
    recs = sorted(recs, key=lambda m: int(m.get("pretrain_seed", 0)))
    runs = [r for m in recs for r in record_runs(m)]
    out = {**recs[0], "runs": runs, "seeds": [f for _, f in runs]}
    if len(recs) == 1:
        return out
    scores = {}
    for name in recs[0].get("scores", {}):
        if not all(name in m["scores"] for m in recs):
            continue
        vals = [float(v) for m in recs
                for v in (m["scores"][name].get("per_seed") or [m["scores"][name]["mean"]])]
        sd = float(np.std(vals, ddof=1)) if len(vals) > 1 else 0.0
        scores[name] = {"mean": float(np.mean(vals)), "sd": sd, "per_seed": vals}
    preds = {split: [p for m in recs for p in m.get("predictions", {}).get(split, [])]
             for split in recs[0].get("predictions", {})}
    return {**out, "scores": scores, "predictions": preds}


def variant_results(metrics: Metrics, variant: str) -> dict[str, dict[str, Any]]:
    """task -> fine-tuning record of one variant (`full` = the finetune stage; Table 5 rows =
    finetune_<variant>_<task>), grouped by the records' own task / variant fields: the
    records of several pre-training seeds are pooled into one (`pool_runs`)."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for stem, m in sorted(metrics.items()):
        if stem.startswith("finetune_") and m.get("variant") == variant and "scores" in m:
            groups.setdefault(m["task"], []).append(m)
    return {task: pool_runs(recs) for task, recs in groups.items()}


def layer_results(metrics: Metrics, task: str, k: int) -> dict[str, Any] | None:
    """The Figure 2-left record(s) of a task with k blocks transferred (by their fields
    task / layers_transferred), pooled over pre-training seeds; None if not run."""
    recs = [m for stem, m in sorted(metrics.items()) if stem.startswith("layers_")
            and m.get("task") == task and m.get("layers_transferred") == k and "scores" in m]
    return pool_runs(recs) if recs else None


def first_run(metrics: Metrics, stem: str, **fields: Any) -> dict[str, Any] | None:
    """The record `stem` of a single-run layout, else the record whose fields match `fields`
    with the lowest pretrain_seed (one record per pre-training run); None without either."""
    if stem in metrics:
        return metrics[stem]
    hits = sorted((m.get("pretrain_seed", 0), s) for s, m in metrics.items()
                  if all(m.get(k) == v for k, v in fields.items()))
    return metrics[hits[0][1]] if hits else None


def split_origins(record: Mapping[str, Any]) -> dict[str, Origin]:
    """Split -> origin of a fine-tuning record: its own `origins`, or its task's in the
    registry for a record that carries none."""
    return dict(record.get("origins") or TASKS[record["task"]].origins)


def scored_on(record: Mapping[str, Any]) -> str | None:
    """What a fine-tuning record was scored on, in words: its `scored_on`, or for a record that
    carries none the first clause of its `eval_split` text; None without either."""
    if "scored_on" in record:
        return str(record["scored_on"])
    if "eval_split" not in record:
        return None
    return str(record["eval_split"]).split(";")[0].removeprefix("test = ")
