"""The report's statistics (numpy only): seeds, bootstrap CIs, paired differences, baselines.

- `seed_summary`: mean and sample sd over seeds (sd only with >= 2 seeds).
- `bootstrap_ci`: 95 % percentile bootstrap over evaluation examples with a fixed seed; the same
  resampled example indices are used for every run scored on a split (every seed, every row of
  a comparison), so a difference of two rows is a paired difference.
- `chance_score` / `majority_score`: what uniform random guessing and always predicting the
  training split's most frequent label score on the eval split under the task's metric.
- `verdict`: held / not held / inconclusive from a difference's CI.

Metrics are re-implemented here on numpy arrays (they agree with gpt1.evaluate's sklearn /
scipy ones to float precision; tests/unit/test_stats.py) because a bootstrap scores thousands
of resamples.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

ScoreFn = Callable[[np.ndarray], float]
"""Example indices (a resample of the eval split) -> one score."""


@dataclass(frozen=True)
class Summary:
    """Mean over seeds, sample sd (None with fewer than 2 seeds) and the seed count."""

    mean: float
    sd: float | None
    n: int


def seed_summary(values: Sequence[float] | np.ndarray) -> Summary:
    """Mean and sample sd (ddof 1) of per-seed values; no sd for a single seed."""
    arr = np.asarray(values, dtype=float)
    if arr.size == 0:
        raise ValueError("no seed values")
    sd = float(np.std(arr, ddof=1)) if arr.size > 1 else None
    return Summary(float(np.mean(arr)), sd, int(arr.size))


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
    """Pearson r; 0 for a constant input (undefined), as gpt1.evaluate.score."""
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


def metric(name: str, y_true: np.ndarray, y_pred: np.ndarray) -> float:
    """One metric by name (acc, f1, mcc, pearson, spearman) on numpy arrays."""
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
    return metric(name, y, np.full(y.shape, majority_label(train_labels), dtype=y.dtype))


def resample_indices(n: int, samples: int, seed: int) -> np.ndarray:
    """(samples, n) example indices drawn with replacement; fixed by `seed`."""
    return np.random.default_rng(seed).integers(0, n, size=(samples, n))


@dataclass(frozen=True)
class Interval:
    """A point estimate and its percentile bootstrap interval."""

    estimate: float
    low: float
    high: float


def bootstrap_ci(fn: ScoreFn, n: int, samples: int, seed: int, level: float = 0.95
                 ) -> Interval:
    """Percentile bootstrap of fn over n eval examples: fn(all indices) and the (1 - level) / 2
    and (1 + level) / 2 quantiles of fn over `samples` resamples (seeded). fn may combine
    several runs on the same examples (seeds, rows): each resample is shared by all of them."""
    return joint_bootstrap(lambda idx: fn(idx[0]), [n], samples, seed, level)


def joint_bootstrap(fn: Callable[[Sequence[np.ndarray]], float], sizes: Sequence[int],
                    samples: int, seed: int, level: float = 0.95) -> Interval:
    """bootstrap_ci over several eval splits at once (one per task): each resample draws every
    split's examples independently and fn gets one index array per split."""
    rngs = [resample_indices(n, samples, seed + i) for i, n in enumerate(sizes)]
    draws = np.array([fn([r[b] for r in rngs]) for b in range(samples)])
    tail = (1.0 - level) / 2.0
    low, high = np.quantile(draws, [tail, 1.0 - tail])
    return Interval(float(fn([np.arange(n) for n in sizes])), float(low), float(high))


def verdict(diff: Interval) -> str:
    """held when the whole CI of (paper's better - worse) is above 0, not held when it is below,
    inconclusive when it contains 0."""
    if diff.low > 0:
        return "held"
    if diff.high < 0:
        return "not held"
    return "inconclusive"
