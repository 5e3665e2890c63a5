"""Task scoring on numpy arrays: acc, f1, mcc, pearson, spearman (spec §3, Table 1).

`score` is the one implementation of the five metrics (numpy only, fast enough for a bootstrap
that scores thousands of resamples); `chance_score` / `majority_score` are what uniform random
guessing and always predicting the training split's most frequent label score on the eval
split. `score_split` turns a task's predictions into the named scores of the metrics JSON
(with the task's renames, e.g. MNLI acc -> acc_matched, and per-group scores, e.g. RACE
acc_middle); `aggregate` summarises them over seeds. Values are fractions (the report
multiplies by 100).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from gpt1.tasks.registry import TaskSpec


def _acc(y: np.ndarray, p: np.ndarray) -> float:
    return float(np.mean(y == p))


def _f1(y: np.ndarray, p: np.ndarray) -> float:
    """F1 of the positive class (label 1); 0 when it is never predicted nor present."""
    tp = float(np.sum((p == 1) & (y == 1)))
    denom = float(np.sum(p == 1) + np.sum(y == 1))
    return 2.0 * tp / denom if denom else 0.0


def _mcc(y: np.ndarray, p: np.ndarray) -> float:
    """Matthews correlation (multi-class form, as sklearn); 0 when undefined."""
    labels, inv = np.unique(np.concatenate([y, p]), return_inverse=True)
    k = len(labels)
    cm = np.zeros((k, k))
    np.add.at(cm, (inv[: len(y)], inv[len(y):]), 1.0)
    t, q, c, s = cm.sum(1), cm.sum(0), np.trace(cm), cm.sum()
    denom = np.sqrt((s * s - q @ q) * (s * s - t @ t))
    return float((c * s - t @ q) / denom) if denom else 0.0


def _pearson(y: np.ndarray, p: np.ndarray) -> float:
    """Pearson r; 0 for a constant input (undefined; no correlation, as MCC)."""
    if np.ptp(y) == 0 or np.ptp(p) == 0:
        return 0.0
    return float(np.corrcoef(y.astype(float), p.astype(float))[0, 1])


def _rank(x: np.ndarray) -> np.ndarray:
    """Average ranks (ties share their mean rank)."""
    order = np.argsort(x, kind="stable")
    ranks = np.empty(len(x))
    ranks[order] = np.arange(len(x), dtype=float)
    _, inv, counts = np.unique(x, return_inverse=True, return_counts=True)
    sums = np.zeros(len(counts))
    np.add.at(sums, inv, ranks)
    return (sums / counts)[inv]


def _spearman(y: np.ndarray, p: np.ndarray) -> float:
    return _pearson(_rank(y), _rank(p))


METRICS: dict[str, Callable[[np.ndarray, np.ndarray], float]] = {
    "acc": _acc, "f1": _f1, "mcc": _mcc, "pearson": _pearson, "spearman": _spearman,
}


def score(name: str, y_true: np.ndarray, y_pred: np.ndarray) -> float:
    """One metric by name (acc, f1, mcc, pearson, spearman) on numpy arrays. F1 is of the
    positive class (label 1: paraphrase / duplicate); a correlation with a constant is 0."""
    if name not in METRICS:
        raise ValueError(f"unknown metric {name!r}; known: {', '.join(METRICS)}")
    return METRICS[name](np.asarray(y_true), np.asarray(y_pred))


def chance_score(name: str, y_true: np.ndarray, n_choices: np.ndarray | int) -> float:
    """Expected score of guessing uniformly at random among each example's `n_choices`.

    acc: mean of 1 / n_choices (exact). f1 (positive class of a binary task): F1 at the
    expected confusion counts (TP = P / 2, FP = N / 2, FN = P / 2), i.e. 2p / (2p + 1) for a
    positive rate p. mcc, pearson, spearman: 0 (a random guess is uncorrelated with the label).
    """
    y = np.asarray(y_true)
    k = np.broadcast_to(np.asarray(n_choices, dtype=float), y.shape)
    if name == "acc":
        return float(np.mean(1.0 / k))
    if name == "f1":
        p = float(np.mean(y == 1))
        return 2.0 * p / (2.0 * p + 1.0)
    if name in ("mcc", "pearson", "spearman"):
        return 0.0
    raise ValueError(f"unknown metric {name!r}; known: {', '.join(METRICS)}")


def majority_label(train_labels: np.ndarray) -> float | int:
    """The most frequent training label (the smallest one on a tie)."""
    values, counts = np.unique(np.asarray(train_labels), return_counts=True)
    best = values[int(np.argmax(counts))]
    return best.item() if hasattr(best, "item") else best


def majority_score(name: str, train_labels: np.ndarray, y_true: np.ndarray) -> float:
    """Score on the eval split of always predicting the training split's most frequent label
    (e.g. MRPC F1 of always "paraphrase"); a correlation of a constant is 0."""
    y = np.asarray(y_true)
    return score(name, y, np.full(y.shape, majority_label(train_labels), dtype=y.dtype))


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
    both on the eval labels y_true (a constant's correlation is 0)."""
    label = majority_label(train_labels)
    const = np.full(len(y_true), label, dtype=np.asarray(y_true).dtype)
    majority = _per_score(spec, groups, lambda m, mask: score(m, y_true[mask], const[mask]))
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


def score_features(name: str, y_true: np.ndarray, y_pred: np.ndarray,
                   mask: np.ndarray | None = None) -> np.ndarray:
    """(n, m) per-example sufficient statistics of a metric: summed over any (re)sample of the
    examples (a weighted sum per bootstrap draw), `score_from_sums` gives the metric on it.
    Examples outside `mask` (a group score, e.g. RACE acc_middle) contribute 0. Spearman uses
    the ranks of the scored rows (a resample is not re-ranked)."""
    y, p = np.asarray(y_true), np.asarray(y_pred)
    keep = np.ones(len(y)) if mask is None else np.asarray(mask, dtype=float)
    if name == "acc":
        cols = [np.ones(len(y)), (y == p).astype(float)]
    elif name == "f1":
        cols = [((p == 1) & (y == 1)).astype(float), (p == 1).astype(float),
                (y == 1).astype(float)]
    elif name == "mcc":
        labels = np.unique(np.concatenate([y, p]))
        cols = [((y == a) & (p == b)).astype(float) for a in labels for b in labels]
    elif name in ("pearson", "spearman"):
        x, z = y.astype(float), p.astype(float)
        if name == "spearman":  # ranks within the scored rows
            sel = keep > 0
            x, z = np.zeros(len(y)), np.zeros(len(y))
            x[sel], z[sel] = _rank(y[sel]), _rank(p[sel])
        cols = [np.ones(len(y)), x, z, x * x, z * z, x * z]
    else:
        raise ValueError(f"unknown metric {name!r}; known: {', '.join(METRICS)}")
    return np.stack(cols, axis=1) * keep[:, None]


def score_from_sums(name: str, sums: np.ndarray) -> np.ndarray:
    """The metric from summed `score_features` (..., m) -> (...): vectorised over draws.
    Undefined values are 0 as in `score` (F1 with no positives, MCC or r of a constant)."""
    s = np.asarray(sums, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        if name == "acc":
            out = s[..., 1] / s[..., 0]
        elif name == "f1":
            out = 2.0 * s[..., 0] / (s[..., 1] + s[..., 2])
        elif name == "mcc":
            k = math.isqrt(s.shape[-1])
            cm = s.reshape(*s.shape[:-1], k, k)
            t, q = cm.sum(-1), cm.sum(-2)
            c, tot = np.trace(cm, axis1=-2, axis2=-1), cm.sum((-2, -1))
            denom = np.sqrt((tot * tot - (q * q).sum(-1)) * (tot * tot - (t * t).sum(-1)))
            out = (c * tot - (t * q).sum(-1)) / denom
        elif name in ("pearson", "spearman"):
            n, sx, sz, sxx, szz, sxz = np.moveaxis(s, -1, 0)
            cov, vx, vz = sxz - sx * sz / n, sxx - sx * sx / n, szz - sz * sz / n
            ok = (vx > 1e-12 * np.maximum(sxx, 1)) & (vz > 1e-12 * np.maximum(szz, 1))
            out = np.where(ok, cov / np.sqrt(np.abs(vx * vz)), 0.0)
        else:
            raise ValueError(f"unknown metric {name!r}; known: {', '.join(METRICS)}")
    return np.nan_to_num(out, nan=0.0, posinf=0.0, neginf=0.0)
