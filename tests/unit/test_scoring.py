"""Metrics by name, per-group and renamed scores, aggregation over seeds."""

from __future__ import annotations

import numpy as np
import pytest

from gpt1.scoring import aggregate, head_predictions, score, score_split
from gpt1.tasks.registry import TASKS


def test_metrics_by_name() -> None:
    y, p = np.array([1, 1, 0, 0, 1]), np.array([1, 0, 0, 1, 1])
    assert score("acc", y, p) == pytest.approx(0.6)
    assert score("f1", y, p) == pytest.approx(2 / 3)  # P = R = 2/3
    assert score("mcc", y, p) == pytest.approx(1 / 6)
    x = np.array([0.0, 1.0, 2.0, 3.0])
    assert score("pearson", x, 2 * x + 1) == pytest.approx(1.0)
    assert score("spearman", x, x**3) == pytest.approx(1.0)
    assert score("pearson", x, np.ones(4)) == 0.0  # constant prediction: undefined -> 0
    with pytest.raises(ValueError, match="unknown metric"):
        score("bleu", y, p)


def test_task_scores_groups_and_renames() -> None:
    race = score_split(TASKS["race"], np.array([0, 1, 2, 3]), np.array([0, 1, 0, 0]),
                       ["middle", "middle", "high", "high"])
    assert race == {"acc": 0.5, "acc_middle": 1.0, "acc_high": 0.0}
    mnli = score_split(TASKS["mnli"], np.array([0, 1]), np.array([0, 2]), ["", ""])
    assert mnli == {"acc_matched": 0.5}
    assert set(score_split(TASKS["cola"], np.array([0, 1]), np.array([0, 1]), ["", ""])) == {
        "mcc", "acc"}


def test_head_predictions_and_aggregate() -> None:
    assert head_predictions(TASKS["sst2"], np.array([[0.1, 0.9], [2.0, 1.0]])).tolist() == [1, 0]
    assert head_predictions(TASKS["stsb"], np.array([3.5, 1.0])).tolist() == [3.5, 1.0]
    agg = aggregate([{"acc": 0.5}, {"acc": 0.7}])
    assert agg["acc"]["mean"] == pytest.approx(0.6)
    assert agg["acc"]["sd"] == pytest.approx(np.std([0.5, 0.7], ddof=1))
    assert aggregate([{"acc": 0.5}])["acc"] == {"mean": 0.5, "sd": 0.0, "per_seed": [0.5]}
