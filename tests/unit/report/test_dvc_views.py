"""DVC's own views fit a terminal: the headline scores file (reports/headline.json) through the
README's `dvc exp show` and `dvc metrics show` views at 160 columns, no column cut to "…"."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from gpt1.report.headline import headline
from gpt1.tasks.registry import TASKS
from tests.helpers.repo import REPO

DVC = str(Path(sys.executable).with_name("dvc"))
EXP_VIEW = ["exp", "show", "--no-pager", "--drop", ".*", "--keep", "Experiment|ft"]  # README


def _record(params, task: str, config_hash: str) -> dict:
    metric = TASKS[task].metric
    return {"task": task, "config_hash": config_hash,
            "scores": {metric: {"mean": 0.123456, "sd": 0.01, "per_seed": [0.1, 0.2]}}}


def test_headline_holds_the_current_configs_primary_scores(tiny_params) -> None:
    metrics = {f"finetune_{t}": _record(tiny_params, t, tiny_params.digest())
               for t in tiny_params.finetune.tasks}
    metrics["finetune_rte"]["config_hash"] = "another"  # a stale record of another preset
    scores = headline(tiny_params, metrics)["ft"]
    assert "rte" not in scores and scores["mnli"] == 12.3  # MNLI's primary: acc_matched
    assert set(scores) == set(tiny_params.finetune.tasks) - {"rte"}


def test_headline_pools_the_records_of_every_pretraining_seed(tiny_params) -> None:
    metrics = {}
    for pretrain_seed, per_seed in ((1, [0.5, 0.7]), (2, [0.9, 0.9])):
        rec = _record(tiny_params, "sst2", tiny_params.digest())
        rec.update(variant="full", pretrain_seed=pretrain_seed, seeds=[0, 1])
        rec["scores"]["acc"] = {"mean": sum(per_seed) / 2, "sd": 0.1, "per_seed": per_seed}
        metrics[f"finetune_sst2_p{pretrain_seed}"] = rec
    params = tiny_params.model_copy(update={"finetune": tiny_params.finetune.model_copy(
        update={"tasks": ["sst2"]})})
    metrics = {k: {**v, "config_hash": params.digest()} for k, v in metrics.items()}
    assert headline(params, metrics)["ft"] == {"sst2": 75.0}  # the mean of the 4 runs


def _run(args: list[str], cwd: Path) -> str:
    env = {**os.environ, "COLUMNS": "160", "DVC_NO_ANALYTICS": "1"}
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True,
                          check=True).stdout


def test_readme_views_of_every_task_fit_160_columns(tiny_params, tmp_path: Path) -> None:
    metrics = {f"finetune_{t}": _record(tiny_params, t, tiny_params.digest()) for t in TASKS}
    params = tiny_params.model_copy(update={"finetune": tiny_params.finetune.model_copy(
        update={"tasks": list(TASKS)})})
    metrics = {k: {**v, "config_hash": params.digest()} for k, v in metrics.items()}
    repo = tmp_path / "repo"
    (repo / "reports").mkdir(parents=True)
    (repo / "reports" / "headline.json").write_text(json.dumps(headline(params, metrics)))
    (repo / "dvc.yaml").write_text("stages:\n  report:\n    cmd: 'true'\n    metrics:\n"
                                   "      - reports/headline.json:\n          cache: false\n")
    for cmd in (["git", "init", "-q"], [DVC, "init", "-q"], ["git", "add", "-A"],
                ["git", "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "x"]):
        _run(cmd, repo)
    for view in (EXP_VIEW, ["metrics", "show", "reports/headline.json"]):
        out = _run([DVC, *view], repo)
        assert all(f"ft.{t}" in out for t in TASKS), out
        assert "…" not in out and max(len(line) for line in out.splitlines()) <= 160, out


def test_figure2_left_plots_follow_the_params(make_params, tmp_path: Path) -> None:
    """One Figure 2-left file per task of params layers.tasks, in the folder dvc.yaml's plot
    definition names, so `dvc plots show` draws every configured task (none hard-coded)."""
    import yaml

    from gpt1 import records
    from gpt1.report import document
    from tests.helpers.report_metrics import fixture_metrics

    params = make_params({"layers": {"tasks": ["race"], "layers_transferred": [0, 2, 4]},
                          "model": {"n_layer": 4}, "paths": {"reports": str(tmp_path / "r")}})
    metrics = records.read_metrics(fixture_metrics(tmp_path))
    paths = document.write_outputs(params, metrics, {})
    folder = tmp_path / "r" / "plots" / "figure2_left"
    assert sorted(p.name for p in folder.iterdir()) == ["race.csv"]
    assert paths["figure2_left_race"].read_text().splitlines()[0] == "layers,dev,train"
    repo = REPO
    (plot,) = [p for p in yaml.safe_load((repo / "dvc.yaml").read_text())["plots"]
               if "figure2_left" in next(iter(p))]
    ((source, spec),) = plot.items()
    assert source == "reports/plots/figure2_left" and spec["y"] == "dev"


def test_dvc_plots_show_draws_both_figure2_panels_for_the_params_tasks(
        make_params, tmp_path: Path) -> None:
    """dvc.yaml's plot definitions take their tasks from params (DVC templating): with tasks
    other than the demo's, `dvc plots show` draws both Figure 2 panels, no field missing, and
    no train series where no record measured train accuracy."""
    import shutil

    import yaml

    from gpt1 import records
    from gpt1.report import document
    from tests.helpers.report_metrics import fixture_metrics

    repo = tmp_path / "repo"
    (repo / "reports").mkdir(parents=True)
    shutil.copytree(REPO / "reports" / "templates", repo / "reports" / "templates")
    params = make_params({"layers": {"tasks": ["race"], "layers_transferred": [0, 2, 4]},
                          "zeroshot": {"tasks": ["cola", "dprd"]}, "model": {"n_layer": 4},
                          "paths": {"reports": str(repo / "reports")}})
    metrics = records.read_metrics(fixture_metrics(tmp_path))
    for stem in [s for s in metrics if s.startswith("layers_")]:  # as the stages write them:
        metrics[stem]["scores"].pop("train_acc")  # no train accuracy measured
    paths = document.write_outputs(params, metrics, {})
    assert paths["figure2_left_race"].read_text().splitlines()[0] == "layers,dev"  # no empty
    plots = yaml.safe_load((REPO / "dvc.yaml").read_text())["plots"]
    (repo / "dvc.yaml").write_text(yaml.safe_dump({"plots": plots}))
    (repo / "params.yaml").write_text(yaml.safe_dump({"zeroshot": {"tasks": ["cola", "dprd"]}}))
    for cmd in (["git", "init", "-q"], [DVC, "init", "-q"]):
        _run(cmd, repo)
    shown = json.loads(_run([DVC, "plots", "show", "--json"], repo))
    assert not shown.get("errors"), shown["errors"]
    assert set(shown["data"]) == {"reports/plots/figure2_left/race.csv", "figure2_right"}
    (right,) = shown["data"]["figure2_right"]
    fields = {(v["filename"], v["field"]) for v in right["content"]["data"]["values"]}
    assert fields == {(f"zeroshot_{m}.csv", t) for m in ("transformer", "lstm")
                      for t in ("cola", "dprd")}
