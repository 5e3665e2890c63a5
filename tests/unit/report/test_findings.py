"""Finding (a)'s endpoints: with a fresh split (tasks.fresh_examples) scored by both rows, the
verdict is on it (primary), the test split of the same tasks is secondary and the other
confirmatory tasks exploratory; without one, (a) is the confirmatory tasks' mean as before."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gpt1.report import design, document, findings
from gpt1.report.estimates import pts
from tests.helpers.report_metrics import preds_json

FRESH_N, TEST_N = 80, 60
CORRECT = {  # per fine-tuning seed: accuracy on (test, fresh)
    "full": ([0.70, 0.72, 0.74], [0.75, 0.7625, 0.80]),
    "scratch": ([0.60, 0.62, 0.60], [0.60, 0.625, 0.65]),
}


def _record(root: Path, variant: str, task: str, fresh: bool) -> dict[str, Any]:
    """A fine-tuning record as arm_run writes it: test predictions, and the fresh split's."""
    test, on_fresh = CORRECT[variant]
    out = {**preds_json(root, variant, task, test, TEST_N), "pretrain_seed": 1234,
           "seeds": [0, 1, 2], "init": "scratch" if variant == "scratch" else "pretrained"}
    if fresh:
        (root / "fresh").mkdir(exist_ok=True)
        extra = preds_json(root / "fresh", variant, task, on_fresh, FRESH_N)
        out["fresh_scores"] = extra["scores"]
        out["fresh"] = {"baselines": extra["baselines"], "n_eval": FRESH_N,
                        "log_loss": [None] * 3,
                        "scored_on": f"{FRESH_N} rows carved from the training pool (all 80)"}
        out["predictions"] = {**out["predictions"], "fresh": extra["predictions"]["test"]}
    return out


def _metrics(root: Path, fresh: bool) -> dict[str, dict[str, Any]]:
    """full and scratch on QNLI (with its fresh split when `fresh`) and SST-2 (test only)."""
    out = {}
    for task in ("qnli", "sst2"):
        (root / task).mkdir()
        for variant in ("full", "scratch"):
            stem = f"finetune_{task}" if variant == "full" else f"finetune_{variant}_{task}"
            out[stem] = _record(root / task, variant, task, fresh and task == "qnli")
    return out


@pytest.fixture
def params(make_params):
    return make_params({"ablations": {"tasks": ["cola"]}, "curves": {"tasks": ["cola"]},
                        "report": {"confirmatory_tasks": ["sst2", "qnli"]}})


def test_the_fresh_split_is_the_primary_endpoint(params, tmp_path) -> None:
    metrics = _metrics(tmp_path, fresh=True)
    found = findings.pretraining_finding(params, metrics)
    gap = np.mean(CORRECT["full"][1]) - np.mean(CORRECT["scratch"][1])
    assert found.statistic == f"{pts(gap)} pts"  # on the fresh split, not on test
    assert f"on QNLI's fresh split ({FRESH_N} rows carved from the training pool" in found.line
    mde = findings.row_mde(params, 1, 3, FRESH_N, 1, scratch_arms=1)
    assert found.mde.startswith(f"{100 * mde:.1f} points")  # the fresh split's n
    acc = {stem: np.mean(metrics[stem]["scores"]["acc"]["per_seed"])  # 60 rows: rounded
           for stem in ("finetune_qnli", "finetune_scratch_qnli")}
    test_gap = acc["finetune_qnli"] - acc["finetune_scratch_qnli"]
    secondary = found.line.split(" Secondary endpoint (")[1]
    assert secondary.startswith("QNLI: official qnli (fixture)): "
                                f"{pts(test_gap)} pts, 95 % CI")
    assert " Exploratory (SST2: official sst2 (fixture)): " in found.line
    assert "not this finding's verdict" in secondary


def test_without_a_fresh_split_a_is_the_mean_of_the_confirmatory_tasks(params, tmp_path) -> None:
    metrics = _metrics(tmp_path, fresh=False)
    found = findings.pretraining_finding(params, metrics)
    assert found == findings.row_finding(params, metrics, "a", findings.PRETRAINING_CLAIM,
                                         "full", "scratch")
    assert "on the mean of SST2, QNLI = " in found.line and "fresh" not in found.line
    assert design.design_section(params, metrics) == []  # and no seeds section


def test_the_report_prints_the_seeds_the_fresh_endpoint_needs(params, tmp_path) -> None:
    section = design.design_section(params, _metrics(tmp_path, fresh=True))
    chosen = design.choose_seeds(params, "qnli", "fresh", FRESH_N, 1)
    used_power = design.power_at(params, 1, 3, FRESH_N)
    row = next(line for line in section if line.startswith("| QNLI |"))
    assert row.startswith(f"| QNLI | fresh | {FRESH_N} | ")
    assert row.endswith(f" 3, {100 * used_power:.0f} % |")  # the F the run used, its power
    assert f"{100 * chosen.mde:.1f}" in row


def test_the_report_reads_the_fresh_split_where_the_records_have_it(params, tmp_path) -> None:
    metrics = _metrics(tmp_path, fresh=True)
    text = document.build_report(params, metrics, "fixture0hash", "figure2.png", {})
    found = findings.pretraining_finding(params, metrics)
    assert found.line in text.splitlines()
    assert "### Seeds from the MDE: the design of (a)" in text
    row = f"| finetune_qnli | fresh = {FRESH_N} rows carved from the training pool (all 80) |"
    assert row in text  # the evaluation splits name it, once (every arm scores the same rows)
    assert text.count("| fresh = ") == 1
