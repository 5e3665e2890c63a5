"""Scores by name (sklearn / scipy): acc, f1, mcc, pearson, spearman (spec §3, Table 1).

`score_split` turns a task's predictions into the named scores of the metrics JSON (with the
task's renames, e.g. MNLI acc -> acc_matched, and per-group scores, e.g. RACE acc_middle);
`aggregate` summarises them over seeds. Values are fractions (the report multiplies by 100).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from scipy import stats
from sklearn import metrics as skm

from gpt1.stats import chance_score, majority_label
from gpt1.stats import metric as np_metric
from gpt1.tasks.registry import TaskSpec

log = logging.getLogger(__name__)


def score(name: str, y_true: np.ndarray, y_pred: np.ndarray) -> float:
    """One metric by name. F1 is of the positive class (label 1: paraphrase / duplicate)."""
    if name == "acc":
        return float(skm.accuracy_score(y_true, y_pred))
    if name == "f1":
        return float(skm.f1_score(y_true, y_pred, pos_label=1, zero_division=0.0))
    if name == "mcc":
        return float(skm.matthews_corrcoef(y_true, y_pred))
    if name in ("pearson", "spearman"):
        if np.ptp(y_pred) == 0 or np.ptp(y_true) == 0:
            # Undefined for a constant input; 0 = no correlation (as sklearn's MCC does).
            log.warning("%s of a constant prediction is undefined; scored 0", name)
            return 0.0
        fn = stats.pearsonr if name == "pearson" else stats.spearmanr
        return float(fn(y_true, y_pred)[0])
    raise ValueError(f"unknown metric {name!r}; known: acc, f1, mcc, pearson, spearman")


def head_predictions(spec: TaskSpec, outputs: np.ndarray) -> np.ndarray:
    """Head outputs -> predictions: the score itself (regression) or the argmax."""
    return outputs.astype(np.float64) if spec.regression else outputs.argmax(axis=-1)


def _per_score(spec: TaskSpec, groups: Sequence[str],
               fn: Callable[[str, np.ndarray], float]) -> dict[str, float]:
    """fn(metric, example mask) under every JSON score name of the task: overall and per group
    (e.g. MNLI acc -> acc_matched, RACE acc_middle)."""
    out = {}
    groups_arr = np.asarray(groups)
    for metric in spec.metrics:
        key = spec.score_names.get(metric, metric)
        out[key] = fn(metric, np.ones(len(groups_arr), dtype=bool))
        for group in spec.groups:
            mask = groups_arr == group
            if mask.any():
                out[f"{key}_{group}"] = fn(metric, mask)
    return out


def score_parts(spec: TaskSpec, name: str) -> tuple[str, str | None]:
    """JSON score name -> (metric, group or None): the inverse of the names `_per_score` gives."""
    for metric in spec.metrics:
        key = spec.score_names.get(metric, metric)
        if name == key:
            return metric, None
        for group in spec.groups:
            if name == f"{key}_{group}":
                return metric, group
    raise ValueError(f"{spec.name} has no score {name!r}")


def score_split(spec: TaskSpec, y_true: np.ndarray, y_pred: np.ndarray,
                groups: Sequence[str]) -> dict[str, float]:
    """Every metric of the task, under its JSON name, overall and per group."""
    return _per_score(spec, groups, lambda m, mask: score(m, y_true[mask], y_pred[mask]))


def baselines(spec: TaskSpec, train_labels: np.ndarray, y_true: np.ndarray,
              n_choices: np.ndarray, groups: Sequence[str]) -> dict[str, dict[str, float]]:
    """Per JSON score name: `chance` (expected score of uniform random guessing among each
    example's n_choices) and `majority` (always the training split's most frequent label),
    both on the eval labels y_true (gpt1.stats; a constant's correlation is 0)."""
    label = majority_label(train_labels)
    const = np.full(len(y_true), label, dtype=np.asarray(y_true).dtype)
    majority = _per_score(spec, groups, lambda m, mask: np_metric(m, y_true[mask], const[mask]))
    chance = _per_score(spec, groups,
                        lambda m, mask: chance_score(m, y_true[mask], n_choices[mask]))
    return {k: {"chance": chance[k], "majority": majority[k]} for k in chance}


def aggregate(per_seed: Sequence[dict[str, float]]) -> dict[str, dict[str, Any]]:
    """{name: {"mean", "sd" (sample sd; 0 for one seed), "per_seed": [...]}}."""
    out: dict[str, dict[str, Any]] = {}
    for name in per_seed[0]:
        vals = [float(s[name]) for s in per_seed]
        sd = float(np.std(vals, ddof=1)) if len(vals) > 1 else 0.0
        out[name] = {"mean": float(np.mean(vals)), "sd": 0.0 if math.isnan(sd) else sd,
                     "per_seed": vals}
    return out
