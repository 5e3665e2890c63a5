"""Records and the model in use, end to end through DVC on a tiny preset.

A copy of the repo with a tiny generated mirror, committed to git, runs `dvc repro
finetune@sst2-1234` with MLflow on. Then: one `dvc repro` parent run with the stages nested under
it, each tagged with the git commit and carrying only its own params sections; the registered
pre-trained and fine-tuned MLflow models load with `mlflow.pyfunc.load_model` and score text;
`gpt1 generate` and `gpt1 predict` work in the repo; after `dvc exp run -S` of a param no
fine-tune declares, the report's headline keeps the fine-tune's score; Data Docs exist for the
corpus and every split of the task table.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.corpus import write_corpus
from tests.helpers.dvc_repo import copy_repo as _copy_repo
from tests.helpers.dvc_repo import run as _run
from tests.helpers.dvc_repo import set_params as _set_params
from tests.helpers.params import TINY
from tests.helpers.task_mirror import write_mirror

pytestmark = pytest.mark.slow
STAGES = ["download_corpus", "clean_corpus", "check_corpus", "train_bpe", "shard_corpus",
          "pretrain@1234", "prepare_task@sst2", "finetune@sst2-1234"]
OWN_SECTIONS = {"download_corpus": {"data"}, "clean_corpus": {"clean"},
                "check_corpus": {"checks"}, "train_bpe": {"bpe"},
                "shard_corpus": {"seed", "shard"}, "pretrain@1234": {"seed", "model", "pretrain"},
                "prepare_task@sst2": {"tasks"},
                "finetune@sst2-1234": {"seed", "finetune", "tasks", "model", "pretrain",
                                       "ablations"}}  # its pilot's choice


def _stdout(args: list[str], repo: Path) -> str:
    """stdout of `python -m gpt1 ARGS` in the repo (logs go to stderr)."""
    proc = subprocess.run([sys.executable, "-m", "gpt1", *args], cwd=repo, text=True,
                          capture_output=True)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_dvc_repro_records_and_usable_models(tmp_path: Path) -> None:
    import mlflow
    import mlflow.pyfunc
    import pandas as pd
    from mlflow import MlflowClient

    repo = tmp_path / "repo"
    _copy_repo(repo)
    write_corpus(repo / "mirror", n_books=4, n_paragraphs=20)
    write_mirror(repo / "mirror", rows=40)
    db = f"sqlite:///{repo / 'mlflow.db'}"
    _set_params(repo, **{**TINY, "paths": {"mirror_dir": "mirror"},
                         "tracking": {"enabled": True, "uri": db, "experiment": "e2e"},
                         "tasks": {"dev_examples": {"story_cloze": 3}},
                         "pretrain": {**TINY["pretrain"], "precision": "fp32"}})
    _run(["git", "init", "-q"], repo)
    _run(["dvc", "init", "-q"], repo)
    _run(["git", "add", "-A"], repo)
    _run(["git", "commit", "-qm", "tiny preset"], repo)
    commit = _run(["git", "rev-parse", "HEAD"], repo).strip()
    out = _run(["dvc", "repro", "finetune@sst2-1234"], repo)
    ran = set(re.findall(r"Running stage '([^']+)'", out))  # and the pilots finetune waits on
    assert set(STAGES) <= ran

    # one parent for the invocation, every stage nested, tagged, with its own params only.
    client = MlflowClient(tracking_uri=db)
    exp = client.get_experiment_by_name("e2e")
    assert exp.tags["mlflow.experimentKind"] == "custom_model_development"
    runs = client.search_runs([exp.experiment_id])
    (parent,) = [r for r in runs if r.data.tags.get("gpt1.pipeline") == "dvc repro"]
    stages = {r.data.tags["dvc.stage"]: r for r in runs
              if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id}
    assert set(stages) == ran - {"scan_mirror"}  # the mirror's fingerprint: no MLflow run
    assert parent.info.status == "FINISHED"
    for name, run in stages.items():
        assert run.data.tags["mlflow.source.git.commit"] == commit
        if name in OWN_SECTIONS:
            assert {k.split(".")[0] for k in run.data.params} == OWN_SECTIONS[name], name
        assert run.info.status == "FINISHED"

    # the registered models load as pyfunc models and score text.
    mlflow.set_tracking_uri(db)  # the registry lives in the same store
    text = pd.DataFrame({"text": ["the cat sat on the mat.", "a very good film!"]})
    lm = mlflow.pyfunc.load_model("models:/gpt1-pretrain/1")
    losses = lm.predict(text)["loss"].tolist()
    assert len(losses) == 2 and all(math.isfinite(x) and x > 0 for x in losses)
    clf = mlflow.pyfunc.load_model("models:/gpt1-sst2/1").predict(text)
    assert set(clf["label"]) <= {"negative", "positive"}
    assert all(abs(sum(json.loads(p).values()) - 1) < 1e-4 for p in clf["probabilities"])

    # the CLI uses the models the pipeline left.
    sample = ["generate", "The cat", "--max-new-tokens", "8", "--seed", "3"]
    first = _stdout(sample, repo)
    assert first.strip() and first == _stdout(sample, repo)  # seeded: the same continuation
    pred = _stdout(["predict", "--task", "sst2", "a very good film", "bad"], repo)
    lines = [json.loads(x) for x in pred.splitlines()]
    assert [x["text"] for x in lines] == ["a very good film", "bad"]
    assert all(x["label"] in x["probabilities"] for x in lines)

    # `dvc exp run -S` of a param no fine-tune declares: DVC keeps finetune@sst2 up to date,
    # and the report's headline keeps its score (freshness from the stage's declared params).
    exp = _run(["dvc", "exp", "run", "-S", "zeroshot.max_examples=8", "finetune@sst2-1234"],
               repo)
    assert "Running stage 'finetune@sst2-1234'" not in exp, exp
    _stdout(["report"], repo)
    headline = json.loads((repo / "reports" / "headline.json").read_text())
    assert set(headline["ft"]) == {"sst2"}, headline
    shown = _run(["dvc", "metrics", "show"], repo)  # the one DVC metric: the headline
    assert "ft.sst2" in shown and max(map(len, shown.splitlines())) <= 160, shown

    # Data Docs for the corpus and the task table (one site over its three splits), naming
    # their suites and every split's validation.
    docs = repo / "reports" / "data_docs"
    assert "corpus_suite" in (docs / "corpus" / "index.html").read_text()
    task_site = (docs / "tasks" / "sst2" / "index.html").read_text()
    assert "task_sst2_suite" in task_site
    assert all(f"sst2_{split}" in task_site for split in ("train", "dev", "test"))
