"""The plan's gate and the design's MDE, read from pilot and fine-tuning records: the gate
compares an accuracy with the pilot split's majority share (never an MCC or F1), a pilot
record that predates the gate leaves it "not evaluable" (never "untestable at this budget"),
the pilot table shows the lr x warm-up grid and the paper recipe's row, and a from-scratch
arm's seed term counts its F runs, not P x F."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from gpt1 import stats
from gpt1.arms.pilot import pilot_accuracy
from gpt1.report import findings, pilots
from gpt1.report.estimates import NOT_EVALUABLE, UNTESTABLE
from gpt1.tasks.registry import TASKS
from tests.helpers.report_metrics import preds_json

NEW_PILOT = {"variant": "scratch", "task": "cola", "metric": "mcc", "grid": [6.25e-5, 5e-4],
             "warmup_grid": [0.002, 0.1],
             "dev_scores": {"lr 6.25e-05, warm-up 0.002": 0.0, "lr 6.25e-05, warm-up 0.1": 0.05,
                            "lr 0.0005, warm-up 0.002": 0.08, "lr 0.0005, warm-up 0.1": 0.12},
             "chosen_lr": 5e-4, "chosen_warmup": 0.1, "chosen_score": 0.12,
             "chosen_accuracy": 0.75, "dev_majority": 0.69,
             "paper_recipe": {"lr": 6.25e-5, "warmup_frac": 0.002, "score": 0.03,
                              "log_loss": 0.7, "in_grid": True},
             "dev_split": "500 examples of the training pool"}
"""A pilot record of a task scored in MCC: its chosen configuration's MCC (0.12) is far below
the majority share (0.69), its accuracy (0.75) is not."""


@pytest.fixture
def gated(make_params):
    return make_params({"report": {"gate_margins": {"sst2": 0.03, "cola": 0.03}}})


def _without(record: dict[str, Any], *keys: str) -> dict[str, Any]:
    return {k: v for k, v in record.items() if k not in keys}


def test_the_gate_compares_an_accuracy_with_the_majority_share(gated) -> None:
    g = pilots.gate(gated, {"lr_pilot_scratch_cola": NEW_PILOT}, "scratch", "cola")
    assert g.status == pilots.CLEARS, g.text  # accuracy 75.0 >= 69.0 + 3.0
    assert "(lr 0.0005, warm-up 0.1) accuracy 75.0" in g.text and "= 72.0: clears" in g.text
    failing = {**NEW_PILOT, "chosen_accuracy": 0.70}
    assert pilots.gate(gated, {"lr_pilot_scratch_cola": failing}, "scratch", "cola"
                       ).status == pilots.FAILS


def test_an_old_record_gates_on_its_score_only_where_that_score_is_an_accuracy(gated) -> None:
    old_mcc = _without(NEW_PILOT, "chosen_accuracy")  # MCC 0.12 vs a majority share: not comparable
    g = pilots.gate(gated, {"lr_pilot_scratch_cola": old_mcc}, "scratch", "cola")
    assert g.status == pilots.UNDECIDED and "mcc, not an accuracy" in g.text, g.text
    old_acc = {**old_mcc, "task": "sst2", "metric": "acc", "chosen_score": 0.62,
               "dev_majority": 0.606}
    g = pilots.gate(gated, {"lr_pilot_scratch_sst2": old_acc}, "scratch", "sst2")
    assert g.status == pilots.FAILS and "accuracy 62.0" in g.text, g.text
    v1 = {"variant": "scratch", "task": "sst2", "grid": [6.25e-5, 2.5e-4],  # study v1/v2
          "dev_scores": {"6.25e-05": 0.606, "0.00025": 0.62}, "chosen_lr": 2.5e-4,
          "dev_majority": 0.55}
    assert pilots.gate(gated, {"lr_pilot_scratch_sst2": v1}, "scratch", "sst2"
                       ).status == pilots.CLEARS
    assert pilots.gate(gated, {"lr_pilot_scratch_sst2": _without(v1, "dev_majority")},
                       "scratch", "sst2").status == pilots.UNDECIDED


def _table5(tmp_path: Path, scratch_init: bool = False, pretrain_seeds: tuple[int, ...] = (0,)
            ) -> dict[str, Any]:
    """Fine-tuning records of full and scratch on SST-2, one per pre-training seed, 3 runs
    each; the scratch records marked `init: scratch` when scratch_init."""
    metrics = {}
    for p in pretrain_seeds:
        for variant, acc in (("full", [0.85, 0.8, 0.9]), ("scratch", [0.6, 0.62, 0.6])):
            root = tmp_path / f"{variant}{p}"
            root.mkdir()
            rec = preds_json(root, variant, "sst2", acc, 400)
            rec.update(pretrain_seed=p, seeds=[0, 1, 2],
                       init="scratch" if variant == "scratch" and scratch_init else "pretrained")
            stem = "finetune_sst2" if variant == "full" else "finetune_scratch_sst2"
            metrics[f"{stem}_p{p}"] = rec
    return metrics


def test_a_pilot_record_that_predates_the_gate_is_not_evaluable_never_untestable(
        make_params, tmp_path: Path) -> None:
    """The committed v2 pilot records have no dev_majority: (a) prints no estimate, and says
    the gate is not evaluable, not "untestable at this budget" (nobody measured that), even
    against a flagged arm."""
    metrics = _table5(tmp_path)
    for path in metrics["finetune_scratch_sst2_p0"]["predictions"]["test"]:
        df = pd.read_parquet(path)
        df["prediction"] = 1  # a constant predictor: flagged
        df.to_parquet(path)
    metrics["lr_pilot_scratch_sst2"] = {
        "variant": "scratch", "task": "sst2", "grid": [6.25e-5, 2.5e-4, 1e-3], "metric": "acc",
        "dev_scores": {"0.00025": 0.62, "0.001": 0.606, "6.25e-05": 0.606}, "chosen_lr": 2.5e-4}
    params = make_params({"report": {"bootstrap_samples": 200, "confirmatory_tasks": ["sst2"],
                                     "gate_margins": {"sst2": 0.03}}})
    f = findings.row_finding(params, metrics, "a", "pre-training helps", "full", "scratch")
    assert f.verdict == NOT_EVALUABLE and f.flagged, f.line
    assert UNTESTABLE not in f.line and f.statistic == "n/a" and "points over" not in f.line
    assert "the pilot record predates the gate: no dev_majority" in f.gate
    metrics["lr_pilot_scratch_sst2"]["dev_majority"] = 0.606  # 62.0 < 60.6 + 3: measured
    f = findings.row_finding(params, metrics, "a", "pre-training helps", "full", "scratch")
    assert f.verdict == UNTESTABLE, f.line


def test_the_pilot_table_shows_the_grid_the_choice_and_the_paper_recipe(gated) -> None:
    lines = pilots.pilot_section(gated, {"lr_pilot_scratch_cola": NEW_PILOT})
    header = lines[0]
    assert "| lr grid | warm-up grid |" in header and "paper recipe (never chosen)" in header
    assert "score per lr" not in header and "chosen lr" not in header
    row = lines[2]
    assert row.startswith("| Transformer w/o pre-training | cola | 6.25e-05, 0.0005 | 0.002, "
                          "0.1 | lr 6.25e-05, warm-up 0.002: 0.0, ")
    assert ("| lr 0.0005, warm-up 0.1 ⚑ lr and warm-up at grid edge | 75.0 | lr 6.25e-05, "
            "warm-up 0.002: 3.0 | 69.0 | clears |") in row
    text = " ".join(lines)
    assert "⚑: the choice is the smallest or largest value of its grid" in text
    assert "biased towards clearing" in text and "in accuracy" in text


def test_an_edge_choice_is_flagged_per_grid_from_the_record_or_its_grids(gated) -> None:
    inside = {**NEW_PILOT, "grid": [6.25e-5, 5e-4, 1e-3], "warmup_grid": [0.002, 0.1, 0.2]}
    assert pilots.grid_edges(inside) == []
    assert pilots.grid_edges({**inside, "chosen_lr": 1e-3}) == ["lr"]
    assert pilots.grid_edges({**inside, "chosen_warmup": 0.002}) == ["warm-up"]
    assert pilots.grid_edges({**inside, "warmup_grid": [0.1]}) == ["warm-up"]  # one value
    assert pilots.grid_edges({**inside, "lr_at_edge": True}) == ["lr"]  # the record says so
    row = pilots.pilot_section(gated, {"lr_pilot_scratch_cola": inside})[2]
    assert pilots.EDGE not in row


def test_the_pilot_accuracy_matches_predictions_to_labels_by_id() -> None:
    dev = pd.DataFrame({"id": ["a", "b", "c", "d"], "label": [0, 1, 1, 0]})
    preds = pd.DataFrame({"id": ["d", "c", "b", "a"], "prediction": [0, 1, 0, 1]})  # 2 right
    assert pilot_accuracy(TASKS["cola"], preds, dev) == pytest.approx(0.5)
    assert pilot_accuracy(TASKS["stsb"], preds, dev) is None  # regression: no accuracy


def test_the_seed_term_counts_a_from_scratch_arms_runs_once_per_fine_tuning_seed() -> None:
    """design_sd.seed is the sd of a per-run arm difference: each arm carries half of its
    variance over its own runs, P F for a pre-trained arm and F for a from-scratch one."""
    sd, p, f = 0.02, 2, 3
    assert stats.seed_term(sd, p, f) == pytest.approx(sd ** 2 / (p * f))
    assert stats.seed_term(sd, p, f, 1) == pytest.approx(sd ** 2 / 2 / (p * f) + sd ** 2 / 2 / f)
    assert stats.seed_term(sd, 1, f, 1) == pytest.approx(stats.seed_term(sd, 1, f))  # P = 1
    se = stats.design_variance(0.01, sd, 0.7, p, f, 872, 1, scratch_arms=1).se
    assert se == pytest.approx((0.01 ** 2 / p + stats.seed_term(sd, p, f, 1) + 0.49 / 872)
                               ** 0.5)
    with pytest.raises(ValueError, match="scratch_arms"):
        stats.seed_term(sd, p, f, 3)


def test_finding_a_prints_the_mde_and_power_of_its_from_scratch_arm(make_params,
                                                                    tmp_path: Path) -> None:
    params = make_params({"report": {"bootstrap_samples": 200, "confirmatory_tasks": ["sst2"],
                                     "design_sd": {"pretrain": 0.016, "seed": 0.08,
                                                   "accuracy": 0.6}}})
    metrics = _table5(tmp_path, scratch_init=True, pretrain_seeds=(0, 1))
    f = findings.row_finding(params, metrics, "a", "pre-training helps", "full", "scratch")
    assert "over 6 runs (2 pre-training x 3 fine-tuning seeds" in f.line
    n = float(metrics["finetune_sst2_p0"]["n_eval"])
    scratch, pooled = (findings.row_mde(params, 2, 3, n, 1, scratch_arms=k) for k in (1, 0))
    assert f"{100 * scratch:.1f}" != f"{100 * pooled:.1f}"
    assert f.mde.startswith(f"{100 * scratch:.1f} points;"), f.line
    gap = (findings.paper_gap(params, "full", "scratch", ["sst2"]) or {})["sst2"]
    power = stats.power(gap, findings.row_variance(params, 2, 3, n, 1, 1))
    assert f"(SST2 +7.3 points): {100 * power:.0f} %." in f.line
    # 2 x 3 seeds at a seed sd of 8 points: far below 80 % power at the declared 4 points
    at = stats.power(0.04, findings.row_variance(params, 2, 3, n, 1, 1))
    assert at < 0.8
    assert (f": {f.verdict}.** (underpowered: {100 * at:.0f} % power at the declared 4.0 "
            "points, below the plan's 80 %)") in f.line
    assert f.mde.endswith(f"; power at the declared 4.0 points: {100 * at:.0f} %")


def test_a_design_with_the_plans_power_is_not_called_underpowered(make_params,
                                                                  tmp_path: Path) -> None:
    params = make_params({"report": {"bootstrap_samples": 200, "confirmatory_tasks": ["sst2"],
                                     "declared_effect": 0.5,
                                     "design_sd": {"pretrain": 0.001, "seed": 0.001,
                                                   "accuracy": 0.6}}})
    f = findings.row_finding(params, _table5(tmp_path, scratch_init=True, pretrain_seeds=(0, 1)),
                             "a", "pre-training helps", "full", "scratch")
    assert "underpowered" not in f.line and "power at the declared 50.0 points: 100 %" in f.mde
