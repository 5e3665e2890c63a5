"""The report's statistics (numpy only): seeds, bootstrap CIs, paired differences.

- `seed_summary`: mean and sample sd over seeds (sd only with >= 2 seeds).
- `bootstrap_ci`: 95 % percentile bootstrap over evaluation examples with a fixed seed; the same
  resampled example indices are used for every run scored on a split (every seed, every row of
  a comparison), so a difference of two rows is a paired difference.
- `verdict`: held / not held / inconclusive from a difference's CI.

The scores being resampled are gpt1.scoring's.
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
