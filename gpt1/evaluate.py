"""Scores by name (sklearn / scipy): acc, f1, mcc, pearson, spearman (spec §3, Table 1).

`score_split` turns a task's predictions into the named scores of the metrics JSON (with the
task's renames, e.g. MNLI acc -> acc_matched, and per-group scores, e.g. RACE acc_middle);
`aggregate` summarises them over seeds. Values are fractions (the report multiplies by 100).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from scipy import stats
from sklearn import metrics as skm

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


def predict(spec: TaskSpec, outputs: np.ndarray) -> np.ndarray:
    """Head outputs -> predictions: the score itself (regression) or the argmax."""
    return outputs.astype(np.float64) if spec.regression else outputs.argmax(axis=-1)


def score_split(spec: TaskSpec, y_true: np.ndarray, y_pred: np.ndarray,
                groups: Sequence[str]) -> dict[str, float]:
    """Every metric of the task, under its JSON name, overall and per group."""
    out = {}
    groups_arr = np.asarray(groups)
    for metric in spec.metrics:
        key = spec.score_names.get(metric, metric)
        out[key] = score(metric, y_true, y_pred)
        for group in spec.groups:
            mask = groups_arr == group
            if mask.any():
                out[f"{key}_{group}"] = score(metric, y_true[mask], y_pred[mask])
    return out


def aggregate(per_seed: Sequence[dict[str, float]]) -> dict[str, dict[str, Any]]:
    """{name: {"mean", "sd" (sample sd; 0 for one seed), "per_seed": [...]}}."""
    out: dict[str, dict[str, Any]] = {}
    for name in per_seed[0]:
        vals = [float(s[name]) for s in per_seed]
        sd = float(np.std(vals, ddof=1)) if len(vals) > 1 else 0.0
        out[name] = {"mean": float(np.mean(vals)), "sd": 0.0 if math.isnan(sd) else sd,
                     "per_seed": vals}
    return out
