"""A task of the user's own, declared in params (tasks.custom) from a 40-row CSV, no code: its
stages as DVC renders them from params, then prepare_task (the gate), finetune, the report row,
`gpt1 predict`, the registered MLflow model, the mirror fingerprint DVC tracks, and an export
that transformers' text-classification pipeline answers from as `gpt1 predict` does."""

from __future__ import annotations

import csv
import json
import random
from pathlib import Path

import pandas as pd
import pytest
import yaml

from gpt1 import bpe, checkpoint, networks, tracking
from gpt1.__main__ import main
from gpt1.config import parse_params
from gpt1.data.clean import standardize_texts
from gpt1.export import export_hf
from gpt1.records import read_metrics
from gpt1.report.runs import variant_results
from gpt1.report.tables import render_custom
from gpt1.stages import data as data_stages
from gpt1.stages import finetune as finetune_stages
from gpt1.tasks.registry import register_custom
from tests.helpers.corpus import write_corpus
from tests.helpers.dvc_repo import copy_repo as _copy_repo
from tests.helpers.dvc_repo import run as _run
from tests.helpers.params import make_params_dict

pytestmark = pytest.mark.slow
GOOD = "a fine warm film with a kind heart and a good end".split()
BAD = "a dull cold film with a weak plot and a sad end".split()
CUSTOM = {"reviews": {"file": "reviews.csv", "text": "review", "label": "sentiment",
                      "labels": ["neg", "pos"], "metric": "acc"}}


@pytest.fixture(autouse=True)
def _paper_tasks_only_afterwards():
    """The registry holds the custom tasks of the params last parsed: leave only the paper's."""
    yield
    register_custom({})


def write_reviews(path: Path, n: int = 40) -> None:
    """n reviews: a positive one draws its words from GOOD, a negative one from BAD."""
    rng = random.Random(0)
    with path.open("w", newline="", encoding="utf-8") as f:
        out = csv.writer(f)
        out.writerow(["review", "sentiment"])
        for i in range(n):
            pos = i % 2 == 0
            out.writerow([" ".join(rng.choice(GOOD if pos else BAD) for _ in range(8)),
                          "pos" if pos else "neg"])


def test_dvc_runs_the_stages_of_a_custom_task_and_tracks_its_file(tmp_path: Path) -> None:
    """DVC makes the task's stages from params (foreach over finetune.tasks), gates it, and
    re-runs its prepare_task when the file changes (the file's fingerprint is a dependency)."""
    repo = tmp_path / "repo"
    _copy_repo(repo)
    write_corpus(repo / "mirror", n_books=1, n_paragraphs=2)
    write_reviews(repo / "reviews.csv")
    raw = yaml.safe_load((repo / "params.yaml").read_text())
    raw["paths"]["mirror_dir"] = "mirror"
    raw["tracking"]["enabled"] = False
    raw["tasks"]["custom"] = CUSTOM
    raw["finetune"]["tasks"] = [*raw["finetune"]["tasks"], "reviews"]
    (repo / "params.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    _run(["git", "init", "-q"], repo)
    _run(["dvc", "init", "-q"], repo)
    listed = _run(["dvc", "stage", "list"], repo)
    assert "prepare_task@reviews" in listed and "finetune@reviews-1234" in listed
    first = _run(["dvc", "repro", "prepare_task@reviews"], repo)
    assert "Running stage 'prepare_task@reviews'" in first
    checks = json.loads((repo / "data" / "tasks" / "reviews" / "checks.json").read_text())
    assert all(r["success"] for r in checks.values()) and set(checks) == {"train", "dev", "test"}
    assert "Running stage 'prepare_task@reviews'" not in _run(
        ["dvc", "repro", "prepare_task@reviews"], repo)
    with (repo / "reviews.csv").open("a", encoding="utf-8") as f:
        f.write("a kind and warm end,pos\n")
    assert "Running stage 'prepare_task@reviews'" in _run(
        ["dvc", "repro", "prepare_task@reviews"], repo)


def test_custom_task_fine_tunes_predicts_and_exports(tmp_path: Path, monkeypatch,
                                                     capsys) -> None:
    transformers = pytest.importorskip("transformers")
    monkeypatch.chdir(tmp_path)  # the task file is named relative to the repository root
    write_reviews(tmp_path / "reviews.csv")
    for env in (tracking.PARENT_ENV, tracking.STAGE_RUN_ENV, "DVC_STAGE"):
        monkeypatch.delenv(env, raising=False)
    db = f"sqlite:///{tmp_path / 'mlflow.db'}"
    raw = make_params_dict(tmp_path, {
        "finetune": {"epochs": 1, "seeds": [0],
                     "max_train_examples": None, "max_eval_examples": None},
        "tasks": {"custom": CUSTOM}, "bpe": {"n_merges": 20},
        "tracking": {"enabled": True, "uri": db, "experiment": "custom"}})
    raw["finetune"]["tasks"] = [*raw["finetune"]["tasks"], "reviews"]  # the others stay prepared
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(raw))
    params = parse_params(raw, "tiny")
    write_corpus(tmp_path / "mirror", n_books=1, n_paragraphs=2)
    data_stages.scan_mirror(params)  # what DVC tracks of the task file
    scan = json.loads((Path(params.paths.mirror_scan) / "reviews.json").read_text())
    assert list(scan["files"]) == ["reviews.csv"]

    prepared = data_stages.prepare_task(params, "reviews")
    assert prepared["checks_passed"] and sum(prepared["rows"].values()) == 40
    assert prepared["source"] == "custom" and min(prepared["rows"].values()) > 0
    site = Path(params.paths.data_docs) / "tasks" / "reviews"  # one site over the 3 splits
    index = (site / "index.html").read_text(encoding="utf-8")
    assert all(f"reviews_{s}" in index for s in ("train", "dev", "test"))
    assert not any((site / s).exists() for s in ("train", "dev", "test"))
    home = Path(data_stages.data_docs(params)["home"]).read_text(encoding="utf-8")
    assert "reviews / dev" in home and "✔</span> passed" in home and "not run" in home
    texts = [r.split(",")[0] for r in (tmp_path / "reviews.csv").read_text().splitlines()[1:]]
    tok = bpe.train_bpe(standardize_texts([" ".join(texts)] * 3), params.bpe,
                        params.paths.tokenizer)
    body = networks.build_model("transformer", params, tok.vocab_size)  # a stand-in pre-trained LM
    checkpoint.write_model(checkpoint.pretrain_dir(params, "transformer"), body, {
        "kind": "transformer", "vocab_size": tok.vocab_size, "tokenizer_hash": tok.hash,
        "params": params.as_dict(), "step": 0})
    record = finetune_stages.finetune(params, "reviews")
    assert record["task"] == "reviews" and "acc" in record["scores"]
    row = [line for line in render_custom(params, variant_results(
        read_metrics(params.paths.metrics), "full")) if line.startswith("| reviews |")]
    assert len(row) == 1 and "| acc |" in row[0]  # the report row

    assert main(["predict", "--task", "reviews", "a fine warm film"]) == 0
    answer = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert answer["label"] in ("neg", "pos") and set(answer["probabilities"]) == {"neg", "pos"}

    import mlflow.pyfunc  # the registered model answers as predict

    mlflow.set_tracking_uri(db)
    served = mlflow.pyfunc.load_model("models:/gpt1-reviews/1").predict(
        pd.DataFrame({"text": ["a fine warm film"]}))
    assert served["label"][0] == answer["label"]
    assert list(served["probabilities"][0]) == list(answer["probabilities"].values())

    model = Path(params.paths.finetuned) / "p1234" / "reviews" / "model"
    export_hf(model, tmp_path / "hf", params.paths.tokenizer, params.paths.metrics)
    pipe = transformers.pipeline("text-classification", model=str(tmp_path / "hf"),
                                 device="cpu")
    (theirs,) = [pipe("a fine warm film", top_k=None)]
    assert theirs[0]["label"] == answer["label"]
    assert abs(theirs[0]["score"] - answer["probabilities"][answer["label"]]) <= 1e-5
    card = (tmp_path / "hf" / "README.md").read_text()
    assert "reviews.csv (local file)" in card and "model-index" in card
