"""`gpt1 verdicts`: claims (a)-(e) x each run -> verdict, statistic, CI and design MDE; a test
against a flagged (constant) arm is inconclusive and never counts as reproducing the paper;
a run without prediction files gets no CI and says so; the README's verdict block is the
summary, word for word."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest
import yaml

from gpt1.__main__ import main
from gpt1.errors import Gpt1Error
from gpt1.report.verdicts import DESIGNS_FILE, README_END, README_START, plan_designs
from tests.helpers.params import make_params_dict
from tests.helpers.repo import REPO
from tests.helpers.report_metrics import fixture_metrics, preds_json


def _params_file(tmp_path: Path, name: str, overrides: dict) -> tuple[Path, Path]:
    raw = make_params_dict(tmp_path / name, {"report": {"bootstrap_samples": 200,
                                                        **overrides}})
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(raw))
    metrics = Path(raw["paths"]["metrics"])
    metrics.mkdir(parents=True)
    return path, metrics


def _rows(text: str) -> dict[tuple[str, str], list[str]]:
    out = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if line.startswith("| (") and len(cells) == 8:
            out[(cells[0][:3], cells[1])] = cells[2:]
    return out


def test_verdict_table_across_runs(tmp_path: Path) -> None:
    old, old_metrics = _params_file(tmp_path, "old", {})
    fixture_metrics(old_metrics)  # records without prediction files
    new, new_metrics = _params_file(tmp_path, "new", {"confirmatory_tasks": ["sst2"]})
    preds = tmp_path / "preds"
    preds.mkdir()
    records = {"finetune_sst2": preds_json(preds, "full", "sst2", [0.85, 0.8, 0.9], 400),
               "finetune_scratch_sst2": preds_json(preds, "scratch", "sst2", [0.5] * 3, 400)}
    for path in records["finetune_scratch_sst2"]["predictions"]["test"]:
        df = pd.read_parquet(path)
        df["prediction"] = 1  # a constant predictor
        df.to_parquet(path)
    for stem, body in records.items():
        (new_metrics / f"{stem}.json").write_text(json.dumps(body))
    out = tmp_path / "verdicts.md"
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n\nabove\n{README_START}\nstale line\n{README_END}\nbelow\n")
    assert main(["verdicts", "--run", f"old={old}", "--run", f"new={new}",
                 "--out", str(out), "--readme", str(readme)]) == 0
    text = out.read_text()
    block = readme.read_text().split(README_START)[1].split(README_END)[0].strip().splitlines()
    assert [line for line in block if line.startswith("- **")] == block and len(block) == 2
    assert all(line in text.splitlines() for line in block)  # word for word
    assert "stale line" not in readme.read_text() and readme.read_text().endswith("below\n")
    assert "- **new**: (a) inconclusive (flagged arm); (b) " in block[1]
    rows = _rows(text)
    assert {run for _, run in rows} == {"old", "new"} and len(rows) == 10
    assert {tag for tag, _ in rows} == {"(a)", "(b)", "(c)", "(d)", "(e)"}
    verdict, stat, ci, mde, flagged, reproduces = rows[("(a)", "new")]
    assert verdict == "inconclusive (flagged arm)" and "one class" in flagged
    assert reproduces == "no" and ci.startswith("95 % CI [") and "points" in mde
    assert "(conditional on the 1 pre-trained model)" in ci
    assert rows[("(a)", "old")][0] == "no CI: predictions not available"
    assert all(r[0] != "held" or r[4] == "-" for r in rows.values())  # never held vs flagged
    assert "non-learning baseline" not in text
    assert "(e) mean of SST2 +0.8, QNLI +7.0 |" in text  # the paper's gap of (e), with its power
    # (a)'s from-scratch arm has 3 independent runs, not 6: its MDE exceeds (e)'s at 2 x 3
    assert "| study v2 and v3 plans (full pools) | 2 x 3 | 872, 5,732 (1,514) | 5.8 | 5.1 |" in text
    assert "| old study (capped pools) | 1 x 3 | 872, 1,000 (932) | 7.0 | 7.0 |" in text
    assert "old design" in text and f"--run new={new}" in text


def test_the_designs_are_data_read_with_one_line_on_a_bad_file(tmp_path: Path) -> None:
    designs = plan_designs()
    assert ("demo (SST-2 872, QNLI 250)", 1, 3, (872, 250)) in designs  # (sst2, qnli) order
    bad = tmp_path / DESIGNS_FILE.name
    bad.write_text("- label: no seeds\n  eval_examples: {sst2: 1}\n")
    with pytest.raises(Gpt1Error, match="not a list of study designs") as err:
        plan_designs(bad)
    assert err.value.path == str(bad)


def test_a_bad_run_argument_is_one_line(tmp_path: Path, capsys) -> None:
    assert main(["verdicts", "--run", "nameonly", "--out", str(tmp_path / "v.md")]) == 2
    assert "expected NAME=PARAMS" in capsys.readouterr().err
    assert not (tmp_path / "v.md").exists()


@pytest.mark.slow
def test_the_reports_saved_findings_give_the_cis_without_the_prediction_files(
        tmp_path: Path) -> None:
    """The report stage saves its findings (CIs included) in findings.json; `verdicts` uses
    them while the records are unchanged, after the prediction files are gone (a fresh clone),
    and recomputes (no CI) once a record differs."""
    from gpt1.config import load_params
    from gpt1.records import read_metrics
    from gpt1.report.document import FINDINGS_FILE, write_outputs

    path, metrics_dir = _params_file(tmp_path, "run", {"confirmatory_tasks": ["sst2"]})
    preds = tmp_path / "preds"
    preds.mkdir()
    records = {"finetune_sst2": preds_json(preds, "full", "sst2", [0.85, 0.8, 0.9], 400),
               "finetune_scratch_sst2": preds_json(preds, "scratch", "sst2", [0.6] * 3, 400)}
    for stem, body in records.items():
        (metrics_dir / f"{stem}.json").write_text(json.dumps(body))
    params = load_params(path)
    written = write_outputs(params, read_metrics(metrics_dir), {})
    assert written["findings"] == Path(params.paths.reports) / FINDINGS_FILE
    report_a = next(line for line in written["report"].read_text().splitlines()
                    if "(a)" in line and "95 % CI [" in line)

    for p in preds.iterdir():
        p.unlink()  # a fresh clone: the prediction files are not in git
    out = tmp_path / "verdicts.md"
    assert main(["verdicts", "--run", f"run={path}", "--out", str(out)]) == 0
    verdict, stat, ci, *_ = _rows(out.read_text())[("(a)", "run")]
    assert ci.startswith("95 % CI [") and ci.split("CI ")[1] in report_a
    assert verdict == "held" and "(the report's; same records)" in out.read_text()

    body = json.loads((metrics_dir / "finetune_sst2.json").read_text())
    body["n_eval"] = 399  # another record than the report's
    (metrics_dir / "finetune_sst2.json").write_text(json.dumps(body))
    assert main(["verdicts", "--run", f"run={path}", "--out", str(out)]) == 0
    assert _rows(out.read_text())[("(a)", "run")][0] == "no CI: predictions not available"
    assert "recomputed from the records" in out.read_text()


def test_a_damaged_findings_file_is_one_line(tmp_path: Path, capsys) -> None:
    path, metrics_dir = _params_file(tmp_path, "run", {})
    fixture_metrics(metrics_dir)
    from gpt1.config import load_params
    reports = Path(load_params(path).paths.reports)
    reports.mkdir(parents=True, exist_ok=True)
    (reports / "findings.json").write_text("{not json")
    out = tmp_path / "v.md"
    assert main(["verdicts", "--run", f"run={path}", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "findings.json: not a findings file" in err and not out.exists()


def test_a_readme_without_the_verdict_block_is_one_line(tmp_path: Path, capsys) -> None:
    path, metrics_dir = _params_file(tmp_path, "run", {})
    fixture_metrics(metrics_dir)
    readme = tmp_path / "README.md"
    readme.write_text("# no block\n")
    out = tmp_path / "v.md"
    assert main(["verdicts", "--run", f"run={path}", "--out", str(out), "--readme",
                 str(readme)]) == 2
    assert "README.md: no verdict block" in capsys.readouterr().err and not out.exists()


def test_the_committed_readme_quotes_the_committed_verdicts_word_for_word() -> None:
    """The README's verdict lines are verdicts.md's summary (one source: `gpt1 verdicts
    --readme README.md` writes both), and no other README line states a finding's outcome."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    verdicts = (REPO / "reports" / "verdicts.md").read_text(encoding="utf-8")
    block = readme.split(README_START)[1].split(README_END)[0].strip().splitlines()
    summary = verdicts.split("## Summary\n\n")[1].split("\n\n")[0].splitlines()
    assert block == summary and block
    outside = readme.replace(readme[readme.index(README_START):readme.index(README_END)], "")
    for word in ("held", "reproduce the paper", "non-learning", "inconclusive", "untestable"):
        assert word not in outside, word
    assert not re.search(r"\([a-e]\)[^|\n]{0,40}\b(reproduces?|holds?)\b", outside)


def test_a_run_not_made_yet_is_named_under_the_runs_not_tested(tmp_path: Path) -> None:
    """A default run without records (the one-GPU run before a GPU ran it) is named as not
    run yet; the table has rows for the runs that have records only."""
    from gpt1.config import load_params
    from gpt1.report.verdicts import DEFAULT_RUNS, render

    made, made_metrics = _params_file(tmp_path, "made", {})
    fixture_metrics(made_metrics)
    waiting, _ = _params_file(tmp_path, "waiting", {})
    text, summary = render([("made", str(made), load_params(made))], None,
                           [("one GPU", str(waiting), load_params(waiting))])
    assert f"- **one GPU**: `{waiting}`: not run yet (no records in `" in text
    assert {run for _, run in _rows(text)} == {"made"} and len(summary) == 1
    assert "one GPU=configs/gpu-study.yaml" in DEFAULT_RUNS
