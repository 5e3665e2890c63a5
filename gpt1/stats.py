"""The report's statistics (numpy only): the run-level hierarchical bootstrap, the tests fixed
in advance, Holm's adjustment and the minimum detectable effect (MDE) of a design.

The unit of analysis is a run: (pre-training seed p, fine-tuning seed f). Every statistic is a
linear contrast of per-run scores (a difference of two arms, a slope over arms, a weighted
composite), so one bootstrap serves them all:

- `draw_sums`: per-example features summed over each bootstrap resample of a split's examples
  (drawn once per draw and shared by every arm and run scored on the split: paired), as a
  matrix product over chunks of draws, never a Python loop over draws.
- `hierarchical`: per-draw run values (draws, runs) -> the mean over p of the mean over f,
  with the fine-tuning seeds resampled within each pre-training seed (one resample of seed
  positions per draw, shared by every arm because the runs are the combined contrast) and the
  pre-training seeds kept (two cannot be resampled); also each p's own estimate and the
  between-p difference with its CI.
- `superiority` (held = CI above 0 and the same sign in every pre-training seed),
  `non_superiority` (held = "no gain >= margin": the 90 % upper bound below the margin),
  `holm` (step-down adjusted p-values and CI levels for per-task secondary CIs), `mde` and
  `design_se` (what a design can see at a given power, from variance components).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

CHUNK = 1024
"""Bootstrap draws generated per matrix product (memory: CHUNK x n weights)."""


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


@dataclass(frozen=True)
class Interval:
    """A point estimate and its percentile bootstrap interval."""

    estimate: float
    low: float
    high: float


CACHE_BYTES = 100_000_000
"""Resample counts of a split are kept (uint8) for reuse by later contrasts up to this size."""


@functools.lru_cache(maxsize=4)
def _counts(n: int, draws: int, seed: int) -> np.ndarray:
    """(draws, n) multiplicities of each example in each resample (uint8), seeded."""
    rng = np.random.default_rng(seed)
    out = np.empty((draws, n), dtype=np.uint8)
    for start in range(0, draws, CHUNK):
        c = min(CHUNK, draws - start)
        flat = (np.arange(c)[:, None] * n + rng.integers(0, n, size=(c, n))).ravel()
        counts = np.bincount(flat, minlength=c * n).reshape(c, n)
        out[start:start + c] = np.minimum(counts, 255)  # P(an example drawn > 255 times) ~ 0
    return out


def draw_sums(features: np.ndarray, draws: int, seed: int) -> np.ndarray:
    """(draws, m) sums of the (n, m) per-example features over `draws` resamples of the n
    examples with replacement (seeded: the same resamples for every call with this seed and
    n, so every arm and run scored on one split shares them). Matrix products over chunks of
    draws; the resample counts are cached for the next contrast on the same split."""
    x = np.asarray(features, dtype=np.float64)
    n = x.shape[0]
    if n * draws <= CACHE_BYTES:
        counts = _counts(n, draws, seed)
        return np.concatenate([counts[i:i + CHUNK].astype(np.float64) @ x
                               for i in range(0, draws, CHUNK)]) if draws else \
            np.empty((0, x.shape[1]))
    counts_iter = (_counts.__wrapped__(n, min(CHUNK, draws - i), seed + i)
                   for i in range(0, draws, CHUNK))
    return np.concatenate([c.astype(np.float64) @ x for c in counts_iter])


def percentile(draws: np.ndarray, level: float) -> tuple[float, float]:
    """The (1 - level) / 2 and (1 + level) / 2 quantiles of the draws."""
    tail = (1.0 - level) / 2.0
    low, high = np.quantile(draws, [tail, 1.0 - tail])
    return float(low), float(high)


@dataclass(frozen=True)
class RunBootstrap:
    """A contrast over runs: its estimate and CI, its draws (for other levels), each
    pre-training seed's estimate and the first-minus-second pre-training seed difference."""

    ci: Interval
    draws: np.ndarray
    per_pretrain: dict[int, float]
    between: Interval | None
    runs: int

    def interval(self, level: float) -> Interval:
        return Interval(self.ci.estimate, *percentile(self.draws, level))

    def p_value(self) -> float:
        """Two-sided bootstrap p-value of the contrast being 0."""
        below = float(np.mean(self.draws <= 0.0))
        above = float(np.mean(self.draws >= 0.0))
        return min(1.0, 2.0 * min(below, above))


def hierarchical(point: np.ndarray, draws: np.ndarray, pretrain: Sequence[int], seed: int,
                 level: float = 0.95, resample_seeds: bool = True) -> RunBootstrap:
    """Bootstrap of the mean over pre-training seeds of the mean over fine-tuning seeds.

    point (runs,) = each run's contrast on all examples; draws (B, runs) = on each example
    resample; pretrain (runs,) = each run's pre-training seed. With `resample_seeds` the
    fine-tuning seeds of each pre-training seed are resampled with replacement once per draw
    (vectorised); without it only the examples are (the examples-only CI)."""
    pt = np.asarray(pretrain)
    vals = np.asarray(draws, dtype=float)
    rng = np.random.default_rng(seed)
    groups = sorted({int(p) for p in pt})
    per_draw, per_point = [], {}
    for g in groups:
        cols = np.flatnonzero(pt == g)
        d = vals[:, cols]
        if resample_seeds and len(cols) > 1:
            d = np.take_along_axis(d, rng.integers(0, len(cols), size=d.shape), axis=1)
        per_draw.append(d.mean(axis=1))
        per_point[g] = float(np.mean(np.asarray(point, dtype=float)[cols]))
    stacked = np.stack(per_draw, axis=1)
    total = stacked.mean(axis=1)
    estimate = float(np.mean(list(per_point.values())))
    between = None
    if len(groups) >= 2:
        diff = stacked[:, 0] - stacked[:, 1]
        between = Interval(per_point[groups[0]] - per_point[groups[1]], *percentile(diff, level))
    return RunBootstrap(Interval(estimate, *percentile(total, level)), total, per_point,
                        between, len(pt))


def superiority(b: RunBootstrap) -> str:
    """held = CI above 0 and every pre-training seed's estimate above 0; not held = CI below
    0; else inconclusive (a CI above 0 whose pre-training seeds disagree in sign says so)."""
    if b.ci.low > 0:
        if all(v > 0 for v in b.per_pretrain.values()):
            return "held"
        return "inconclusive (the pre-training seeds disagree in sign)"
    if b.ci.high < 0:
        return "not held"
    return "inconclusive"


def non_superiority(b: RunBootstrap, margin: float, level: float = 0.90) -> str:
    """held = "no gain >= margin": the upper bound of the `level` CI is below the margin;
    not held = its lower bound is at or above the margin (a gain of at least the margin);
    else inconclusive."""
    ci = b.interval(level)
    if ci.high < margin:
        return "held"
    if ci.low >= margin:
        return "not held"
    return "inconclusive"


def holm(p_values: Sequence[float], alpha: float = 0.05) -> tuple[list[float], list[float]]:
    """Holm's step-down adjustment of m p-values: (adjusted p-values, CI level of each), the
    i-th smallest p getting level 1 - alpha / (m - i)."""
    p = np.asarray(p_values, dtype=float)
    m = len(p)
    order = np.argsort(p, kind="stable")
    adjusted = np.empty(m)
    levels = np.empty(m)
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p[i]))
        adjusted[i] = running
        levels[i] = 1.0 - alpha / (m - rank)
    return adjusted.tolist(), levels.tolist()


def design_se(pretrain_sd: float, seed_sd: float, example_sd: float, n_pretrain: int,
              n_seeds: int, n_examples: float, n_tasks: int = 1) -> float:
    """Standard error of a contrast averaged over n_tasks tasks: per task, between-pre-training
    variance / P + between-seed variance / (P F) + per-example variance / n (examples are
    shared by the runs, so their term does not shrink with runs), tasks independent."""
    per_task = (pretrain_sd ** 2 / n_pretrain + seed_sd ** 2 / (n_pretrain * n_seeds)
                + example_sd ** 2 / n_examples)
    return float(np.sqrt(per_task / n_tasks))


def mde(se: float, power: float, level: float = 0.95, one_sided: bool = False) -> float:
    """Minimum detectable effect: the true contrast a test at `level` (two-sided, or one-sided
    at 1 - level) detects with probability `power`, given the contrast's standard error."""
    z = NormalDist()
    alpha = 1.0 - level
    crit = z.inv_cdf(1.0 - (alpha if one_sided else alpha / 2.0))
    return float((crit + z.inv_cdf(power)) * se)


def paired_example_sd(p_a: float, p_b: float) -> float:
    """sd of one example's accuracy difference between two arms right with probabilities p_a
    and p_b, errors independent (a positive correlation only shrinks it)."""
    return float(np.sqrt(p_a * (1 - p_a) + p_b * (1 - p_b)))


def slope_weights(xs: Sequence[float]) -> np.ndarray:
    """Weights w with sum(w * y) = the least-squares slope of y over xs."""
    x = np.asarray(xs, dtype=float)
    centred = x - x.mean()
    return centred / float(np.sum(centred ** 2))
