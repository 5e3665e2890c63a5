"""From a fixture set of metrics files the report's tables match golden text, and every
paper number in params (both presets) and in the rendered tables equals spec §3 (docs/paper.md)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from gpt1 import records
from gpt1.config import load_params
from gpt1.errors import Gpt1Error
from gpt1.report import (
    contrasts,
    curve_tests,
    document,
    figure2,
    findings,
    pilots,
    prose,
    tables,
)
from gpt1.report import plan as report_plan
from gpt1.report import runs as report_runs
from gpt1.report.estimates import Finding
from tests.helpers.repo import REPO
from tests.helpers.report_metrics import TABLE_TASKS, fixture_metrics, preds_json, task_json
from tests.helpers.spec_doc import sections, spec_text, table_rows

GOLDEN = REPO / "tests" / "assets" / "report_golden.md"
# Our column label -> (row of spec §3's task table, position in "a / b / c").
PAPER_ROWS = {
    "MNLI-m": ("MultiNLI (matched / mismatched)", 0),
    "MNLI-mm": ("MultiNLI (matched / mismatched)", 1),
    "SNLI": ("SNLI", 0), "SciTail": ("SciTail", 0), "QNLI": ("QNLI", 0), "RTE": ("RTE", 0),
    "Story Cloze": ("Story Cloze Test", 0), "RACE-m": ("RACE (middle / high / all)", 0),
    "RACE-h": ("RACE (middle / high / all)", 1), "RACE": ("RACE (middle / high / all)", 2),
    "CoLA": ("CoLA", 0), "SST2": ("SST-2", 0), "MRPC": ("MRPC", 0), "STSB": ("STS-B", 0),
    "QQP": ("QQP", 0), "GLUE": ("GLUE score", 0),
}
TABLE5_ROWS = {"full": "Transformer w/ aux LM (full)", "scratch": "Transformer w/o pre-training",
               "no_aux": "Transformer w/o aux LM", "lstm": "LSTM w/ aux LM"}


def fixture_params(make_params):
    """Repo params with the report inputs pinned, so the golden does not move with the demo."""
    return make_params({
        "paths": {"mirror_dir": "../shared/data", "tasks": "data/tasks"},
        "layers": {"tasks": ["mnli", "race"], "layers_transferred": [0, 2, 4]},
        "model": {"n_layer": 4},
        "curves": {"tasks": ["sst2"], "ns": [250, 1000], "arms": ["full", "scratch"],
                   "compute_n": 2000, "checkpoints": [0, 1, 2]},
        "report": {"plan_commit": "fixture0plan", "deviations": ["a fixture deviation"]},
    })


def test_report_matches_golden(make_params, tmp_path: Path) -> None:
    params = fixture_params(make_params)
    metrics = records.read_metrics(fixture_metrics(tmp_path))
    expected = {f"finetune_no_aux_{t}": "fixture0hash" for t in TABLE_TASKS}
    text = document.build_report(params, metrics, "fixture0hash", "figure2.png", expected)
    if os.environ.get("GPT1_UPDATE_GOLDEN") == "1":  # regenerate, review the diff, commit
        GOLDEN.write_text(text)
    assert text == GOLDEN.read_text(), "report differs from tests/assets/report_golden.md"


def test_table_cells_are_seed_statistics(make_params, tmp_path: Path) -> None:
    params = fixture_params(make_params)
    metrics = records.read_metrics(fixture_metrics(tmp_path))
    table = tables.render_table("table4", params, report_runs.variant_results(metrics, "full"))
    cola = metrics["finetune_cola"]["scores"]["mcc"]["per_seed"]
    mean = sum(cola) / 3
    sd = (sum((v - mean) ** 2 for v in cola) / 2) ** 0.5
    row = next(line for line in table.splitlines() if line.startswith("| CoLA |"))
    assert (f"| {100 * mean:.1f} ± {100 * sd:.1f} | n/a | 25.0 | 40.0 | {100 * mean - 45.4:+.1f}"
            " | 3 |") in row
    mnli = contrasts.column_cell(report_runs.variant_results(metrics, "full"),
                              params.report.columns["MNLI"], params.report.glue)
    assert mnli.missing and "dev_mismatched" in mnli.missing[0]
    assert mnli.mean == pytest.approx(metrics["finetune_mnli"]["scores"]["acc_matched"]["mean"])


def _paper_tables() -> tuple[dict[str, list[float]], dict[str, dict[str, float]],
                             dict[str, list[str]]]:
    """spec §3: task table (dataset -> numbers), Table 5 (method -> column -> number),
    and the column lists of 'Tables the report must regenerate'."""
    text = sections(spec_text())[3]
    tasks: dict[str, list[float]] = {}
    for cells in table_rows(text):
        if len(cells) == 4 and re.fullmatch(r"[\d.]+( / [\d.]+)*", cells[3]):
            tasks[cells[1]] = [float(x) for x in cells[3].split(" / ")]
    cols = next(cells for cells in table_rows(text) if cells[:2] == ["method", "Avg"])[1:]
    table5 = {}
    for cells in table_rows(text):
        if cells[0] in TABLE5_ROWS.values():
            table5[cells[0]] = dict(zip(cols, map(float, cells[1:]), strict=True))
    lists = {}
    for m in re.finditer(r"\*\*Table (\d)\*\* \([^)]*\): ([^.\n]+)\.", text):
        lists[f"table{m.group(1)}"] = [c.strip() for c in m.group(2).split(",")]
    return tasks, table5, lists


@pytest.mark.parametrize("preset", ["params.yaml", "configs/paper.yaml"])
def test_paper_numbers_equal_spec(preset: str) -> None:
    tasks, table5, lists = _paper_tables()
    assert set(tasks) == {row for row, _ in PAPER_ROWS.values()}, "spec §3 task table rows"
    cfg = load_params(REPO / preset).report
    assert set(lists) == set(cfg.paper), "spec §3 lists of Tables 2-4"
    for name, cols in cfg.paper.items():
        assert list(cols) == lists[name], name
        for label, value in cols.items():
            row, pos = PAPER_ROWS[label]
            assert value == tasks[row][pos], (name, label)
    assert set(cfg.paper_ablations) == set(TABLE5_ROWS)
    for variant, row in cfg.paper_ablations.items():
        assert cfg.row_labels[variant] == TABLE5_ROWS[variant]
        assert row == table5[TABLE5_ROWS[variant]], variant


def test_rendered_paper_column_equals_spec(make_params, tmp_path: Path) -> None:
    tasks, table5, _ = _paper_tables()
    params = fixture_params(make_params)
    text = document.build_report(params, records.read_metrics(fixture_metrics(tmp_path)),
                               "h", "f.png", {})
    seen = 0
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells[0] in PAPER_ROWS and len(cells) == 11:
            row, pos = PAPER_ROWS[cells[0]]
            assert float(cells[1]) == tasks[row][pos], cells[0]
            seen += 1
        if cells[0] in TABLE5_ROWS.values() and cells[1] == "paper":
            paper = [v for k, v in table5[cells[0]].items() if k != "Avg"]
            assert float(cells[3]) == table5[cells[0]]["Avg"]  # the published Avg, beside
            assert [float(c) for c in cells[4:]] == paper  # cells[2]: over the matched columns
            seen += 1
    assert seen == len(PAPER_ROWS) + len(TABLE5_ROWS)


def test_damaged_metrics_file_names_it(tmp_path: Path) -> None:
    (tmp_path / "finetune_cola.json").write_text("{not json")
    with pytest.raises(Gpt1Error, match="finetune_cola.json"):
        records.read_metrics(tmp_path)


def test_figure2_has_both_panels_labels_legends_and_styles(tmp_path: Path) -> None:
    """One figure, two labelled panels; a curve per task and split / task and model;
    log x on the right; Transformer solid, LSTM dashed."""
    metrics = records.read_metrics(fixture_metrics(tmp_path))
    left = figure2.layer_curves(metrics, ["mnli", "race"], [0, 2, 4])
    right = figure2.zeroshot_curves(metrics)
    fig = figure2.draw_figure2(left, right, 4)
    ax_l, ax_r = fig.axes
    assert ax_l.get_xlabel() and ax_l.get_ylabel() and ax_r.get_xlabel() and ax_r.get_ylabel()
    assert ax_r.get_xscale() == "log"
    left_labels = [t.get_text() for t in ax_l.get_legend().get_texts()]
    assert left_labels == ["MNLI dev", "MNLI train", "RACE dev", "RACE train"]
    lines = {line.get_label(): line for line in ax_r.get_lines()
             if "(" in line.get_label() and not line.get_label().startswith("chance")}
    assert len(lines) == 8 and len(ax_r.get_legend().get_texts()) == 9  # + the chance line
    assert lines["SST2 (Transformer)"].get_linestyle() == "-"
    assert lines["SST2 (LSTM)"].get_linestyle() == "--"
    assert list(lines["DPRD (LSTM)"].get_xdata()) == [1, 10, 100, 1000]
    marked = figure2.draw_figure2(left, right, 4, None,
                                  {"left": {"mnli": (0.33, 0.36)}, "right": {"sst2": 0.1}})
    labels = [[t.get_text() for t in ax.get_legend().get_texts()] for ax in marked.axes]
    assert {"MNLI chance", "MNLI majority"} <= set(labels[0])
    assert {"chance (random guess = 0)", "SST2 majority"} <= set(labels[1])
    png = tmp_path / "figure2.png"
    figure2.plot_figure2(left, right, png, 50, 4)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_files_have_every_curve_column(tmp_path: Path) -> None:
    metrics = records.read_metrics(fixture_metrics(tmp_path))
    left = figure2.layer_curves(metrics, ["mnli", "race"], [0, 2, 4])
    tables = figure2.plot_tables(left, figure2.zeroshot_curves(metrics),
                                ["sst2", "cola", "race", "dprd"])
    assert [r["layers"] for r in tables["figure2_left"]] == [0, 2, 4]
    assert tables["figure2_left"][2]["mnli_dev"] == pytest.approx(60.0)
    assert set(tables["zeroshot_lstm"][0]) == {"step", "log10_step", "sst2", "cola", "race",
                                               "dprd"}
    empty = figure2.plot_tables({"mnli": {"dev": [], "train": []}}, {}, ["sst2"])
    assert list(empty["zeroshot_transformer"][0]) == ["step", "log10_step", "sst2"]


def test_prose_says_as_in_the_paper_only_when_the_finding_held() -> None:
    """The Figure 2 sentences come from the verdicts: a rising curve whose test did not hold
    (or tested against a flagged arm) is not called "as in the paper"."""
    def finding(verdict: str, flagged: str = "") -> Finding:
        return Finding("d", "rises", verdict, "+0.1", "[0.0, 0.2]", "0.05", flagged, "")

    assert "as in the paper" in prose.compare_right(finding("held"))
    for f in (finding("inconclusive"), finding("not held"), finding("held", "scratch on SST2")):
        text = prose.compare_right(f)
        assert "as in the paper" not in text and "does not show" in text
    assert "could not be tested" in prose.compare_left(finding(findings.NO_CI))
    assert "exploratory: no verdict" in prose.compare_right(finding("held"))


def _table5_rows(text: str) -> dict[str, list[str]]:
    """Table 5 line label (row label + paper/ours) -> its cells."""
    out, row = {}, ""
    for line in text.split("### Table 5")[1].split("## Findings")[0].splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) > 2 and cells[1] in ("paper", "ours", "95 % CI"):
            row = cells[0] or row
            out[f"{row}/{cells[1]}"] = cells[2:]
    return out


def test_table5_avg_uses_identical_columns(make_params, tmp_path: Path) -> None:
    """A row missing a cell (no_aux has no QQP) removes that column from EVERY row's Avg,
    the paper's included; adding an LSTM row with only CoLA and SST-2 shrinks the set again."""
    params = fixture_params(make_params)
    metrics = records.read_metrics(fixture_metrics(tmp_path))
    cols = ["CoLA", "SST2", "MRPC", "STSB", "MNLI", "QNLI", "RTE"]
    assert tables.matched_columns(params, metrics) == cols
    rows = _table5_rows(tables.render_ablations(params, metrics) + "\n## Findings")
    cfg = params.report
    for variant, label in TABLE5_ROWS.items():
        if variant == "lstm":
            assert rows[f"{label}/ours"][0] == "n/a"  # not run: no Avg
            continue
        res = report_runs.variant_results(metrics, variant)
        per_col = [np.mean(contrasts.seed_mean(contrasts.column_values(res, cfg.columns[c],
                                                                  cfg.glue)[0])) for c in cols]
        assert rows[f"{label}/ours"][0].split(" ")[0] == f"{100 * np.mean(per_col):.1f}"
        paper = np.mean([cfg.paper_ablations[variant][c] for c in cols])
        assert rows[f"{label}/paper"][0] == f"{paper:.1f}"
    for task in ("cola", "sst2"):
        (tmp_path / f"finetune_lstm_{task}.json").write_text(json.dumps(
            task_json(task, "lstm", 0.2, 3)))
    metrics = records.read_metrics(tmp_path)
    assert tables.matched_columns(params, metrics) == ["CoLA", "SST2"]


@pytest.mark.parametrize(("full", "scratch", "word"), [
    ([0.85, 0.8, 0.9], [0.6, 0.62, 0.6], "held"),
    ([0.6, 0.62, 0.6], [0.85, 0.8, 0.9], "not held"),
    ([0.7, 0.72, 0.7], [0.7, 0.71, 0.7], "inconclusive"),
])
def test_finding_a_verdict_from_the_run_level_bootstrap(make_params, tmp_path: Path, full,
                                                        scratch, word) -> None:
    """The verdict of (a) follows the hierarchical CI of the difference of the confirmatory
    mean; its estimate is the difference of the two rows' means; the line names its test,
    margin and MDE."""
    params = make_params({"report": {"bootstrap_samples": 200,
                                     "confirmatory_tasks": ["sst2", "cola"],
                                     "gate_margins": {"sst2": 0.03, "cola": 0.03}}})
    metrics = {}
    for variant, acc in (("full", full), ("scratch", scratch)):
        for task in ("sst2", "cola"):
            stem = "finetune_" + (task if variant == "full" else f"{variant}_{task}")
            metrics[stem] = preds_json(tmp_path, variant, task, acc, 400)
    f = findings.row_finding(params, metrics, "a", "pre-training helps", "full", "scratch")
    assert f.verdict == word and f": {word}.**" in f.line and not f.flagged
    avg = {v: np.mean([metrics[s]["scores"][k]["mean"] for s in metrics for k in
                       metrics[s]["scores"] if metrics[s]["variant"] == v])
           for v in ("full", "scratch")}
    assert f"= {100 * (avg['full'] - avg['scratch']):+.1f} points over 3 runs" in f.line
    assert "Test: superiority" in f.line and "margin: none" in f.line and "MDE" in f.line
    assert "Holm" in f.line
    assert "to find the paper's own gap (SST2 +7.3, COLA +26.5; mean +16.9 points): " in f.line


def test_a_test_against_a_constant_predictor_is_inconclusive(make_params, tmp_path: Path
                                                             ) -> None:
    """An arm that always predicts one class is flagged in its table and in the finding, with
    its degenerate runs counted; a test against it is inconclusive whatever its CI says (no
    "held vs a non-learning baseline") and does not reproduce the paper."""
    params = make_params({"report": {"bootstrap_samples": 200, "confirmatory_tasks": ["sst2"]}})
    full = preds_json(tmp_path, "full", "sst2", [0.85, 0.8, 0.9], 400)
    const = preds_json(tmp_path, "scratch", "sst2", [0.5, 0.5, 0.5], 400)
    for path in const["predictions"]["test"]:  # always class 1: right on half the examples
        df = pd.read_parquet(path)
        df["prediction"] = 1
        df.to_parquet(path)
    metrics = {"finetune_sst2": full, "finetune_scratch_sst2": const}
    f = findings.row_finding(params, metrics, "a", "pre-training helps", "full", "scratch")
    assert f.verdict == "inconclusive (flagged arm)" and f.flagged and not f.reproduces
    assert "The test alone says held" in f.line and "non-learning baseline" not in f.line
    assert "Transformer w/o pre-training on SST2: 3 of 3 runs >= 95 % one class (p0 f0, " \
        "p0 f1, p0 f2)" in f.line
    assert "Transformer w/ aux LM (full) on SST2: 0 of 3 runs >= 95 % one class" in f.line
    assert "(conditional on the 1 pre-trained model)" in f.ci
    res = report_runs.variant_results(metrics, "scratch")
    preds = contrasts.row_predictions(res)
    ci = contrasts.contrast([preds], [1.0], [["sst2.acc"]], params)
    flags = contrasts.cell_flags(res, ["sst2.acc"], preds, ci, params)
    assert any("one class" in x for x in flags) and any("majority" in x for x in flags)
    assert contrasts.column_cell(res, ["sst2.acc"], {}).delta(91.3, flags) == "— (flagged)"
    table = tables.render_ablations(params, metrics)
    assert "— (flagged)" in table and "| flag |" in table


def _pilot(variant: str, best: float, majority: float | None) -> dict[str, Any]:
    """An lr-pilot record whose chosen configuration scored `best` on a carved split of
    majority share `majority` (None: an older record without it)."""
    out = {"variant": variant, "task": "sst2", "grid": [6.25e-5, 5e-4],
           "dev_scores": {"6.25e-05": 0.5, "0.0005": best}, "chosen_lr": 5e-4,
           "dev_split": "500 examples carved from the training pool"}
    return out if majority is None else {**out, "dev_majority": majority}


@pytest.mark.parametrize(("best", "majority", "verdict"), [
    (0.62, 0.606, "untestable at this budget"),  # the study v2 scratch pilot: 62.0 < 60.6 + 3
    (0.65, 0.606, "held"),
    (0.99, None, "gate not evaluable: the pilot records predate the gate"),  # no majority
])
def test_the_gate_decides_from_the_pilot_records_alone(make_params, tmp_path: Path, best,
                                                       majority, verdict) -> None:
    """A baseline whose best pilot configuration does not score its pilot split's majority +
    the margin (SST-2: 3 points) makes (a) "untestable at this budget", with no estimate, even
    though the scored runs show a large difference; the gate and every arm's pilot row are
    printed; an arm that is not piloted is not gated."""
    params = make_params({"report": {"bootstrap_samples": 200, "confirmatory_tasks": ["sst2"]}})
    metrics = {"finetune_sst2": preds_json(tmp_path, "full", "sst2", [0.85, 0.8, 0.9], 400),
               "finetune_scratch_sst2": preds_json(tmp_path, "scratch", "sst2",
                                                    [0.6, 0.62, 0.6], 400),
               "lr_pilot_scratch_sst2": _pilot("scratch", best, majority),
               "lr_pilot_no_aux_sst2": {"variant": "no_aux", "task": "sst2",
                                        "not_piloted": "the recipe's lr"}}
    f = findings.row_finding(params, metrics, "a", "pre-training helps", "full", "scratch")
    testable = verdict == "held"
    assert f.verdict == verdict, f.line
    assert ("points over" in f.line) == testable and (f.statistic == "n/a") != testable
    assert "to find the paper's own gap (SST2 +7.3 points): " in f.line  # a design property
    assert "Transformer w/o pre-training on SST2:" in f.gate
    assert ("needs majority 60.6 + 3.0 = 63.6" in f.gate) == (majority is not None)
    lines = pilots.pilot_section(params, metrics)
    assert any(line.startswith("| Transformer w/o pre-training | sst2 | 6.25e-05, 0.0005 | "
                               "n/a | 6.25e-05: 50.0, 0.0005: ") for line in lines)
    assert any("| Transformer w/o aux LM | sst2 | not piloted" in line for line in lines)
    no_aux = pilots.gate(params, metrics, "no_aux", "sst2")
    assert no_aux.status == "not gated"


def test_a_scratch_arm_counts_once_per_fine_tuning_seed(make_params, tmp_path: Path) -> None:
    """The from-scratch arm has no pre-training seed: its records of two pre-training seeds
    repeat 3 runs, which count as 3 in its flags and its Table 5 cell, not 6."""
    params = make_params({"report": {"bootstrap_samples": 200}})
    metrics = {}
    for p in (0, 1):
        rec = preds_json(tmp_path, "scratch", "sst2", [0.5, 0.5, 0.5], 400)
        rec.update(pretrain_seed=p, seeds=[0, 1, 2], init="scratch")
        metrics[f"finetune_scratch_sst2_p{p}"] = rec
    res = report_runs.variant_results(metrics, "scratch")
    runs = contrasts.row_predictions(res)["sst2"]
    assert len(runs) == 6 and len(contrasts.distinct_runs(res["sst2"], runs)) == 3
    assert contrasts.run_text(res, "sst2", runs, params).startswith("0 of 3 runs")
    cell = contrasts.column_cell(res, ["sst2.acc"], {})
    assert cell.seeds == 3 and cell.mean == pytest.approx(0.5)


def test_a_regression_task_counts_no_one_class_runs(make_params, tmp_path: Path) -> None:
    """The one-class count is a classification check: arm_flags skips a regression task
    (STS-B), and so does the text listing the runs."""
    params = make_params({})
    rec = preds_json(tmp_path, "full", "sst2", [0.5, 0.5, 0.5], 400)
    res = {"stsb": rec}
    runs = contrasts.row_predictions({"sst2": rec})["sst2"]
    assert contrasts.run_text(res, "stsb", runs, params) == (
        "runs not checked for one class (a regression task)")
    assert contrasts.run_text({"sst2": rec}, "sst2", runs, params).startswith("0 of 3 runs")


def _zeroshot_json(root: Path, model: str, correct: dict[int, float], n: int,
                   shift: dict[int, int] | None = None) -> dict[str, Any]:
    """A zeroshot metrics JSON with per-example SST-2 predictions: right on correct[step] * n
    examples at each checkpoint step (a run of them starting at example shift[step], default
    0, wrapping around)."""
    labels = np.arange(n) % 2
    frames, rows = [], []
    for step, frac in correct.items():
        start = (shift or {}).get(step, 0)
        pred = np.where((np.arange(n) - start) % n < round(frac * n), labels, 1 - labels)
        frames.append(pd.DataFrame({"step": step, "task": "sst2", "example": range(n),
                                    "label": labels, "prediction": pred}))
        norm = (frac - 0.5) / (0.932 - 0.5)
        rows.append({"step": step, "scores": {"sst2": frac}, "normalised": {"sst2": norm}})
    path = root / f"zs_{model}.parquet"
    pd.concat(frames).to_parquet(path)
    return {"body": model, "checkpoints": rows, "predictions": str(path),
            "norm": {"sst2": {"metric": "acc", "random": 0.5, "sota": 0.932}}}


def test_finding_d_tests_the_composite_and_its_slope_after_warm_up(make_params,
                                                                   tmp_path: Path) -> None:
    """(d) held = final composite above random AND a positive slope over log(step) from the
    end of warm-up (tiny preset: step 4): rising held, falling not held, flat inconclusive."""
    params = make_params({"report": {"bootstrap_samples": 200}})
    cases = {"rising": ({1: 0.5, 10: 0.6, 100: 0.7, 1000: 0.8}, None, "held"),
             "falling": ({1: 0.5, 10: 0.8, 100: 0.7, 1000: 0.6}, None, "not held"),
             "noisy": ({1: 0.5, 10: 0.6, 1000: 0.605}, {1000: 40}, "inconclusive")}
    for name, (correct, shift, word) in cases.items():
        (tmp_path / name).mkdir()
        metrics = {"zeroshot": _zeroshot_json(tmp_path / name, "transformer", correct, 400,
                                              shift)}
        f = curve_tests.zeroshot_finding(params, metrics, figure2.zeroshot_curves(metrics))
        assert f.verdict == word, name
        assert "slope 95 % CI" in f.line and "Exploratory, no verdict" in f.line
    pooled = {}  # two pre-training runs (one record each) give one CI over both
    for pretrain_seed in (1, 2):
        (tmp_path / f"p{pretrain_seed}").mkdir()
        pooled[f"zeroshot_p{pretrain_seed}"] = {**_zeroshot_json(
            tmp_path / f"p{pretrain_seed}", "transformer",
            {1: 0.5, 10: 0.6, 100: 0.7, 1000: 0.8}, 400), "pretrain_seed": pretrain_seed}
    f = curve_tests.zeroshot_finding(params, pooled, figure2.zeroshot_curves(pooled))
    assert f.verdict == "held" and "2 pre-training seed(s)" in f.line, f.line
    metrics = {"zeroshot": _zeroshot_json(tmp_path, "transformer",
                                          {1: 0.5, 10: 0.6, 100: 0.7, 1000: 0.8}, 400)}
    bands = figure2.zeroshot_bands(params, metrics)
    (step, low, high) = bands["transformer"]["sst2"][-1]
    assert step == 1000 and low < 0.3 / 0.432 < high
    fig = figure2.draw_figure2({}, figure2.zeroshot_curves(metrics), 4,
                              {"left": {}, "right": bands})
    assert len(fig.axes[1].collections) == 1  # one shaded band per curve


def test_read_metrics_merges_each_sidecar_under_its_scores(tmp_path: Path) -> None:
    (tmp_path / "finetune_cola.json").write_text('{"scores": {"mcc": {"mean": 0.4}}}')
    (tmp_path / "finetune_cola.info.json").write_text(
        '{"eval_split": "test = x", "scores": "stale", "config_hash": "h"}')
    (tmp_path / "pretrain.json").write_text('{"val_ppl": 9.5}')  # no sidecar: scores alone
    assert records.read_metrics(tmp_path) == {
        "finetune_cola": {"eval_split": "test = x", "config_hash": "h",
                          "scores": {"mcc": {"mean": 0.4}}},
        "pretrain": {"val_ppl": 9.5}}
    (tmp_path / "pretrain.info.json").write_text("{broken")
    with pytest.raises(Gpt1Error, match="pretrain.info.json"):
        records.read_metrics(tmp_path)


def test_wall_times_are_listed_in_pipeline_order_with_their_sum() -> None:
    metrics = {"finetune_sst2": {"wall_seconds": 90.0}, "layers_mnli_0": {"wall_seconds": 5.5},
               "pretrain": {"wall_seconds": 600.0}, "pretrain_lstm": {"wall_seconds": 30.0},
               "train_bpe": {"vocab_size": 8003}}
    lines = document.wall_times(metrics)
    rows = [line.split("|")[1].strip() for line in lines if line.startswith("| ")]
    assert rows == ["stage record", "pretrain", "pretrain_lstm", "finetune_sst2",
                    "layers_mnli_0", "**sum**"]
    assert "| **sum** | **12:06** | 725.5 |" in lines
    assert lines[-1].endswith("Records without a wall time: train_bpe.")
    assert document.wall_times({"pretrain": {"val_ppl": 3.0}}) == []


def test_report_is_headed_by_the_command_that_regenerates_it(make_params, tmp_path: Path
                                                               ) -> None:
    for preset, command in (("demo", "`dvc repro`"),
                            ("study", "`cp configs/cpu-study.yaml params.yaml && dvc exp run"),
                            ("gpu-study", "`cp configs/gpu-study.yaml params.yaml && dvc exp")):
        params = make_params({"report": {"preset": preset}})
        text = document.build_report(params, {}, "h", "figure2.png", {})
        assert command in text.splitlines()[2], preset


def test_a_stage_record_carries_its_wall_time_from_the_stage_context(make_params) -> None:
    import time

    from gpt1.recording import record
    from gpt1.records import StageContext

    params = make_params({})
    record(params, "unclocked", {"rows": 3, "n": 1}, ("rows",))  # no stage context
    context = StageContext("clean_corpus", "clean_corpus", params,
                           time.perf_counter() - 5.0, None, None)  # started 5 s ago
    record(params, "clocked", {"rows": 3, "n": 1}, ("rows",), context=context)
    metrics = records.read_metrics(params.paths.metrics)
    assert "wall_seconds" not in metrics["unclocked"]
    assert 5.0 <= metrics["clocked"]["wall_seconds"] < 60.0
    assert json.loads((Path(params.paths.metrics) / "clocked.json").read_text()) == {"rows": 3}


def test_a_record_without_origins_or_scored_on_reads_them_from_the_registry_and_eval_split(
) -> None:
    old = {"task": "rte", "eval_split": "test = RTE/dev.tsv: official GLUE dev (277); test "
           "unlabelled (all 277); epoch selected on dev = carved (seeded) from RTE/train.tsv"}
    assert report_runs.split_origins(old) == {"train": "official train", "dev": "carved",
                                          "test": "official dev"}
    assert report_runs.scored_on(old) == "RTE/dev.tsv: official GLUE dev (277)"
    new = {**old, "origins": {"test": "carved"}, "scored_on": "part of RTE/dev.tsv"}
    assert report_runs.split_origins(new) == {"test": "carved"}
    assert report_runs.scored_on(new) == "part of RTE/dev.tsv"
    assert report_runs.scored_on({"task": "rte"}) is None


def test_records_of_two_pretraining_seeds_pool_into_six_runs(make_params, tmp_path: Path
                                                             ) -> None:
    """Records are grouped into runs by their fields (task, variant, pretrain_seed, seeds):
    two pre-training seeds x three fine-tuning seeds = 6 runs per cell; the finding prints
    each pre-training seed's estimate and their difference with its CI."""
    params = make_params({"report": {"bootstrap_samples": 300, "confirmatory_tasks": ["sst2"]}})
    metrics = {}
    for p, (full, scratch) in enumerate((([0.85, 0.8, 0.9], [0.6, 0.62, 0.6]),
                                         ([0.75, 0.8, 0.78], [0.6, 0.61, 0.63]))):
        for variant, acc in (("full", full), ("scratch", scratch)):
            (tmp_path / f"p{p}").mkdir(exist_ok=True)
            rec = preds_json(tmp_path / f"p{p}", variant, "sst2", acc, 400)
            rec.update(pretrain_seed=p, seeds=[0, 1, 2])
            stem = "finetune_sst2" if variant == "full" else "finetune_scratch_sst2"
            metrics[f"{stem}_p{p}"] = rec
    pooled = report_runs.variant_results(metrics, "full")["sst2"]
    assert pooled["runs"] == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]
    assert pooled["scores"]["acc"]["per_seed"] == pytest.approx(
        [0.85, 0.8, 0.9, 0.75, 0.8, 0.78])
    assert len(pooled["predictions"]["test"]) == 6
    f = findings.row_finding(params, metrics, "a", "pre-training helps", "full", "scratch")
    assert f.verdict == "held" and "over 6 runs (2 pre-training x 3 fine-tuning seeds" in f.line
    assert "between pre-training seeds" in f.line
    b = contrasts.contrast([contrasts.row_predictions(report_runs.variant_results(metrics, v))
                            for v in ("full", "scratch")], [1.0, -1.0], [["sst2.acc"]], params)
    assert b is not None and b.runs == 6 and b.between is not None
    assert b.between.estimate == pytest.approx((0.85 + 0.8 + 0.9 - 0.75 - 0.8 - 0.78) / 3
                                               - (0.6 + 0.62 + 0.6 - 0.6 - 0.61 - 0.63) / 3)


def test_the_report_prints_the_lr_each_pilot_chose(make_params, tmp_path: Path) -> None:
    params = fixture_params(make_params)
    metrics = records.read_metrics(fixture_metrics(tmp_path))
    metrics["lr_pilot_scratch_sst2"] = {
        "variant": "scratch", "task": "sst2", "grid": [6.25e-5, 2.5e-4, 1e-3],
        "dev_scores": {"6.25e-05": 0.51, "0.00025": 0.6, "0.001": 0.55}, "chosen_lr": 2.5e-4,
        "dev_split": "carved from SST-2 train"}
    metrics["finetune_scratch_sst2"].update(lr=2.5e-4, warmup_steps=1)
    lines = pilots.pilot_section(params, metrics)
    assert "| Transformer w/o pre-training | sst2 | 6.25e-05, 0.00025, 0.001 |" in lines[2]
    assert ("| lr 0.00025 | 60.0 | not recorded | n/a | not evaluable | carved from SST-2 "
            "train |") in lines[2]
    assert "Transformer w/o pre-training: lr 0.00025, warm-up 1-1 steps" in lines[-1]
    text = document.build_report(params, metrics, "h", "f.png", {})
    assert "### Pilots (on a split carved from the training pool) and the gate" in text


def test_plan_commit_is_checked_against_git(tmp_path: Path, monkeypatch) -> None:
    """The plan commit must be an ancestor of the run and touch no result."""
    import subprocess

    def git(*args: str) -> str:
        return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
                              cwd=tmp_path, check=True, capture_output=True,
                              text=True).stdout.strip()

    git("init", "-q")
    (tmp_path / "dvc.yaml").write_text("stages: {}\n")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "study.md").write_text("plan\n")
    git("add", "-A")
    git("commit", "-qm", "plan")
    plan = git("rev-parse", "--short", "HEAD")
    (tmp_path / "reports").mkdir()
    (tmp_path / "reports" / "report.md").write_text("result\n")
    (tmp_path / "docs" / "study.md").write_text("plan, changed with a result\n")
    git("add", "-A")
    git("commit", "-qm", "run")
    late = git("rev-parse", "--short", "HEAD")
    monkeypatch.chdir(tmp_path)
    assert report_plan.plan_check(plan) == "an ancestor of HEAD; touches no result"
    assert report_plan.plan_check(late).endswith("touches results: reports/report.md")
    (tmp_path / "gpt1" / "report").mkdir(parents=True)
    (tmp_path / "gpt1" / "report" / "findings.py").write_text("fix\n")
    git("add", "-A")
    git("commit", "-qm", "a fix to the analysis code")
    fix = git("rev-parse", "--short", "HEAD")
    assert report_plan.analysis_changes(plan) == [f"{fix} a fix to the analysis code",
                                               f"{late} run"]
    assert report_plan.analysis_changes(fix) == []
    assert report_plan.analysis_changes("0000000") is None
    assert report_plan.plan_check("0000000") == "not found in this clone's git history"


def _layer_records(make_params, tmp_path: Path) -> tuple[Any, dict[str, Any]]:
    """Params and Figure 2-left records of two pre-training seeds x 3 runs, k = 0, 1, 2 on
    SST-2, accuracy rising 10 points per block."""
    params = make_params({"report": {"bootstrap_samples": 300},
                          "layers": {"tasks": ["sst2"], "layers_transferred": [0, 1, 2]},
                          "model": {"n_layer": 2}})
    metrics = {}
    for p in (0, 1):
        for k in (0, 1, 2):
            (tmp_path / f"p{p}k{k}").mkdir()
            rec = preds_json(tmp_path / f"p{p}k{k}", "full", "sst2",
                              [0.55 + 0.1 * k + 0.01 * s for s in range(3)], 400)
            rec.update(variant=f"layers_{k}", layers_transferred=k, pretrain_seed=p,
                       seeds=[0, 1, 2])
            metrics[f"layers_sst2_{k}_p{p}"] = rec
    return params, metrics


def test_finding_c_is_the_slope_over_blocks_on_the_test_split(make_params, tmp_path: Path
                                                              ) -> None:
    """(c) from Figure 2-left records of two pre-training seeds (scored on the test split like
    every fine-tune): n_layer x the slope of accuracy over k; rising accuracy holds."""
    params, metrics = _layer_records(make_params, tmp_path)
    left = figure2.layer_curves(metrics, ["sst2"], [0, 1, 2])
    assert [k for k, _ in left["sst2"]["dev"]] == [0, 1, 2]
    f = curve_tests.layers_finding(params, metrics, left)
    assert f.verdict == "held" and "2 x slope of accuracy" in f.line
    assert f"{100 * 0.2:+.1f} points over 6 runs" in f.line
    assert "a deviation from the paper's MNLI and RACE" in f.line
    bands = figure2.layer_bands(params, metrics)
    assert [k for k, _, _ in bands["sst2"]] == [0, 1, 2]
    assert f.flagged == ""  # every k arm learns


def test_finding_c_flags_a_k_arm_that_answers_one_class(make_params, tmp_path: Path) -> None:
    """(c)'s arms are flagged like Table 5's: k = 0 answering one class in every run (and not
    above majority) is named, and (c) then does not count as reproducing the paper."""
    params, metrics = _layer_records(make_params, tmp_path)
    for p in (0, 1):  # k = 0 always "positive": half right on the balanced split
        for path in metrics[f"layers_sst2_0_p{p}"]["predictions"]["test"]:
            df = pd.read_parquet(path)
            df["prediction"] = 1
            df.to_parquet(path)
    f = curve_tests.layers_finding(params, metrics,
                                   figure2.layer_curves(metrics, ["sst2"], [0, 1, 2]))
    assert f.flagged.startswith("k = 0 on SST2: 6 of 6 runs >= 95 % one class")
    assert "CI not above majority 50.0" in f.flagged and "k = 1" not in f.flagged
    assert "; flagged: k = 0 on SST2" in f.line and not f.reproduces
    assert f.verdict == "inconclusive (flagged arm)" and "The test alone says held" in f.line
    assert "k = 0 on SST2: 6 of 6 runs >= 95 % one class (p0 f0," in f.line


def test_the_design_mde_of_a_task_mean_uses_the_harmonic_n(tiny_params) -> None:
    """SST-2 (872) and QNLI (5,732): the per-example term of their mean is that of n = 1,514,
    not the arithmetic 3,302, so the MDE is larger than an arithmetic n says."""
    n = findings.harmonic_n([872, 5732])
    assert n == pytest.approx(2 / (1 / 872 + 1 / 5732))
    assert findings.row_mde(tiny_params, 2, 3, n, 2) > findings.row_mde(tiny_params, 2, 3, 3302, 2)
    assert findings.harmonic_n([0, 500]) == 500


def test_sst2_zero_shot_is_normalised_at_its_majority(make_params, tmp_path: Path) -> None:
    """report.zeroshot_floors (SST-2: 0.509, its majority share): a zero-shot SST-2 score equal
    to the majority is 0 of the normalised scale, not (0.509 - 0.5) / 0.432 = 0.02; the
    other tasks keep the record's normalisation; renormalising twice changes nothing."""
    params = make_params({})
    rec = _zeroshot_json(tmp_path, "transformer", {1: 0.509, 10: 0.7}, 400)
    rec["checkpoints"][0]["normalised"]["cola"] = 0.25
    floored = figure2.at_floors(params, {"zeroshot": rec})
    cps = floored["zeroshot"]["checkpoints"]
    assert cps[0]["normalised"]["sst2"] == pytest.approx(0.0)
    assert cps[1]["normalised"]["sst2"] == pytest.approx((0.7 - 0.509) / (0.932 - 0.509))
    assert cps[0]["normalised"]["cola"] == 0.25 and rec["norm"]["sst2"]["random"] == 0.5
    assert figure2.at_floors(params, floored) == floored
    plain = _zeroshot_json(tmp_path, "transformer", {1: 0.509, 10: 0.7}, 400)
    text = document.build_report(params, {"zeroshot": plain}, "h", "f.png", {})
    assert "sst2 acc: floor 0.509 (report.zeroshot_floors; random guess 0.5)" in text
