"""The report's statistics against cases with known answers."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as scipy_stats
from sklearn import metrics as skm

from gpt1 import stats
from gpt1.scoring import chance_score, majority_label, majority_score, score


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


@pytest.mark.parametrize("name", ["acc", "f1", "mcc", "pearson", "spearman"])
def test_scores_agree_with_sklearn_and_scipy(name: str) -> None:
    rng = np.random.default_rng(0)
    if name in ("pearson", "spearman"):
        y, p = rng.normal(size=200), rng.integers(0, 5, 200).astype(float)
    else:
        y, p = rng.integers(0, 2, 200), rng.integers(0, 2, 200)
    assert score(name, y, p) == pytest.approx(_oracle(name, y, p), abs=1e-12)


def test_mcc_multiclass_agrees_with_sklearn() -> None:
    rng = np.random.default_rng(1)
    y, p = rng.integers(0, 3, 300), rng.integers(0, 3, 300)
    assert score("mcc", y, p) == pytest.approx(_oracle("mcc", y, p), abs=1e-12)


def test_bootstrap_ci_of_a_mean_matches_the_normal_interval() -> None:
    """Known answer: a proportion p over n examples has a 95 % CI of about p +- 1.96
    sqrt(p (1 - p) / n); a constant score has a zero-width CI."""
    n = 2000
    correct = np.zeros(n)
    correct[: n * 7 // 10] = 1.0  # accuracy 0.7
    ci = stats.bootstrap_ci(lambda idx: float(correct[idx].mean()), n, 2000, seed=0)
    half = 1.96 * np.sqrt(0.7 * 0.3 / n)
    assert ci.estimate == pytest.approx(0.7)
    assert ci.low == pytest.approx(0.7 - half, abs=0.004)
    assert ci.high == pytest.approx(0.7 + half, abs=0.004)
    flat = stats.bootstrap_ci(lambda idx: 0.5, n, 100, seed=0)
    assert (flat.low, flat.high) == (0.5, 0.5)
    again = stats.bootstrap_ci(lambda idx: float(correct[idx].mean()), n, 2000, seed=0)
    assert again == ci  # fixed seed: the same interval every run


def test_paired_difference_shares_the_resample() -> None:
    """Two runs that differ on exactly the same 10 % of examples: the joint (paired) resample
    gives a CI far narrower than resampling each run on its own would."""
    n = 1000
    rng = np.random.default_rng(2)
    a = rng.integers(0, 2, n).astype(float)
    b = a.copy()
    b[:100] = 0.0
    a[:100] = 1.0  # a is right wherever b is, plus on 100 more (or the same) examples
    ci = stats.bootstrap_ci(lambda idx: float(a[idx].mean() - b[idx].mean()), n, 1000, seed=3)
    diff = a.mean() - b.mean()
    assert ci.estimate == pytest.approx(diff)
    assert ci.low > 0 and ci.high - ci.low < 0.05
    assert stats.verdict(ci) == "held"
    assert stats.verdict(stats.Interval(-0.1, -0.2, -0.01)) == "not held"
    assert stats.verdict(stats.Interval(0.01, -0.02, 0.05)) == "inconclusive"


def test_joint_bootstrap_resamples_each_split() -> None:
    sizes = [10, 20]
    seen: list[tuple[int, int]] = []

    def fn(idx: list[np.ndarray]) -> float:
        seen.append((len(idx[0]), len(idx[1])))
        return 0.0

    stats.joint_bootstrap(fn, sizes, 5, seed=0)
    assert set(seen) == {(10, 20)} and len(seen) == 6  # 5 resamples + the point estimate


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
