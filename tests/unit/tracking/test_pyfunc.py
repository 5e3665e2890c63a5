"""The registered MLflow models answer as `gpt1 predict` does: per-task signature (text_b and
choices where the task reads them), a per-task input example, no traceback while logging."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import torch

from gpt1 import bpe, logged_models, predict, tracking
from gpt1.config import parse_params
from gpt1.heads import TaskModel
from gpt1.model import GPT
from gpt1.tasks.registry import TASKS, register_custom
from tests.helpers.params import make_params_dict
from tests.helpers.runs import random_texts

PREMISE = "a man sleeps on the sofa."
HYPOTHESES = ["a person rests.", "a cat flies to the moon on a tuesday."]
STORY = "she opened the door and looked outside."
ENDINGS = [["it was raining.", "the sea sang loudly."], ["the sea sang loudly.", "it was raining."]]
TOPICS = ["cooking", "sports", "music"]
QUESTIONS = {"questions": {"file": "questions.csv", "text": "question", "label": "topic",
                           "labels": TOPICS}}


@pytest.fixture
def registered(tmp_path: Path, monkeypatch, caplog):
    """Tiny rte, story_cloze and own-task (questions: 3 topics) models logged by the finetune
    stage's path into a sqlite store, each after the params of a pre-training run without the
    own task were read (as the stage reads its pre-trained model's); (params, {task: model
    dir}). No warning that the store was lost: it was up."""
    for env in (tracking.PARENT_ENV, tracking.STAGE_RUN_ENV, "DVC_STAGE"):
        monkeypatch.delenv(env, raising=False)
    db = f"sqlite:///{tmp_path / 'mlflow.db'}"
    raw = make_params_dict(tmp_path, {
        "bpe": {"n_merges": 40},
        "tracking": {"enabled": True, "uri": db, "experiment": "pyfunc"}})
    pretrained = parse_params(raw, "pre-training run")  # no own task yet
    raw["tasks"]["custom"] = QUESTIONS
    raw["finetune"]["tasks"] = [*raw["finetune"]["tasks"], "questions"]
    params = parse_params(raw, "tiny")
    tok = bpe.train_bpe(random_texts(4, 0), params.bpe, params.paths.tokenizer)
    body = GPT(params.model, tok.vocab_size).eval()
    tables = {
        "rte": pd.DataFrame({"text_a": [PREMISE] * 2, "text_b": HYPOTHESES,
                             "choices": [[], []]}),
        "story_cloze": pd.DataFrame({"text_a": [STORY] * 2, "text_b": ["", ""],
                                     "choices": ENDINGS}),
        "questions": pd.DataFrame({"text_a": ["how long do i boil an egg?"], "text_b": [""],
                                   "choices": [[]]}),
    }
    dirs = {}
    for task, table in tables.items():
        spec = TASKS[task]
        model = TaskModel(body, spec, 0.1, 0.02)
        with torch.no_grad():  # a head large enough that different inputs score differently
            torch.nn.init.normal_(model.head.linear.weight, std=1.0)
        dirs[task] = Path(params.paths.finetuned) / task / predict.MODEL_DIR
        predict.save_task_model(dirs[task], model, params, task, "transformer", tok)
        parse_params(pretrained.as_dict(), "model.json")  # the pre-trained model's params
        with tracking.start_run(f"finetune_{task}", params):
            logged_models.log_model(params, dirs[task], "transformer", spec, table)
    assert not [r for r in caplog.records if "lost" in r.getMessage()]
    yield params, dirs
    register_custom({})


def _load(params, uri: str):
    import mlflow
    import mlflow.pyfunc

    mlflow.set_tracking_uri(params.tracking.uri)
    return mlflow.pyfunc.load_model(uri)


def _cli_rows(params, model_dir: Path, rows: list[dict]) -> list[dict]:
    model, tok, spec, saved = predict.load_task_model(model_dir, params.paths.tokenizer)
    return predict.classify(model, tok, spec, saved, rows)


@pytest.mark.slow
def test_pair_task_model_reads_text_b_and_answers_as_predict(registered, capfd) -> None:
    params, dirs = registered
    assert "Traceback" not in capfd.readouterr().err  # logging checked the example cleanly
    model = _load(params, "models:/gpt1-rte/1")
    inputs = {c.name: c.required for c in model.metadata.get_input_schema().inputs}
    assert inputs == {"text": True, "text_b": True}
    out = model.predict(pd.DataFrame({"text": [PREMISE] * 2, "text_b": HYPOTHESES}))
    probs = list(out["probabilities"])  # a list per row, in the order of the labels
    assert probs[0] != probs[1]  # the second text is read
    expected = _cli_rows(params, dirs["rte"], [{"text_a": PREMISE, "text_b": h}
                                               for h in HYPOTHESES])
    assert probs == [list(e["probabilities"].values()) for e in expected]
    assert list(out["label"]) == [e["label"] for e in expected]
    assert "Unsupported type hint" not in capfd.readouterr().err
    example = json.loads(_example("models:/gpt1-rte/1").read_text())  # the task's own rows
    assert example["columns"] == ["text", "text_b"] and example["data"][0][0] == PREMISE


def _example(uri: str) -> Path:
    """The logged input example of a registered model."""
    from mlflow.artifacts import download_artifacts

    return Path(download_artifacts(uri)) / "input_example.json"


@pytest.mark.slow
def test_choice_task_model_reads_choices_and_answers_as_predict(registered) -> None:
    params, dirs = registered
    from mlflow import MlflowClient

    model = _load(params, "models:/gpt1-story_cloze@current")
    inputs = {c.name: c.required for c in model.metadata.get_input_schema().inputs}
    assert inputs == {"text": True, "text_b": False, "choices": True}
    out = model.predict(pd.DataFrame({"text": [STORY] * 2, "choices": ENDINGS}))
    probs = list(out["probabilities"])
    assert probs[0] != probs[1] and probs[0][0] == probs[1][1]  # swapped answers swap
    expected = _cli_rows(params, dirs["story_cloze"], [{"text_a": STORY, "choices": e}
                                                       for e in ENDINGS])
    assert probs == [list(e["probabilities"].values()) for e in expected]
    client = MlflowClient(params.tracking.uri)
    assert "`choices`" in client.get_registered_model("gpt1-story_cloze").description


@pytest.mark.slow
def test_predict_cli_reads_a_registered_model(registered, capsys, tmp_path, monkeypatch) -> None:
    """`gpt1 predict --model models:/gpt1-rte/1` answers as the fine-tuned model does, in the
    repo (store from params) and outside it (store from MLFLOW_TRACKING_URI, no params file)."""
    from gpt1.__main__ import main

    params, dirs = registered
    params_file = tmp_path / "params.json"
    params_file.write_text(json.dumps(params.as_dict()))
    inputs = [PREMISE, "--text-b", HYPOTHESES[1]]
    (expected,) = _cli_rows(params, dirs["rte"], [{"text_a": PREMISE, "text_b": HYPOTHESES[1]}])
    capsys.readouterr()
    assert main(["--params", str(params_file), "predict", "--model", "models:/gpt1-rte/1",
                 *inputs]) == 0
    assert json.loads(capsys.readouterr().out)["probabilities"] == expected["probabilities"]
    monkeypatch.setenv("MLFLOW_TRACKING_URI", params.tracking.uri)
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")  # no params.yaml, no repository
    assert main(["predict", "--model", "models:/gpt1-rte@current", *inputs]) == 0
    assert json.loads(capsys.readouterr().out)["probabilities"] == expected["probabilities"]
    assert main(["predict", "--model", "models:/gpt1-nope/1", *inputs]) == 2
    assert "gpt1-nope" in capsys.readouterr().err


_SERVE = """
import importlib.metadata as md, json, sys
import mlflow.pyfunc, pandas as pd
mlflow.set_tracking_uri(sys.argv[1])
before = set(sys.modules)  # MLflow's own imports: its requirements bring them
model = mlflow.pyfunc.load_model("models:/gpt1-rte/1")
model.predict(pd.DataFrame({"text": ["a man sleeps."], "text_b": ["a person rests."]}))
names = md.packages_distributions()
added = set(sys.modules) - before
print(json.dumps(sorted({d for m in added for d in names.get(m.split(".")[0], [])})))
"""


@pytest.mark.slow
def test_logged_requirements_pin_every_dependency_serving_imports(registered) -> None:
    """The logged requirements.txt is pyfunc.pip_requirements(), and it names every one of
    gpt1's declared dependencies that a fresh process imports (beyond MLflow's own imports) to
    load and ask the model."""
    import subprocess
    import sys
    from importlib.metadata import requires

    from packaging.requirements import Requirement

    from gpt1.tracking import pyfunc

    params, _ = registered
    logged = (_example("models:/gpt1-rte/1").parent / "requirements.txt").read_text()
    assert logged.split() == pyfunc.pip_requirements()
    proc = subprocess.run([sys.executable, "-c", _SERVE, params.tracking.uri], text=True,
                          capture_output=True, check=True)
    imported = {name.lower().replace("_", "-") for name in json.loads(proc.stdout)}
    declared = {Requirement(r).name.lower() for r in requires("gpt1") or []
                if "extra ==" not in r}  # runtime dependencies, not the dev extra
    assert "torch" in imported & declared  # the check sees the model's own imports
    assert imported & declared <= set(pyfunc.SERVING_PACKAGES), imported & declared


_ANSWER = """
import json, sys
import mlflow.pyfunc, pandas as pd
mlflow.set_tracking_uri(sys.argv[1])
out = mlflow.pyfunc.load_model("models:/gpt1-questions/1").predict(
    pd.DataFrame({"text": sys.argv[2:]}))
print(json.dumps({"label": list(out["label"]), "probabilities": list(out["probabilities"])}))
"""


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.slow
def test_an_own_task_model_answers_from_an_empty_folder_and_served(registered,
                                                                   tmp_path) -> None:
    """A registered model of a task of the user's own carries its task (labels, inputs): a
    fresh process in an empty folder outside the repository loads it and answers with the
    task's labels, as `gpt1 predict` does, and `mlflow models serve` of it answers a POST."""
    import os
    import subprocess
    import sys
    import time
    import urllib.request

    params, dirs = registered
    texts = ["how long do i boil an egg?", "who won the cup final?"]
    expected = _cli_rows(params, dirs["questions"], [{"text_a": t} for t in texts])
    empty = tmp_path / "elsewhere"
    empty.mkdir()
    bin_dir = Path(sys.executable).parent  # as in an activated venv: serve runs its uvicorn
    env = {**os.environ, "MLFLOW_TRACKING_URI": params.tracking.uri,
           "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    proc = subprocess.run([sys.executable, "-c", _ANSWER, params.tracking.uri, *texts],
                          cwd=empty, env=env, text=True, capture_output=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    answer = json.loads(proc.stdout.strip().splitlines()[-1])
    assert answer["label"] == [e["label"] for e in expected]
    assert set(answer["label"]) <= set(TOPICS)
    assert answer["probabilities"] == [list(e["probabilities"].values()) for e in expected]

    port = _free_port()
    log = tmp_path / "serve.log"
    with log.open("wb") as out:
        server = subprocess.Popen(
            [str(bin_dir / "mlflow"), "models", "serve", "-m", "models:/gpt1-questions/1",
             "--env-manager", "local", "--host", "127.0.0.1", "--port", str(port),
             "--workers", "1"],
            cwd=empty, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        body = json.dumps({"dataframe_records": [{"text": t} for t in texts]}).encode()
        deadline, reply = time.monotonic() + 180, None
        while reply is None and time.monotonic() < deadline:
            assert server.poll() is None, log.read_text()[-2000:]
            try:
                request = urllib.request.Request(f"http://127.0.0.1:{port}/invocations", body,
                                                 {"Content-Type": "application/json"})
                with urllib.request.urlopen(request, timeout=30) as resp:
                    reply = json.loads(resp.read())
            except OSError:
                time.sleep(0.5)
        assert reply is not None, "mlflow models serve did not answer in 180 s"
        served = reply["predictions"]
        assert [r["label"] for r in served] == answer["label"]
        assert [r["probabilities"] for r in served] == answer["probabilities"]
    finally:
        import signal

        if server.poll() is None:
            os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)
