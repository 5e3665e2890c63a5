"""gpt1.tracking: nested runs, batched metrics, params, artifacts, URI rules, disabled no-op."""

from __future__ import annotations

import dataclasses
import json
import socket
import time
from pathlib import Path

import pytest
import yaml

from gpt1 import tracking
from gpt1.__main__ import main
from gpt1.config import ParamsError
from gpt1.errors import Gpt1Error
from gpt1.repo import repo_root
from tests.helpers.corpus import write_corpus
from tests.helpers.params import make_params_dict


@pytest.fixture(scope="module")
def db_uri(tmp_path_factory: pytest.TempPathFactory) -> str:
    return f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlflow.db'}"


@pytest.fixture
def on_params(make_params, db_uri, monkeypatch):
    monkeypatch.delenv(tracking.PARENT_ENV, raising=False)
    return make_params(
        {"tracking": {"enabled": True, "uri": db_uri, "experiment": "t"}}
    )


def test_disabled_is_a_no_op(tiny_params, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'never.db'}")
    assert not tiny_params.tracking.enabled
    with tracking.pipeline_run("gpt1", tiny_params, {}) as parent:
        assert parent is None
        with tracking.start_run("pretrain", tiny_params) as on_metrics:
            on_metrics(1, {"loss": 1.0})
            tracking.log_artifact(tmp_path / "missing.json")  # no run open: not even checked
            tracking.log_summary({"acc": 0.5})
    assert not (tmp_path / "never.db").exists()


def test_stage_runs_nest_under_the_pipeline_run(on_params, tmp_path: Path, monkeypatch) -> None:
    from mlflow import MlflowClient

    monkeypatch.delenv("DVC_STAGE", raising=False)

    report = tmp_path / "finetune_rte.json"
    report.write_text('{"scores": {"acc": {"mean": 0.75}}}')
    with tracking.pipeline_run("gpt1-demo", on_params, {"flow_run": "abc"}) as parent:
        assert parent
        monkeypatch.setenv(tracking.PARENT_ENV, parent)  # what the flow gives each subprocess
        with tracking.start_run("pretrain", on_params) as on_metrics:
            for step in range(5):
                on_metrics(step, {"loss": 5.0 - step, "lr": 0.1})
        with tracking.start_run("finetune@rte", on_params):
            tracking.log_artifact(report)
            tracking.log_summary({"scores": {"acc": {"mean": 0.75}}, "task": "rte"})

    client = MlflowClient(tracking_uri=on_params.tracking.uri)
    assert client.get_run(parent).info.status == "FINISHED"
    children = tracking.child_runs(on_params, parent)
    assert [c["stage"] for c in children] == ["pretrain", "finetune@rte"]
    assert all(c["status"] == "FINISHED" for c in children)
    pre, ft = children
    history = client.get_metric_history(pre["run_id"], "loss")  # all 5 steps, one batch at exit
    assert [(m.step, m.value) for m in history] == [(s, 5.0 - s) for s in range(5)]
    assert ft["metrics"] == {"scores.acc.mean": 0.75}
    pre_run = client.get_run(pre["run_id"])
    logged = pre_run.data.params  # the sections of the keys dvc.yaml declares for `pretrain`
    assert logged["model.n_layer"] == str(on_params.model.n_layer)
    assert {k.split(".")[0] for k in logged} == {"model", "pretrain"}  # its seed: the address
    assert pre_run.data.tags["mlflow.source.git.commit"] == tracking.git_commit()
    assert len(tracking.git_commit() or "") == 40
    assert pre_run.data.tags["dvc.stage"] == "pretrain" and pre_run.data.tags["dvc.stage_hash"]
    ft_params = client.get_run(ft["run_id"]).data.params
    assert {k.split(".")[0] for k in ft_params} == {"seed", "finetune", "tasks", "model",
                                                     "pretrain", "ablations",  # its pilot's
                                                     "bpe"}  # the special tokens
    assert ft_params["finetune.tasks"].startswith('["snli"')
    assert client.get_run(parent).data.params == {}  # the pipeline run: the config artifact
    config = client.download_artifacts(parent, "config.json", str(tmp_path))
    assert json.loads(Path(config).read_text()) == on_params.as_dict()
    assert sorted(a.path for a in client.list_artifacts(ft["run_id"])) == [
        "config.json", "finetune_rte.json"]
    experiment = client.get_experiment(pre_run.info.experiment_id)
    assert experiment.tags["mlflow.experimentKind"] == "custom_model_development"
    assert tracking.run_url(on_params, parent).endswith(f"/runs/{parent}")
    assert tracking.experiment_url(on_params) == (  # the runs table, not the UI's home page
        f"{on_params.tracking.ui_url.rstrip('/')}/#/experiments/{experiment.experiment_id}/runs")


def test_failed_stage_is_marked_failed_and_nests_in_process(on_params) -> None:
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=on_params.tracking.uri)
    with tracking.pipeline_run("outer", on_params, {}) as parent:
        assert parent
        with pytest.raises(RuntimeError), tracking.start_run("pretrain", on_params):
            raise RuntimeError("boom")
    (child,) = tracking.child_runs(on_params, parent)
    assert child["status"] == "FAILED"
    assert client.get_run(parent).info.status == "FINISHED"


def test_the_stage_run_is_passed_in_its_context_not_taken_from_the_module(
        on_params, monkeypatch) -> None:
    """Under the CLI the stage's run is open before its work; a start_run given the stage
    context logs into it (once), one given no context opens its own run under its stem."""
    from mlflow import MlflowClient

    from gpt1.records import StageContext

    monkeypatch.delenv("DVC_STAGE", raising=False)
    monkeypatch.setattr(tracking.runs.lineage, "repro_invocation", lambda: None)
    client = MlflowClient(tracking_uri=on_params.tracking.uri)
    context = StageContext.of("report", "report", on_params, 0.0, None)
    with tracking.stage_scope("report", on_params, "report") as run:
        assert run is not None
        own = dataclasses.replace(context, run=run)
        with tracking.start_run("a_stem", on_params):  # no context: a run of its own
            tracking.log_summary({"apart": 1.0})
        with tracking.start_run("report", on_params, context=own):
            tracking.log_summary({"own": 1.0})
        with tracking.start_run("again", on_params, context=own):  # taken: a child
            tracking.log_summary({"child": 1.0})
    stage = client.get_run(run.run_id)
    assert stage.info.run_name == "report" and stage.data.metrics == {"own": 1.0}
    children = {r.info.run_name: r.data.metrics for r in client.search_runs(
        [stage.info.experiment_id], f"tags.mlflow.parentRunId = '{run.run_id}'")}
    assert children == {"a_stem": {"apart": 1.0}, "again": {"child": 1.0}}


def test_unknown_parent_run_is_one_line_error(on_params, monkeypatch) -> None:
    monkeypatch.setenv(tracking.PARENT_ENV, "0" * 32)
    with pytest.raises(Gpt1Error, match=tracking.PARENT_ENV), tracking.start_run("x", on_params):
        pass


def test_uri_resolution(make_params, monkeypatch) -> None:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    root = repo_root()
    assert (root / "dvc.yaml").exists() or (root / ".dvc").is_dir()
    params = make_params({"tracking": {"enabled": True}})
    assert tracking.tracking_uri(params) == f"sqlite:///{root / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:5000")
    assert tracking.tracking_uri(params) == "http://127.0.0.1:5000"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "./mlruns")
    with pytest.raises(Gpt1Error, match="file store"):
        tracking.tracking_uri(params)
    relative = make_params({"tracking": {"uri": "sqlite:///runs/x.db"}})
    assert tracking.tracking_uri(relative) == f"sqlite:///{root / 'runs' / 'x.db'}"
    with pytest.raises(ParamsError, match="tracking.uri"):
        make_params({"tracking": {"uri": "file:./mlruns"}})
    with pytest.raises(ParamsError, match="tracking.ui_url"):
        make_params({"tracking": {"ui_url": "localhost"}})


def test_flatten() -> None:
    assert tracking.flatten({"a": {"b": 1, "c": {"d": [1, 2]}}, "e": {}, "f": None}) == {
        "a.b": 1,
        "a.c.d": [1, 2],
        "e": {},
        "f": None,
    }


def test_flow_stage_run_is_used_by_the_stage_subprocess(on_params, tmp_path, monkeypatch) -> None:
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=on_params.tracking.uri)
    metrics = tmp_path / "shard_corpus.json"
    metrics.write_text('{"tokens": {"train": 900, "val": 50}, "tokenizer_hash": "ab"}')
    with tracking.pipeline_run("flow", on_params, {}) as parent:
        pass  # the flow process; the stage below runs "in a subprocess" (no run active here)
    with tracking.stage_run("shard_corpus", on_params, parent) as run_id:
        assert run_id
        monkeypatch.setenv(tracking.STAGE_RUN_ENV, run_id)  # what the subprocess sees
        with tracking.start_run("shard_corpus", on_params) as on_metrics:
            on_metrics(3, {"loss": 2.0})
            with tracking.start_run("seed0", on_params):  # inner runs still nest
                pass
        assert client.get_run(run_id).info.status == "RUNNING"  # the flow ends it
        tracking.record_stage(on_params, run_id, [metrics, tmp_path / "absent.json"],
                              {"gpt1.dvc": "ran"})
    assert [c["stage"] for c in tracking.child_runs(on_params, parent)] == ["shard_corpus"]
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED"
    assert run.data.metrics == {"loss": 2.0, "tokens.train": 900.0, "tokens.val": 50.0}
    assert run.data.tags["gpt1.dvc"] == "ran"
    assert [a.path for a in client.list_artifacts(run_id, "metrics")] == [
        "metrics/shard_corpus.json"]
    (inner,) = tracking.child_runs(on_params, run_id)
    assert inner["stage"] == "seed0"
    with tracking.stage_run("x", on_params, None) as none:
        assert none is None


# ------------------------------------------------------------------ store outages


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _stage_params(tmp_path: Path, uri: str | None) -> Path:
    write_corpus(tmp_path / "mirror", n_books=2, n_paragraphs=1)
    raw = make_params_dict(tmp_path, {"tracking": {"enabled": True, "uri": uri}})
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def _one_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert "\n" not in err, err
    return err


@pytest.mark.parametrize("source", ["tracking.uri", "MLFLOW_TRACKING_URI"])
def test_unreachable_store_stops_the_stage_in_seconds_before_any_output(
    source, tmp_path, monkeypatch, capsys
) -> None:
    uri = f"http://127.0.0.1:{_closed_port()}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    params_file = _stage_params(tmp_path, uri if source == "tracking.uri" else None)
    started = time.perf_counter()
    assert main(["--params", str(params_file), "download_corpus"]) == 2
    assert time.perf_counter() - started < 10
    line = _one_line(capsys)
    assert line.startswith("gpt1 download_corpus: error: ")
    assert f"tracking URI '{uri}' (from {source})" in line and "unreachable" in line
    assert not (tmp_path / "data").exists() and not (tmp_path / "reports").exists()


@pytest.mark.parametrize(("uri", "problem"), [("bogus://x", "not a database or server URI"),
                                              ("http://", "malformed")])
def test_malformed_uri_in_the_environment_names_the_variable(uri, problem, tmp_path,
                                                             monkeypatch, capsys) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    assert main(["--params", str(_stage_params(tmp_path, None)), "download_corpus"]) == 2
    line = _one_line(capsys)
    assert "MLFLOW_TRACKING_URI" in line and uri in line and problem in line
    assert "internal error" not in line
    assert not (tmp_path / "data").exists()


@pytest.mark.parametrize(("uri", "problem"), [
    ("bogus://x", "not a database or server URI"), ("http://:80", "malformed"),
    ("sqlite:////nonexistent-gpt1-folder/mlflow.db", "does not exist")])
def test_malformed_uri_in_params_names_the_key(uri, problem, tmp_path, capsys) -> None:
    assert main(["--params", str(_stage_params(tmp_path, uri)), "download_corpus"]) == 2
    line = _one_line(capsys)
    assert "tracking.uri" in line and uri in line and problem in line
    assert not (tmp_path / "data").exists()


_STORE_CALLS = ("create_run", "log_batch", "log_artifact", "log_artifacts", "log_text",
                "set_terminated")


def _lose_store(monkeypatch, at_open: bool) -> None:
    """The store goes away after the stage started: before its run is created (at_open), or
    once it is open; every later call fails."""
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    from gpt1.tracking import runs

    def gone(*args, **kwargs):
        raise MlflowException("API request failed: Connection refused")

    def lose() -> None:
        for name in _STORE_CALLS:
            monkeypatch.setattr(MlflowClient, name, gone)

    if at_open:
        lose()
        return
    opened = runs.create_run

    def create_then_lose(*args, **kwargs):
        run_id = opened(*args, **kwargs)
        lose()
        return run_id

    monkeypatch.setattr(runs, "create_run", create_then_lose)


@pytest.mark.parametrize("at_open", [False, True], ids=["after_open", "at_open"])
def test_store_lost_mid_stage_keeps_outputs_and_relog_logs_the_rest(
    at_open, tmp_path, monkeypatch, caplog, capsys
) -> None:
    from mlflow import MlflowClient

    monkeypatch.chdir(tmp_path)  # the pending records go under the repo root: here
    for name in ("DVC_STAGE", tracking.PARENT_ENV, tracking.STAGE_RUN_ENV):
        monkeypatch.delenv(name, raising=False)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    params_file = _stage_params(tmp_path, uri)
    with monkeypatch.context() as outage:
        _lose_store(outage, at_open)
        assert main(["--params", str(params_file), "download_corpus"]) == 0
    assert (tmp_path / "data" / "raw" / "manifest.json").is_file()
    assert (tmp_path / "reports" / "metrics" / "download_corpus.json").is_file()
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"
              and "tracking store" in r.getMessage()]
    assert len(warned) == 1 and "gpt1 relog" in warned[0] and uri in warned[0]
    (pending,) = (tmp_path / "mlflow-pending").iterdir()
    ops = [json.loads(line)["op"] for line in (pending / "ops.jsonl").read_text().splitlines()]
    assert ops == ["create"] * at_open + ["metrics", "artifact", "artifact", "end"]
    client = MlflowClient(tracking_uri=uri)
    if not at_open:
        run = client.get_run(pending.name)
        assert run.info.status == "RUNNING" and run.data.metrics == {}

    capsys.readouterr()
    assert main(["relog"]) == 0
    assert f"re-logged {len(ops)} records of run {pending.name}" in capsys.readouterr().out
    (run,) = client.search_runs([client.get_experiment_by_name("gpt1").experiment_id])
    assert run.info.status == "FINISHED" and run.data.metrics == {"files": 2.0}
    assert run.data.params["data.source"]  # the stage's params sections, also when created late
    assert sorted(a.path for a in client.list_artifacts(run.info.run_id)) == [
        "config.json", "download_corpus.info.json", "download_corpus.json"]
    assert not pending.exists()
    assert main(["relog"]) == 0
    assert "nothing to re-log" in capsys.readouterr().out


def test_relog_with_the_store_still_away_keeps_the_records(tmp_path, monkeypatch,
                                                           capsys) -> None:
    from gpt1.tracking.pending import Pending

    monkeypatch.chdir(tmp_path)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(make_params_dict(tmp_path)))
    uri = f"http://127.0.0.1:{_closed_port()}"
    pending = Pending.of(uri, "0" * 32)
    pending.add({"op": "end", "status": "FINISHED"})
    started = time.perf_counter()
    assert main(["relog"]) == 2
    assert time.perf_counter() - started < 10  # the store checked first: no client retries
    line = _one_line(capsys)
    kept = tmp_path / "mlflow-pending"
    assert line == (f"gpt1 relog: error: {uri}: tracking store unreachable (Connection "
                    f"refused); nothing re-logged, every record kept in {kept}; run `gpt1 "
                    "relog` again when it is up")
    assert pending.ops() == [{"op": "end", "status": "FINISHED"}]


def test_flow_records_a_stage_while_the_store_is_away(on_params, tmp_path, monkeypatch) -> None:
    from gpt1.tracking.pending import all_pending

    monkeypatch.chdir(tmp_path)
    with tracking.pipeline_run("flow", on_params, {}) as parent:
        pass
    with tracking.stage_run("shard_corpus", on_params, parent) as run_id:
        assert run_id
        metrics = tmp_path / "shard_corpus.json"
        metrics.write_text('{"tokens": 900}')
        with monkeypatch.context() as outage:
            _lose_store(outage, at_open=True)
            tracking.record_stage(on_params, run_id, [metrics], {"gpt1.dvc": "ran"})
    (pending,) = all_pending()
    assert pending.meta()["run_id"] == run_id
    assert [op["op"] for op in pending.ops()] == ["artifact", "tags", "metrics"]
    assert main(["--params", str(_stage_params(tmp_path, None)), "relog"]) == 0
    (child,) = tracking.child_runs(on_params, parent)
    assert child["metrics"] == {"tokens": 900.0} and child["status"] == "FINISHED"


@pytest.mark.slow
def test_stage_run_has_mlflows_context_and_covers_the_stage_work(on_params, tmp_path,
                                                                 monkeypatch) -> None:
    """A stage's run carries MLflow's own context tags (source, user, git), is opened before
    the stage's work (its duration covers it), is named by the stage's DVC address, and lists
    the data the stage checked as a dataset input."""
    from mlflow import MlflowClient

    from gpt1.data import clean

    for env in ("DVC_STAGE", tracking.STAGE_RUN_ENV):
        monkeypatch.delenv(env, raising=False)
    params_file = _stage_params(tmp_path, on_params.tracking.uri)
    work: list[float] = []
    real = clean.clean_documents

    def slow_clean(*args, **kwargs):
        work.append(time.time())
        time.sleep(1.0)  # the stage's work, long enough to see in the run's duration
        out = real(*args, **kwargs)
        work.append(time.time())
        return out

    monkeypatch.setattr(clean, "clean_documents", slow_clean)
    started = int(time.time() * 1000)
    assert main(["--params", str(params_file), "download_corpus"]) == 0
    monkeypatch.setenv("DVC_STAGE", "clean_corpus")  # as `dvc repro` runs it (no parent: none)
    monkeypatch.setattr(tracking.runs.lineage, "repro_invocation", lambda: None)
    assert main(["--params", str(params_file), "clean_corpus"]) == 0
    monkeypatch.delenv("DVC_STAGE")
    assert main(["--params", str(params_file), "check-corpus"]) == 0
    client = MlflowClient(tracking_uri=on_params.tracking.uri)
    experiments = [e.experiment_id for e in client.search_experiments()]
    runs = {r.info.run_name: r for r in client.search_runs(experiments)
            if r.info.start_time >= started}
    run = runs["clean_corpus"]
    assert run.info.start_time <= work[0] * 1000 and run.info.end_time >= work[1] * 1000
    tags = run.data.tags
    assert tags["mlflow.user"] and tags["mlflow.source.type"] == "LOCAL"
    assert tags["mlflow.source.name"] and tags["mlflow.source.git.commit"] == \
        tracking.git_commit()
    assert run.data.metrics["documents"] > 0  # the stage's record landed in the same run
    check = runs["check_corpus"]
    (dataset,) = check.inputs.dataset_inputs
    assert dataset.dataset.name == "corpus/checked"
    assert dataset.tags[0].value == "checked" and "download_corpus" in runs
