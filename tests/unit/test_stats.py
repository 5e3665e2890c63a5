"""The report's statistics against cases with known answers."""

from __future__ import annotations

from statistics import NormalDist

import numpy as np
import pytest
from scipy import stats as scipy_stats
from sklearn import metrics as skm

from gpt1 import stats
from gpt1.scoring import (
    chance_score,
    majority_label,
    majority_score,
    score,
    score_features,
    score_from_sums,
)


def _oracle(name: str, y: np.ndarray, p: np.ndarray) -> float:
    """The five task metrics as sklearn / scipy compute them."""
    if name == "acc":
        return float(skm.accuracy_score(y, p))
    if name == "f1":
        return float(skm.f1_score(y, p, pos_label=1, zero_division=0.0))
    if name == "mcc":
        return float(skm.matthews_corrcoef(y, p))
    fn = scipy_stats.pearsonr if name == "pearson" else scipy_stats.spearmanr
    return float(fn(y, p)[0])


def test_seed_summary_sd_only_with_two_seeds() -> None:
    one = stats.seed_summary([0.7])
    assert one.mean == 0.7 and one.sd is None and one.n == 1
    three = stats.seed_summary([0.6, 0.7, 0.8])
    assert three.mean == pytest.approx(0.7) and three.sd == pytest.approx(0.1)


def _labels(name: str, n: int, seed: int, classes: int = 2) -> tuple[np.ndarray, np.ndarray]:
    """Random (truth, prediction) for a metric: real-valued for correlations, else classes."""
    rng = np.random.default_rng(seed)
    if name in ("pearson", "spearman"):
        return rng.normal(size=n), rng.integers(0, 5, n).astype(float)
    return rng.integers(0, classes, n), rng.integers(0, 2, n)


@pytest.mark.parametrize("name", ["acc", "f1", "mcc", "pearson", "spearman"])
def test_scores_agree_with_sklearn_and_scipy(name: str) -> None:
    y, p = _labels(name, 200, 0)
    assert score(name, y, p) == pytest.approx(_oracle(name, y, p), abs=1e-12)


def test_mcc_multiclass_agrees_with_sklearn() -> None:
    rng = np.random.default_rng(1)
    y, p = rng.integers(0, 3, 300), rng.integers(0, 3, 300)
    assert score("mcc", y, p) == pytest.approx(_oracle("mcc", y, p), abs=1e-12)


def test_draw_sums_of_a_proportion_match_the_normal_interval() -> None:
    """Known answer: a proportion p over n examples has a 95 % CI of about p +- 1.96
    sqrt(p (1 - p) / n); the same seed gives the same resamples (shared by every arm)."""
    n = 2000
    correct = np.zeros(n)
    correct[: n * 7 // 10] = 1.0  # accuracy 0.7
    feats = score_features("acc", correct, np.ones(n))
    sums = stats.draw_sums(feats, 4000, seed=0)
    acc = score_from_sums("acc", sums)
    low, high = stats.percentile(acc, 0.95)
    half = 1.96 * np.sqrt(0.7 * 0.3 / n)
    assert low == pytest.approx(0.7 - half, abs=0.004)
    assert high == pytest.approx(0.7 + half, abs=0.004)
    assert np.array_equal(stats.draw_sums(feats, 4000, seed=0), sums)
    assert (sums[:, 0] == n).all()  # every resample has n examples


@pytest.mark.parametrize("name", ["acc", "f1", "mcc", "pearson", "spearman"])
def test_scores_from_summed_features_equal_score(name: str) -> None:
    """The vectorised bootstrap's metric on all examples equals `score`, group masks too."""
    y, p = _labels(name, 300, 5, 3 if name == "mcc" else 2)
    assert float(score_from_sums(name, score_features(name, y, p).sum(0))) == pytest.approx(
        score(name, y, p), abs=1e-9)
    mask = np.arange(300) % 3 == 0
    assert float(score_from_sums(name, score_features(name, y, p, mask).sum(0))) == \
        pytest.approx(score(name, y[mask], p[mask]), abs=1e-9)
    const = np.zeros(300)
    assert float(score_from_sums(name, score_features(name, y, const).sum(0))) == \
        pytest.approx(score(name, y, const), abs=1e-9)


def _runs(n_pretrain: int, n_seeds: int, n: int, seed_sd: float, pretrain_sd: float,
          delta: float, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Synthetic correctness matrices of two arms (runs x examples) with known structure:
    arm B right on each example with probability 0.6 + a run effect, arm A with probability
    0.6 + delta + another run effect; run effects = pre-training (sd pretrain_sd) plus
    fine-tuning seed (sd seed_sd). Returns (A, B, pretrain seed of each run, per-run A - B)."""
    rng = np.random.default_rng(seed)
    pt = np.repeat(np.arange(n_pretrain), n_seeds)
    runs = len(pt)

    def arm(base: float) -> np.ndarray:
        eff = rng.normal(0, pretrain_sd, n_pretrain)[pt] + rng.normal(0, seed_sd, runs)
        return (rng.random((runs, n)) < np.clip(base + eff, 0, 1)[:, None]).astype(float)

    a, b = arm(0.6 + delta), arm(0.6)
    return a, b, pt, a.mean(1) - b.mean(1)


def _bootstrap(a: np.ndarray, b: np.ndarray, pt: np.ndarray, resample_seeds: bool,
               draws: int = 4000) -> stats.RunBootstrap:
    """The run-level bootstrap of mean(A) - mean(B): one example resample per draw shared by
    every run of both arms."""
    feats = np.concatenate([a.T, b.T], axis=1)  # (n, 2 x runs): each column one run's hits
    sums = stats.draw_sums(feats, draws, seed=1) / a.shape[1]
    runs = a.shape[0]
    diff = sums[:, :runs] - sums[:, runs:]
    return stats.hierarchical(a.mean(1) - b.mean(1), diff, pt, seed=2,
                              resample_seeds=resample_seeds)


def test_between_seed_variance_widens_the_ci_versus_examples_only() -> None:
    """With large between-seed variance the hierarchical CI is much wider than the
    examples-only one; with identical runs the two agree (the seed term adds nothing)."""
    a, b, pt, _ = _runs(2, 3, 800, seed_sd=0.06, pretrain_sd=0.0, delta=0.05)
    wide = _bootstrap(a, b, pt, True)
    narrow = _bootstrap(a, b, pt, False)
    width = {k: v.ci.high - v.ci.low for k, v in (("h", wide), ("e", narrow))}
    assert width["h"] > 1.8 * width["e"]
    assert wide.ci.estimate == narrow.ci.estimate
    a, b = a[[0] * 6], b[[0] * 6]  # six identical runs per arm: no run-level variance
    quiet = {r: _bootstrap(a, b, pt, r) for r in (True, False)}
    ratio = (quiet[True].ci.high - quiet[True].ci.low) / (quiet[False].ci.high
                                                          - quiet[False].ci.low)
    assert ratio == pytest.approx(1.0)
    assert set(wide.per_pretrain) == {0, 1} and wide.between is not None
    assert wide.between.estimate == pytest.approx(
        wide.per_pretrain[0] - wide.per_pretrain[1])


def test_superiority_needs_the_same_sign_in_both_pretraining_seeds() -> None:
    a, b, pt, _ = _runs(2, 3, 3000, seed_sd=0.0, pretrain_sd=0.0, delta=0.08)
    assert stats.superiority(_bootstrap(a, b, pt, True)) == "held"
    assert stats.superiority(_bootstrap(b, a, pt, True)) == "not held"
    split = stats.RunBootstrap(stats.Interval(0.02, 0.01, 0.03), np.array([0.02]),
                               {0: 0.05, 1: -0.01}, None, 6)
    assert stats.superiority(split).startswith("inconclusive")


@pytest.mark.parametrize(("delta", "word"), [(0.0, "held"), (0.05, "not held"),
                                             (0.01, "inconclusive")])
def test_non_superiority_inside_and_outside_the_margin(delta: float, word: str) -> None:
    """A known difference well inside the margin (0 vs delta = 1 point) is held ("no gain
    >= delta"); one well outside (5 points) is not held; one at the margin is inconclusive.
    Eight fine-tuning seeds: with three, the t term of 2 df alone is wider than the margin."""
    a, b, pt, _ = _runs(2, 8, 5000, seed_sd=0.002, pretrain_sd=0.0, delta=delta, seed=3)
    assert stats.non_superiority(_bootstrap(a, b, pt, True), 0.01) == word


def test_holm_adjusts_in_step_down_order() -> None:
    adj, levels = stats.holm([0.01, 0.04, 0.03])
    assert adj == pytest.approx([0.03, 0.06, 0.06])
    assert levels == pytest.approx([1 - 0.05 / 3, 1 - 0.05 / 1, 1 - 0.05 / 2])


def test_mde_of_a_design() -> None:
    """With every seed term known (no seeds, or many) the MDE is the normal theory's
    (z_0.975 + z_0.8) x SE = 2.80 SE, and 2.49 SE for the bound of a 90 % CI; with 3
    fine-tuning seeds the CI's t term of 2 degrees of freedom makes it much larger; more runs
    shrink the seed terms only."""
    known = stats.ContrastVariance(1.0, 0.0, 0.0, 0)
    assert stats.mde(known, 0.8) == pytest.approx(2.8016, abs=2e-3)
    assert stats.mde(known, 0.8, level=0.90) == pytest.approx(2.486, abs=2e-3)
    many = stats.ContrastVariance(0.5, 0.5, 0.0, 10_000)
    assert stats.mde(many, 0.8) == pytest.approx(2.8016, abs=5e-3)
    three = stats.ContrastVariance(0.0, 1.0, 0.0, 2)
    assert stats.mde(three, 0.8) > 1.5 * stats.mde(known, 0.8)
    big = stats.design_variance(0.02, 0.02, 0.7, 1, 3, 872)
    more = stats.design_variance(0.02, 0.02, 0.7, 2, 3, 872)
    assert more.se < big.se and more.examples == big.examples and more.seed_df == 2
    assert stats.design_variance(0, 0, 0.7, 2, 3, 872).se == pytest.approx(0.7 / np.sqrt(872))
    assert stats.paired_example_sd(0.6, 0.6) == pytest.approx(np.sqrt(0.48))
    assert stats.slope_weights([0, 1, 2, 3, 4]) @ np.array([1, 2, 3, 4, 5.0]) == \
        pytest.approx(1.0)


def test_chance_scores_from_the_labels() -> None:
    y = np.array([1] * 60 + [0] * 40)
    assert chance_score("acc", y, 2) == 0.5
    assert chance_score("acc", np.zeros(4), np.array([2, 4, 4, 5])) == pytest.approx(
        (1 / 2 + 1 / 4 + 1 / 4 + 1 / 5) / 4)
    assert chance_score("f1", y, 2) == pytest.approx(1.2 / 2.2)
    assert chance_score("mcc", y, 2) == 0.0
    # The expected-counts F1 is close to the Monte-Carlo mean of random guessing.
    rng = np.random.default_rng(0)
    sims = [score("f1", y, rng.integers(0, 2, len(y))) for _ in range(3000)]
    assert chance_score("f1", y, 2) == pytest.approx(np.mean(sims), abs=0.01)


def test_majority_scores_from_train_and_eval_labels() -> None:
    """MRPC-like: the training split is mostly "paraphrase" (1), so the majority predictor
    always says 1: accuracy = positive rate of eval, F1 = 2p / (1 + p), MCC 0."""
    train = np.array([1] * 70 + [0] * 30)
    y = np.array([1] * 66 + [0] * 34)
    assert majority_label(train) == 1
    assert majority_score("acc", train, y) == pytest.approx(0.66)
    assert majority_score("f1", train, y) == pytest.approx(2 * 0.66 / 1.66)
    assert majority_score("mcc", train, y) == 0.0
    # The training split decides, not the eval split: a mostly-0 train predicts 0.
    assert majority_score("acc", 1 - train, y) == pytest.approx(0.34)
    assert majority_score("pearson", np.array([0.5, 0.5, 3.0]), np.array([1.0, 2.0])) == 0


def test_baseline_columns_from_the_task_data() -> None:
    """Chance and majority per JSON score name, from the eval labels and the training
    split's majority label (MRPC: F1 of always "paraphrase"; RACE: 1 / 4 per group)."""
    from gpt1.scoring import baselines
    from gpt1.tasks.registry import TASKS

    train, y = np.array([1] * 70 + [0] * 30), np.array([1] * 66 + [0] * 34)
    mrpc = baselines(TASKS["mrpc"], train, y, np.full(100, 2), [""] * 100)
    assert mrpc["f1"] == {"chance": pytest.approx(1.32 / 2.32),
                          "majority": pytest.approx(2 * 0.66 / 1.66)}
    assert mrpc["acc"] == {"chance": 0.5, "majority": pytest.approx(0.66)}
    groups = ["middle"] * 40 + ["high"] * 60
    race_y = np.array([0] * 10 + [2] * 30 + [2] * 60)
    race = baselines(TASKS["race"], np.array([2, 2, 1]), race_y, np.full(100, 4), groups)
    assert race["acc"] == {"chance": 0.25, "majority": pytest.approx(0.9)}
    assert race["acc_middle"]["majority"] == pytest.approx(0.75)
    assert race["acc_high"] == {"chance": 0.25, "majority": 1.0}


def test_the_seed_term_of_three_fine_tuning_seeds_covers_at_its_level() -> None:
    """Three fine-tuning seeds, normal seed effects, no example noise: the 95 % CI covers the
    true mean in about 95 % of 400 simulated studies (t with 2 df), where resampling the 3
    seeds (variance x 2/3, normal tails) covers far less."""
    rng = np.random.default_rng(5)
    hits, plug_in = 0, 0
    for i in range(400):
        point = rng.normal(0.0, 0.02, 3)
        b = stats.hierarchical(point, np.tile(point, (2000, 1)), [0, 0, 0], seed=i)
        hits += b.ci.low <= 0.0 <= b.ci.high
        resampled = point[rng.integers(0, 3, (2000, 3))].mean(axis=1)
        low, high = stats.percentile(resampled, 0.95)
        plug_in += low <= 0.0 <= high
    assert 0.92 <= hits / 400 <= 0.98
    assert plug_in / 400 < 0.85


def test_a_run_shared_by_both_pretraining_seeds_counts_once_per_fine_tuning_seed() -> None:
    """full(p, f) - scratch(f), scratch identical for both pre-training seeds and full
    constant: the 6 runs are 3 independent values, so the CI is the t interval of 3 (97.5 %
    quantile 4.30 x sd / sqrt 3), not that of 6 independent runs; the between-pre-training
    difference is exactly 0."""
    per_f = np.array([0.30, 0.25, 0.28])
    point = np.concatenate([per_f, per_f])
    b = stats.hierarchical(point, np.tile(point, (40000, 1)), [0, 0, 0, 1, 1, 1], seed=3,
                           finetune=[0, 1, 2, 0, 1, 2])
    half = (b.ci.high - b.ci.low) / 2
    assert half == pytest.approx(4.303 * np.std(per_f, ddof=1) / np.sqrt(3), rel=0.05)
    assert b.between is not None and b.between.low == b.between.high == 0.0
    independent = stats.hierarchical(point, np.tile(point, (40000, 1)), [0, 0, 0, 1, 1, 1],
                                     seed=3, finetune=[0, 1, 2, 3, 4, 5])  # table incomplete
    assert (independent.ci.high - independent.ci.low) / 2 < 0.8 * half


def test_power_is_the_inverse_of_the_mde() -> None:
    """At the MDE of a design the power is the one it was stated at; the paper's SST-2 gap of
    (e), 0.8 points, has little power at a standard error of 2 points."""
    var = stats.ContrastVariance(0.0002, 0.0002, 0.0, 2)
    assert stats.power(stats.mde(var, 0.8), var) == pytest.approx(0.8, abs=1e-3)
    assert stats.power(0.008, var) < 0.1
    assert stats.power(0.0, stats.ContrastVariance(0.0, 0.0, 0.0, 0)) == 0.0


@pytest.mark.parametrize("n_seeds, effect", [(3, 0.04), (8, 0.03)])
def test_power_matches_a_simulation_of_the_test_the_report_runs(n_seeds: int,
                                                                effect: float) -> None:
    """The power the plan prints is the rate at which the report's own test (`hierarchical`
    with its t seed term, then `superiority`) holds on simulated studies with the declared
    variance components: 2 pre-training x F fine-tuning seeds, paired examples (one normal
    resample term shared by the runs), a from-scratch arm (seed term over F runs). The normal
    theory's power overstates it with 3 seeds."""
    sd_pre, sd_seed, sd_ex, n_pre, n = 0.01, 0.025, 0.65, 2, 3000
    var = stats.design_variance(sd_pre, sd_seed, sd_ex, n_pre, n_seeds, n, 1, scratch_arms=1)
    rng = np.random.default_rng(7)
    studies, draws, held = 1500, 600, 0
    pt = np.repeat(np.arange(n_pre), n_seeds)
    ft = np.tile(np.arange(n_seeds), n_pre)
    for i in range(studies):
        pre = rng.normal(0.0, sd_pre, n_pre)[pt]
        # full - scratch per run: the full arm's seed error per (p, f), the scratch arm's per f
        seed = (rng.normal(0.0, sd_seed / np.sqrt(2), n_pre * n_seeds)
                + rng.normal(0.0, sd_seed / np.sqrt(2), n_seeds)[ft])
        examples = rng.normal(0.0, sd_ex / np.sqrt(n))
        point = effect + pre + seed + examples
        resample = rng.normal(0.0, sd_ex / np.sqrt(n), (draws, 1))
        b = stats.hierarchical(point, point[None, :] + resample, pt, seed=i, finetune=ft)
        held += b.ci.low > 0
    rate, predicted = held / studies, stats.power(effect, var)
    assert abs(rate - predicted) < 3 * np.sqrt(predicted * (1 - predicted) / studies) + 0.01, \
        (rate, predicted)
    normal_theory = NormalDist().cdf(effect / var.se - NormalDist().inv_cdf(0.975))
    if n_seeds == 3:
        assert normal_theory > predicted + 0.1 and normal_theory > rate + 0.1
