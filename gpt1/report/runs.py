"""The report's queries over the stage records (gpt1.records reads them): records grouped into
runs by their own fields (task, variant, layers_transferred, pretrain_seed), not by stem; the
records of several pre-training seeds pooled into one; and each record's splits in words.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

import numpy as np

from gpt1 import names
from gpt1.records import Metrics
from gpt1.tasks.registry import TASKS, Origin


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


def split_view(record: Mapping[str, Any], split: str) -> dict[str, Any] | None:
    """A fine-tuning record as if `split` were the split it reports: for the fresh split
    (tasks.fresh_examples) its `fresh_scores`, baselines, size, log-losses, words and
    prediction files in place of the test split's, so every table, contrast and flag reads it
    unchanged; the record itself for `test`; None when the record did not score `split`."""
    if split == "test":
        return dict(record)
    about, scores = record.get(split), record.get(f"{split}_scores")
    files = record.get("predictions", {}).get(split)
    if not isinstance(about, Mapping) or scores is None or files is None:
        return None
    return {**record, "scores": scores, "baselines": about["baselines"],
            "n_eval": about["n_eval"], "log_loss": about["log_loss"],
            "scored_on": about["scored_on"], "eval_split": f"{split} = {about['scored_on']}",
            "predictions": {"test": files}}


def variant_results(metrics: Metrics, variant: str, split: str = "test"
                    ) -> dict[str, dict[str, Any]]:
    """task -> fine-tuning record of one variant (`full` = the finetune stage; Table 5 rows =
    finetune_<variant>_<task>), grouped by the records' own task / variant fields: the
    records of several pre-training seeds are pooled into one (`pool_runs`). A record of a
    task the params no longer declare (a custom task since removed) is left out. `split`:
    the records' view of that scored split (`split_view`; the tasks that scored it)."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for stem, m in sorted(metrics.items()):
        if (stem.startswith("finetune_") and m.get("variant") == variant and "scores" in m
                and m.get("task") in TASKS):
            view = split_view(m, split)
            if view is not None:
                groups.setdefault(m["task"], []).append(view)
    return {task: pool_runs(recs) for task, recs in groups.items()}


def layer_results(metrics: Metrics, task: str, k: int) -> dict[str, Any] | None:
    """The Figure 2-left record(s) of a task with k blocks transferred (by their fields
    task / layers_transferred), pooled over pre-training seeds; None if not run."""
    recs = [m for stem, m in sorted(metrics.items()) if stem.startswith("layers_")
            and m.get("task") == task and m.get("layers_transferred") == k and "scores" in m]
    return pool_runs(recs) if recs else None


def first_run(metrics: Metrics, stem: str, **fields: Any) -> dict[str, Any] | None:
    """The record `stem` of a single-run layout, else the one of stage `stem` whose fields
    match `fields` with the lowest pretrain_seed (one record per pre-training run, stem
    `<stem>_p<pretrain_seed>`: gpt1.names.record_stem); None without either."""
    if stem in metrics:
        return metrics[stem]
    hits = sorted((m["pretrain_seed"], s) for s, m in metrics.items()
                  if "pretrain_seed" in m and s == names.record_stem(stem, m["pretrain_seed"])
                  and all(m.get(k) == v for k, v in fields.items()))
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
