"""The pilot in MLflow: one distinctly named child run per candidate (lr, warm-up) and for the
recipe row (its own lr, curves and pilot-split score), and the stage's run holding the choice
(the chosen lr, warm-up and score), not the first candidate's metrics."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from gpt1 import bpe, tracking
from gpt1.config import parse_params
from gpt1.data.clean import standardize_texts
from gpt1.records import StageContext
from gpt1.stages import lr_pilot as lr_pilot_stages
from gpt1.tasks import load
from gpt1.tasks.registry import TASKS
from tests.helpers.params import make_params_dict
from tests.helpers.task_mirror import write_mirror


@pytest.mark.slow
def test_each_candidate_is_a_named_child_and_the_stage_run_holds_the_choice(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from mlflow import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    write_mirror(tmp_path / "mirror", rows=40)
    params = parse_params(make_params_dict(tmp_path, {
        "finetune": {"epochs": 1, "seeds": [0], "max_train_examples": 16},
        "ablations": {"tasks": ["sst2"], "variants": ["scratch"],
                      "pilot": {"variants": ["scratch"], "lr_grid": [1e-4, 1e-3],
                                "warmup_grid": [0.1], "dev_examples": 8, "seed": 0}},
        "tracking": {"enabled": True, "uri": uri, "experiment": "pilot"},
        "bpe": {"n_merges": 20}}), "tiny")
    tables = load.load_task(TASKS["sst2"], params.tasks, params.paths.mirror_dir)
    load.write_tables(tables, Path(params.paths.tasks) / "sst2")  # prepare_task, without its gate
    train = tables["train"]
    bpe.train_bpe(standardize_texts([" ".join(train["text_a"])] * 3), params.bpe,
                  params.paths.tokenizer)
    for env in (tracking.PARENT_ENV, tracking.STAGE_RUN_ENV):
        monkeypatch.delenv(env, raising=False)
    monkeypatch.setenv("DVC_STAGE", "lr_pilot@scratch-sst2")  # as `dvc repro` runs it
    monkeypatch.setattr(tracking.runs.lineage, "repro_invocation", lambda: None)
    context = StageContext.of("lr_pilot", "lr_pilot@scratch-sst2", params, 0.0, None)
    with tracking.stage_scope("lr_pilot@scratch-sst2", params, "lr_pilot") as run:  # as the CLI
        chosen = lr_pilot_stages.lr_pilot(params, "sst2", "scratch",
                                          context=dataclasses.replace(context, run=run))

    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("pilot").experiment_id
    runs = client.search_runs([experiment])
    (stage,) = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    children = {r.info.run_name: r for r in runs
                if r.data.tags.get("mlflow.parentRunId") == stage.info.run_id}
    assert stage.info.run_name == "lr_pilot@scratch-sst2" and len(runs) == 4
    recipe = f"lr={params.finetune.lr:g},warmup={params.finetune.warmup_frac:g}"
    assert set(children) == {"lr=0.0001,warmup=0.1", "lr=0.001,warmup=0.1", recipe}
    for name, run in children.items():
        lr, warmup = (part.split("=")[1] for part in name.split(","))
        assert run.data.params["finetune.lr"] == lr
        assert run.data.params["finetune.warmup_frac"] == warmup
        assert run.data.tags["gpt1.lr_candidate"] == lr
        assert run.data.tags["gpt1.warmup_candidate"] == warmup
        assert any(k.startswith("scores.acc") for k in run.data.metrics), run.data.metrics
    assert stage.data.metrics["chosen_lr"] == pytest.approx(chosen["chosen_lr"])
    assert stage.data.metrics["chosen_warmup"] == pytest.approx(0.1)
    assert stage.data.metrics["chosen_dev_acc"] == pytest.approx(chosen["chosen_score"])
    assert stage.data.metrics["dev_majority"] == pytest.approx(chosen["dev_majority"])
    assert not any(k.startswith("scores.") for k in stage.data.metrics), stage.data.metrics
