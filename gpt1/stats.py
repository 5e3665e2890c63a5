"""The report's statistics (numpy; scipy's t and chi-square for the MDE): the run-level
hierarchical bootstrap, the tests fixed in advance, Holm's adjustment and the minimum
detectable effect (MDE) and power of a design under the test actually run.

The unit of analysis is a run: (pre-training seed p, fine-tuning seed f). Every statistic is a
linear contrast of per-run scores (a difference of two arms, a slope over arms, a weighted
composite), so one bootstrap serves them all:

- `draw_sums`: per-example features summed over each bootstrap resample of a split's examples
  (drawn once per draw and shared by every arm and run scored on the split: paired), as a
  matrix product over chunks of draws, never a Python loop over draws.
- `hierarchical`: per-draw run values (draws, runs) -> the mean over p of the mean over f:
  the examples-only draw plus the fine-tuning-seed error drawn from its t distribution with
  F - 1 degrees of freedom (`seed_noise`: small-sample-correct, where resampling 3 seeds
  would shrink their variance to 2/3), the pre-training seeds kept (two cannot be resampled,
  so every CI is conditional on the pre-trained models); also each p's own estimate and the
  between-p difference with its CI.
- `superiority` (held = CI above 0 and the same sign in every pre-training seed),
  `non_superiority` (held = "no gain >= margin": the 90 % upper bound below the margin),
  `holm` (step-down adjusted p-values and CI levels for per-task secondary CIs), `mde` and
  `power` of the test actually run (from `design_variance`'s components: the examples a
  normal term, the fine-tuning seeds estimated from F - 1 degrees of freedom, the
  pre-training seeds outside the conditional CI; a from-scratch arm's seed term over its F
  runs, not P F).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np
from scipy import special
from scipy import stats as scipy_stats

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


def seed_noise(point: np.ndarray, pretrain: np.ndarray, finetune: np.ndarray, n_draws: int,
               rng: np.random.Generator) -> np.ndarray:
    """(n_draws, P) draws of the fine-tuning-seed error of each pre-training seed's mean over
    its fine-tuning seeds, from their multivariate t distribution (small-sample-correct).

    The fine-tuning seed f is the independent unit: it draws the training sample for every
    pre-training seed p and a from-scratch arm (no pre-training seed) runs once per f, so the
    runs of one f are dependent across p. With the F x P table of per-run values complete,
    S = their sample covariance over f (ddof 1, unbiased) and the error of the P means is
    S / F times a t with F - 1 degrees of freedom (Z ~ N(0, S / F) over the square root of a
    chi-square / df, one per draw, shared by the P coordinates). Resampling 3 seeds instead
    (the plug-in bootstrap) gives their mean (F - 1) / F = 2/3 of this variance and the light
    tails of a normal where a t with 2 df has a 97.5 % quantile of 4.30, not 1.96. A table
    with a run missing falls back to one t per p (its own seeds, F_p - 1 df); a p with one
    seed, or all values equal, adds nothing."""
    pt, ft, x = np.asarray(pretrain), np.asarray(finetune), np.asarray(point, dtype=float)
    groups, seeds = sorted({int(p) for p in pt}), sorted({int(f) for f in ft})
    out = np.zeros((n_draws, len(groups)))
    table = np.full((len(seeds), len(groups)), np.nan)
    for v, p, f in zip(x, pt, ft, strict=True):
        table[seeds.index(int(f)), groups.index(int(p))] = v
    if len(seeds) >= 2 and not np.isnan(table).any():
        cov = np.atleast_2d(np.cov(table, rowvar=False, ddof=1)) / len(seeds)
        vals, vecs = np.linalg.eigh(cov)
        root = vecs * np.sqrt(np.clip(vals, 0.0, None))
        df = len(seeds) - 1
        chi = rng.chisquare(df, size=n_draws) / df
        return (rng.standard_normal((n_draws, len(groups))) @ root.T) / np.sqrt(chi)[:, None]
    for j in range(len(groups)):
        col = table[:, j][~np.isnan(table[:, j])]
        if len(col) >= 2:
            sd = float(np.std(col, ddof=1)) / np.sqrt(len(col))
            out[:, j] = sd * rng.standard_t(len(col) - 1, size=n_draws)
    return out


def hierarchical(point: np.ndarray, draws: np.ndarray, pretrain: Sequence[int], seed: int,
                 level: float = 0.95, resample_seeds: bool = True,
                 finetune: Sequence[int] | None = None) -> RunBootstrap:
    """Bootstrap of the mean over pre-training seeds of the mean over fine-tuning seeds,
    conditional on the pre-training seeds (they are kept: two cannot be resampled).

    point (runs,) = each run's contrast on all examples; draws (B, runs) = on each example
    resample; pretrain (runs,) = each run's pre-training seed; finetune (runs,) = its
    fine-tuning seed (default: its position within its pre-training seed). Each draw is the
    examples-only mean of the runs plus, with `resample_seeds`, a draw of the fine-tuning-seed
    error from its t distribution (`seed_noise`); without it only the examples vary (the
    examples-only CI)."""
    pt = np.asarray(pretrain)
    vals = np.asarray(draws, dtype=float)
    groups = sorted({int(p) for p in pt})
    if finetune is None:
        finetune = [int(np.sum(pt[:i] == pt[i])) for i in range(len(pt))]
    per_point = {g: float(np.mean(np.asarray(point, dtype=float)[pt == g])) for g in groups}
    stacked = np.stack([vals[:, pt == g].mean(axis=1) for g in groups], axis=1)
    if resample_seeds:
        stacked = stacked + seed_noise(np.asarray(point), pt, np.asarray(finetune),
                                       vals.shape[0], np.random.default_rng(seed))
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


@dataclass(frozen=True)
class ContrastVariance:
    """The sampling variance of a contrast's estimate by source, each treated as the project's
    test treats it: the examples (resampled: a normal term in the CI), the fine-tuning seeds
    (estimated from the F seeds' runs: a scaled t with `seed_df` = F - 1 degrees of freedom in
    the CI, `seed_noise`) and the pre-training seeds (kept fixed: they move the estimate but
    the CI, conditional on them, leaves them out)."""

    examples: float
    seeds: float
    pretrain: float
    seed_df: int

    @property
    def se(self) -> float:
        """The estimate's standard error from every source."""
        return float(np.sqrt(self.examples + self.seeds + self.pretrain))

    def scaled(self, factor: float) -> ContrastVariance:
        """The variance of `factor` times the contrast."""
        f2 = factor ** 2
        return ContrastVariance(self.examples * f2, self.seeds * f2, self.pretrain * f2,
                                self.seed_df)


def design_variance(pretrain_sd: float, seed_sd: float, example_sd: float, n_pretrain: int,
                    n_seeds: int, n_examples: float, n_tasks: int = 1,
                    scratch_arms: int = 0) -> ContrastVariance:
    """Variance of a two-arm contrast averaged over n_tasks tasks: per task,
    between-pre-training variance / P + the seed term + per-example variance / n (examples
    are shared by the runs, so their term does not shrink with runs), tasks independent; the
    seed term is estimated from the F fine-tuning seeds (F - 1 degrees of freedom).

    `seed_sd` is the sd of a per-run arm difference, so each arm carries half its variance,
    divided by that arm's independent runs (`seed_term`): P F for a pre-trained arm, F for a
    from-scratch arm (it has no pre-training seed; `scratch_arms` of the two are)."""
    return ContrastVariance(example_sd ** 2 / n_examples / n_tasks,
                            seed_term(seed_sd, n_pretrain, n_seeds, scratch_arms) / n_tasks,
                            pretrain_sd ** 2 / n_pretrain / n_tasks, max(n_seeds - 1, 0))


def seed_term(seed_sd: float, n_pretrain: int, n_seeds: int, scratch_arms: int = 0) -> float:
    """The fine-tuning-seed variance of a two-arm contrast's mean: the sum over its arms of
    (seed_sd^2 / 2) / (that arm's independent runs), P F for a pre-trained arm and F for a
    from-scratch one; with no from-scratch arm seed_sd^2 / (P F)."""
    if scratch_arms not in (0, 1, 2):
        raise ValueError(f"scratch_arms: a two-arm contrast has 0, 1 or 2, got {scratch_arms}")
    runs = [n_seeds] * scratch_arms + [n_pretrain * n_seeds] * (2 - scratch_arms)
    return sum(seed_sd ** 2 / 2 / r for r in runs)


QUADRATURE = 128
"""Equal-probability nodes over the chi-square of an estimated seed variance."""


@functools.lru_cache(maxsize=16)
def _chi_nodes(df: int) -> np.ndarray:
    """Midpoint quantiles of chi-square(df) / df: E[g(W)] ~ the mean of g over these nodes."""
    u = (np.arange(QUADRATURE) + 0.5) / QUADRATURE
    return np.asarray(scipy_stats.gamma.ppf(u, a=df / 2.0, scale=2.0 / df), dtype=float)


@functools.lru_cache(maxsize=256)
def _critical(var: ContrastVariance, level: float) -> np.ndarray:
    """The CI's half-width on one side, the (1 + level) / 2 quantile of the bootstrap's draw
    N(0, examples) + sqrt(s^2) t_df, at each node of the estimated seed variance s^2 =
    seeds x W' (W' ~ chi-square(df) / df, independent of the estimate): the quantile is
    found by bisection of E_W[Phi(x / sqrt(examples + s^2 / W))], all nodes at once."""
    p = (1.0 + level) / 2.0
    z = NormalDist().inv_cdf(p)
    if var.seeds <= 0 or var.seed_df < 1:
        return np.array([z * np.sqrt(var.examples)])
    w = _chi_nodes(var.seed_df)
    s2 = var.seeds * w                                   # the estimate's seed variance
    scale = np.sqrt(var.examples + s2[:, None] / w[None, :])   # (estimates, t's mixing)
    low = np.full(len(s2), z * np.sqrt(var.examples))
    high = z * scale.max(axis=1) + 1e-12
    for _ in range(60):
        mid = (low + high) / 2.0
        below = special.ndtr(mid[:, None] / scale).mean(axis=1) < p
        low, high = np.where(below, mid, low), np.where(below, high, mid)
    return (low + high) / 2.0


def power(effect: float, var: ContrastVariance, level: float = 0.95) -> float:
    """Probability that the project's test finds a true contrast `effect` > 0: the bound of
    its `level` CI on the near side of 0 lies beyond 0 (superiority: the 95 % CI's lower
    bound above 0; a non-superiority test reads the 90 % CI's upper bound against its margin,
    the same event shifted). The estimate ~ N(effect, se^2); the CI's width follows the
    seed variance estimated from F - 1 degrees of freedom (`_critical`): with 3 seeds its t
    has a 97.5 % quantile of 4.30, where a normal theory uses 1.96."""
    if var.se <= 0:
        return 1.0 if effect > 0 else 0.0
    crit = _critical(var, level)
    return float(np.mean(special.ndtr((effect - crit) / var.se)))


def mde(var: ContrastVariance, power_goal: float, level: float = 0.95) -> float:
    """Minimum detectable effect: the true contrast the project's test at `level` (`power`)
    detects with probability `power_goal`."""
    if var.se <= 0:
        return 0.0
    crit = _critical(var, level)
    low, high = 0.0, float(crit.max()) + 10.0 * var.se
    for _ in range(80):
        mid = (low + high) / 2.0
        if np.mean(special.ndtr((mid - crit) / var.se)) < power_goal:
            low = mid
        else:
            high = mid
    return (low + high) / 2.0


def paired_example_sd(p_a: float, p_b: float) -> float:
    """sd of one example's accuracy difference between two arms right with probabilities p_a
    and p_b, errors independent (a positive correlation only shrinks it)."""
    return float(np.sqrt(p_a * (1 - p_a) + p_b * (1 - p_b)))


def slope_weights(xs: Sequence[float]) -> np.ndarray:
    """Weights w with sum(w * y) = the least-squares slope of y over xs."""
    x = np.asarray(xs, dtype=float)
    centred = x - x.mean()
    return centred / float(np.sum(centred ** 2))
