"""The report's curves from hand-made records (no training): the compute curve's slope is
fitted after warm-up only, step 0 vs the final checkpoint is its own contrast, a
from-scratch arm's repeats over pre-training seeds count once without prediction files, and
the report works with no curve task."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gpt1 import stats
from gpt1.report import curves
from tests.helpers.report_metrics import preds_json

STEPS = {0: [0.5, 0.52, 0.5], 2: [0.7, 0.7, 0.72], 10: [0.7, 0.71, 0.7],
         100: [0.71, 0.72, 0.73], 1000: [0.74, 0.73, 0.75]}
"""Pre-training step -> per-run accuracy: a jump from step 0, then a gentle rise."""


@pytest.fixture
def curve_params(make_params):
    return make_params({"report": {"bootstrap_samples": 300},
                        "pretrain": {"zero_shot_checkpoints": len(STEPS)},
                        "curves": {"tasks": ["sst2"], "ns": [250], "arms": ["full", "scratch"],
                                   "compute_n": 100, "checkpoints": list(range(len(STEPS)))}})


def _compute_records(tmp_path: Path) -> dict[str, Any]:
    metrics = {}
    for k, (step, acc) in enumerate(STEPS.items()):
        root = tmp_path / f"step{step}"
        root.mkdir()
        rec = preds_json(root, "full", "sst2", acc, 400)
        rec.update(pretrain_seed=0, seeds=[0, 1, 2], pretrain_step=step, init="pretrained")
        metrics[f"curve_step_sst2_{k}_p0"] = rec
    return metrics


def test_the_slope_is_fitted_after_warm_up_and_step_0_is_its_own_contrast(
        curve_params, tmp_path: Path) -> None:
    """Tiny preset: warm-up ends at step 4, so steps 0 and 2 are left out of the slope (at
    x near 0 they would dominate it); step 0 vs the final checkpoint is reported apart."""
    assert curve_params.pretrain.warmup_steps == 4
    metrics = _compute_records(tmp_path)
    b, steps = curves.compute_slope(curve_params, metrics, "sst2")
    assert steps == [10, 100, 1000] and b is not None
    xs = np.log10(steps)
    ys = [float(np.mean(STEPS[s])) for s in steps]
    assert b.ci.estimate == pytest.approx(float(np.polyfit(xs, ys, 1)[0]))
    jump, last = curves.compute_jump(curve_params, metrics, "sst2")
    assert last == 1000 and jump is not None
    assert jump.ci.estimate == pytest.approx(np.mean(STEPS[1000]) - np.mean(STEPS[0]))
    assert jump.ci.low > 0  # a 23-point jump on 400 examples
    text = "\n".join(curves.curves_section(curve_params, metrics))
    assert "at or after the end of warm-up (step 4)" in text
    assert "3 checkpoints (steps 10, 100, 1,000)" in text
    assert "Step 0 (the random init) vs the final checkpoint (step 1,000)" in text
    assert f"{100 * jump.ci.estimate:.1f} points, 95 % CI" in text
    # step 0 scores the majority share: flagged, and the contrast against it says so
    assert "It compares against a flagged point: step 0 is flagged (CI not above majority" \
        in text
    flags = next(line for line in text.splitlines() if line.startswith("Flags (compute curve"))
    assert "step 0: CI not above majority 50.0" in flags and "step 10: " not in flags


def test_a_flagged_checkpoint_is_marked_and_left_out_of_the_slope(curve_params,
                                                                  tmp_path: Path) -> None:
    """A checkpoint whose runs answer at the majority share (step 100 here) is flagged by the
    findings' rule: marked in the table, named in the flags line, and the slope is fitted
    over the unflagged checkpoints only (a slope through a non-learning point would say
    "held" about a recipe that did not learn)."""
    metrics = _compute_records(tmp_path)
    root = tmp_path / "collapsed"
    root.mkdir()
    rec = preds_json(root, "full", "sst2", [0.5, 0.5, 0.5], 400)
    rec.update(pretrain_seed=0, seeds=[0, 1, 2], pretrain_step=100, init="pretrained")
    metrics["curve_step_sst2_3_p0"] = rec
    points = {p.x: p for p in curves.compute_curve(curve_params, metrics, "sst2")}
    assert points[100].flags and not points[1000].flags and not points[10].flags
    b, steps = curves.compute_slope(curve_params, metrics, "sst2")
    assert steps == [10, 1000] and b is not None
    assert b.ci.estimate == pytest.approx(
        float(np.polyfit(np.log10(steps), [np.mean(STEPS[s]) for s in steps], 1)[0]))
    text = "\n".join(curves.curves_section(curve_params, metrics))
    assert f"step 100: {curves._band(points[100])}" in text and curves.FLAG_MARK in text
    assert "flagged and left out: step 100" in text
    assert "2 checkpoints (steps 10, 1,000)" in text


def test_without_a_step_0_checkpoint_the_contrast_is_not_run(curve_params,
                                                             tmp_path: Path) -> None:
    metrics = {k: m for k, m in _compute_records(tmp_path).items() if m["pretrain_step"] > 0}
    assert curves.compute_jump(curve_params, metrics, "sst2") == (None, None)
    text = "\n".join(curves.curves_section(curve_params, metrics))
    assert "Step 0 vs the final checkpoint: not run" in text


def test_a_scratch_arm_without_prediction_files_counts_once_per_fine_tuning_seed(
        curve_params) -> None:
    """Its records of two pre-training seeds repeat the same 3 runs: 3 runs, not 6."""
    metrics = {}
    for p in (0, 1):
        metrics[f"curve_n_sst2_250_scratch_p{p}"] = {
            "task": "sst2", "init": "scratch", "pretrain_seed": p, "seeds": [0, 1, 2],
            "scores": {"acc": {"mean": 0.62, "per_seed": [0.6, 0.62, 0.64]}}}
        metrics[f"curve_n_sst2_250_full_p{p}"] = {
            "task": "sst2", "init": "pretrained", "pretrain_seed": p, "seeds": [0, 1, 2],
            "scores": {"acc": {"mean": 0.7 + 0.02 * p, "per_seed": [0.7 + 0.02 * p] * 3}}}
    points = curves.label_curve(curve_params, metrics, "sst2")
    (scratch,), (full,) = points["scratch"], points["full"]
    assert scratch.runs == 3 and scratch.mean == pytest.approx(0.62) and scratch.low is None
    assert full.runs == 6 and full.mean == pytest.approx(0.71)


def test_the_report_works_without_a_curve_task(make_params, tmp_path: Path) -> None:
    params = make_params({"curves": {"tasks": []}})
    metrics = _compute_records(tmp_path)
    assert curves.curves_section(params, metrics) == []
    out = tmp_path / "curves.png"
    curves.plot_curves(params, metrics, out)
    assert out.read_bytes()[:4] == b"\x89PNG"


DOSES = {0: [0.5, 0.5, 0.5], 1024: [0.6, 0.62, 0.6], 2048: [0.66, 0.65, 0.67],
         4096: [0.72, 0.71, 0.73]}
"""Pre-training tokens -> per-run accuracy: from scratch at the majority share (dose 0), then
a rise over the two budgets of their own and the main run (pretrain.max_tokens, 4,096)."""


@pytest.fixture
def dose_params(make_params):
    return make_params({"report": {"bootstrap_samples": 300},
                        "ablations": {"pilot": {"variants": ["full", "scratch"]}},
                        "curves": {"tasks": [], "dose_tokens": [1024, 2048],
                                   "dose_tasks": ["sst2"]}})


def _dose_records(tmp_path: Path, doses: dict[int, list[float]]) -> dict[str, Any]:
    """Dose 0 as Table 5's scratch record, each budget a curve_dose record, the main run as
    Table 5's full record, each run recording the (lr, warm-up) it used."""
    metrics = {}
    for tokens, acc in doses.items():
        root = tmp_path / f"dose{tokens}"
        root.mkdir()
        scratch = tokens == 0
        stem = ("finetune_scratch_sst2" if scratch else "finetune_sst2" if tokens == 4096
                else f"curve_dose_sst2_{tokens}")
        rec = preds_json(root, "scratch" if scratch else "full", "sst2", acc, 400)
        rec.update(pretrain_seed=0, seeds=[0, 1, 2], lr=1e-4 * (1 + tokens / 1024),
                   warmup_frac=0.1, init="scratch" if scratch else "pretrained")
        metrics[f"{stem}_p0"] = rec
    return metrics


def test_the_dose_curve_reads_table_5_and_its_own_runs_and_fits_its_slope_over_budgets(
        dose_params, tmp_path: Path) -> None:
    """Dose 0 is Table 5's from-scratch row (flagged here: at the majority share), the top
    dose the main run's full row; the slope over log10(tokens) runs through the unflagged
    pre-trained doses only."""
    metrics = _dose_records(tmp_path, DOSES)
    points = curves.dose_curve(dose_params, metrics, "sst2")
    assert [p.x for p in points] == [0, 1024, 2048, 4096]
    assert points[0].flags and not any(p.flags for p in points[1:])
    b, used = curves.dose_slope(dose_params, metrics, "sst2")
    assert used == [1024, 2048, 4096] and b is not None
    assert b.ci.estimate == pytest.approx(float(np.polyfit(
        np.log10(used), [np.mean(DOSES[x]) for x in used], 1)[0]))
    text = "\n".join(curves.curves_section(dose_params, metrics))
    assert text.startswith("## Where pre-training can show")  # no curves.tasks: dose alone
    assert f"| from scratch (dose 0) | 0 | lr 0.0001, warm-up 0.1 | {curves._band(points[0])}" \
        in text and curves.FLAG_MARK in curves._band(points[0])
    assert "| main run (`pretrain`) | 4,096 | lr 0.0005, warm-up 0.1 |" in text
    assert "3 doses (1,024, 2,048, 4,096 tokens)" in text
    assert f"**{stats.superiority(b)}**" in text and "flagged and left out" not in text
    out = tmp_path / "curves.png"
    curves.plot_curves(dose_params, metrics, out)
    assert out.read_bytes()[:4] == b"\x89PNG"


def test_a_flagged_dose_is_marked_and_no_slope_is_held_on_it(dose_params,
                                                             tmp_path: Path) -> None:
    """A budget whose runs answer at the majority share is flagged and left out of the slope;
    with one unflagged pre-trained dose left the slope is not run and nothing is held."""
    metrics = _dose_records(tmp_path, {**DOSES, 2048: [0.5, 0.5, 0.5]})
    b, used = curves.dose_slope(dose_params, metrics, "sst2")
    assert used == [1024, 4096] and b is not None
    text = "\n".join(curves.curves_section(dose_params, metrics))
    assert "flagged and left out: 2,048 tokens" in text and "2 doses (1,024, 4,096" in text
    flags = next(line for line in text.splitlines() if line.startswith("Flags (dose curve"))
    assert "2,048 tokens: CI not above majority 50.0" in flags and "1,024 tokens" not in flags
    (tmp_path / "one").mkdir()
    metrics = _dose_records(tmp_path / "one", {**DOSES, 1024: [0.5] * 3, 2048: [0.5] * 3})
    assert curves.dose_slope(dose_params, metrics, "sst2") == (None, [4096])
    text = "\n".join(curves.curves_section(dose_params, metrics))
    assert "Dose slope test over the unflagged pre-trained doses" in text
    assert "not run (1 such doses" in text and "held" not in text
