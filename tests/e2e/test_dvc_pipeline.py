"""The pipeline end to end through DVC on a tiny preset with two pre-training seeds: its records,
the models in use, and every model stage once per seed. One repo serves both halves (every
stage the second half needs from the first is not run again).

A copy of the repo with a tiny generated mirror, committed to git, first runs `dvc repro
finetune@sst2-1` with MLflow on. Then: one `dvc repro` parent run with the stages nested under
it, each tagged with the git commit and carrying only its own params sections; the registered
pre-trained and fine-tuned MLflow models load with `mlflow.pyfunc.load_model` and score text;
`gpt1 generate` and `gpt1 predict` work in the repo; after `dvc exp run -S` of a param no
fine-tune declares, the report's headline keeps the fine-tune's score; Data Docs exist for the
corpus and every split of the task table.

Then, with MLflow off (a param no stage declares: nothing re-runs), `dvc dag` shows a
pre-training stage per seed and LM, `dvc repro report` runs every other model stage once per
seed (the lr pilot once), and every record says which pre-training run it came from; every run
is scored on the same examples.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from tests.helpers.corpus import write_corpus
from tests.helpers.dvc_repo import copy_repo as _copy_repo
from tests.helpers.dvc_repo import run as _run
from tests.helpers.dvc_repo import set_params as _set_params
from tests.helpers.params import TINY
from tests.helpers.task_mirror import write_mirror

pytestmark = pytest.mark.slow
SEEDS = [1, 2]
FINETUNE = "finetune@sst2-1"
STAGES = ["download_corpus", "clean_corpus", "check_corpus", "train_bpe", "shard_corpus",
          "pretrain@1", "prepare_task@sst2", FINETUNE]
OWN_SECTIONS = {"download_corpus": {"data"}, "clean_corpus": {"clean"},  # of its params keys
                "check_corpus": {"checks"}, "train_bpe": {"bpe", "pretrain"},  # import_hf
                "shard_corpus": {"seed", "shard"}, "pretrain@1": {"model", "pretrain"},
                "prepare_task@sst2": {"tasks"},
                FINETUNE: {"seed", "finetune", "tasks", "model", "pretrain", "bpe",
                           "ablations"}}  # its pilot's choice
PER_SEED = ["pretrain@{}", "pretrain_lstm@{}", "finetune@sst2-{}", "ablation@scratch-sst2-{}",
            "ablation@lstm-sst2-{}", "transfer_layers@sst2-2-{}", "zeroshot@{}",
            "zeroshot_lstm@{}"]


def _stdout(args: list[str], repo: Path) -> str:
    """stdout of `python -m gpt1 ARGS` in the repo (logs go to stderr)."""
    proc = subprocess.run([sys.executable, "-m", "gpt1", *args], cwd=repo, text=True,
                          capture_output=True)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _ran(out: str) -> list[str]:
    return re.findall(r"Running stage '([^']+)'", out)


def test_dvc_repro_records_usable_models_and_every_stage_per_seed(tmp_path: Path) -> None:
    import mlflow
    import mlflow.pyfunc
    from mlflow import MlflowClient

    repo = tmp_path / "repo"
    _copy_repo(repo)
    write_corpus(repo / "mirror", n_books=4, n_paragraphs=20)
    write_mirror(repo / "mirror", rows=40)
    db = f"sqlite:///{repo / 'mlflow.db'}"
    _set_params(repo, **{
        **TINY, "paths": {"mirror_dir": "mirror"},
        "tracking": {"enabled": True, "uri": db, "experiment": "e2e"},
        "pretrain": {**TINY["pretrain"], "precision": "fp32", "seeds": SEEDS},
        "finetune": {**TINY["finetune"], "tasks": ["sst2"], "overrides": {}, "seeds": [0, 1],
                     "max_eval_examples": None},
        "ablations": {"tasks": ["sst2"], "variants": ["scratch", "lstm"],
                      "pilot": {"variants": ["scratch"], "lr_grid": [1e-4, 1e-3],
                                "warmup_grid": [0.002], "dev_examples": 8, "seed": 0}},
        "layers": {"tasks": ["sst2"], "layers_transferred": [2],
                   "max_train_examples": None, "max_eval_examples": None},
        "zeroshot": {"tasks": ["sst2"], "max_examples": 8},
        "report": {**TINY["report"], "confirmatory_tasks": ["sst2"]}})  # prepared tasks only
    _run(["git", "init", "-q"], repo)
    _run(["dvc", "init", "-q"], repo)
    _run(["git", "add", "-A"], repo)
    _run(["git", "commit", "-qm", "tiny preset, two pre-training seeds"], repo)
    commit = _run(["git", "rev-parse", "HEAD"], repo).strip()

    stages = _run(["dvc", "stage", "list", "--name-only"], repo).split()
    assert {s.format(p) for s in PER_SEED for p in SEEDS} | {"lr_pilot@scratch-sst2",
                                                              "floor@sst2"} <= set(stages)
    first = _ran(_run(["dvc", "repro", FINETUNE], repo))  # and the pilots finetune waits on
    assert set(STAGES) <= set(first)

    # one parent for the invocation, every stage nested, tagged, with its own params only.
    client = MlflowClient(tracking_uri=db)
    exp = client.get_experiment_by_name("e2e")
    assert exp.tags["mlflow.experimentKind"] == "custom_model_development"
    runs = client.search_runs([exp.experiment_id])
    (parent,) = [r for r in runs if r.data.tags.get("gpt1.pipeline") == "dvc repro"]
    nested = {r.data.tags["dvc.stage"]: r for r in runs
              if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id}
    assert set(nested) == set(first) - {"scan_mirror"}  # the mirror's fingerprint: no MLflow run
    assert parent.info.status == "FINISHED"
    for name, run in nested.items():
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
    assert all(abs(sum(p) - 1) < 1e-4 for p in clf["probabilities"])  # a list per row

    # the CLI uses the models the pipeline left.
    sample = ["generate", "The cat", "--max-new-tokens", "8", "--seed", "3"]
    once = _stdout(sample, repo)
    assert once.strip() and once == _stdout(sample, repo)  # seeded: the same continuation
    pred = _stdout(["predict", "--task", "sst2", "a very good film", "bad"], repo)
    lines = [json.loads(x) for x in pred.splitlines()]
    assert [x["text"] for x in lines] == ["a very good film", "bad"]
    assert all(x["label"] in x["probabilities"] for x in lines)

    # `dvc exp run -S` of a param no fine-tune declares: DVC keeps the fine-tune up to date,
    # and the report's headline keeps its score (freshness from the stage's declared params).
    exp_out = _run(["dvc", "exp", "run", "-S", "zeroshot.max_examples=6", FINETUNE], repo)
    assert f"Running stage '{FINETUNE}'" not in exp_out, exp_out
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

    # every other model stage once per pre-training seed; nothing the first half ran runs again
    _set_params(repo, tracking={"enabled": False})
    rest = _ran(_run(["dvc", "repro", "report"], repo))
    assert not (set(first) - {"scan_mirror"}) & set(rest), rest  # scan_mirror: always changed
    every = [*first, *rest]
    assert all(every.count(s.format(p)) == 1 for s in PER_SEED for p in SEEDS), every
    assert every.count("floor@sst2") == 1  # the floor has no pre-training seed

    metrics = repo / "reports" / "metrics"
    pilot = json.loads((metrics / "lr_pilot_scratch_sst2.info.json").read_text())
    chosen = json.loads((metrics / "lr_pilot_scratch_sst2.json").read_text())["chosen_lr"]
    assert pilot["pretrain_seed"] == SEEDS[0] and chosen in pilot["grid"]
    scored = set()
    for p in SEEDS:
        for stem in (f"finetune_sst2_p{p}", f"finetune_scratch_sst2_p{p}",
                     f"finetune_lstm_sst2_p{p}", f"layers_sst2_2_p{p}"):
            info = json.loads((metrics / f"{stem}.info.json").read_text())
            assert info["pretrain_seed"] == p and info["select"] == "final", stem
            assert info["warmup_steps"] >= 1
            for path in info["predictions"]["test"]:
                scored.add(tuple(pd.read_parquet(repo / path)["id"]))
        assert json.loads((metrics / f"finetune_scratch_sst2_p{p}.info.json").read_text())[
            "lr"] == chosen
        for stem in (f"zeroshot_p{p}", f"zeroshot_lstm_p{p}"):
            zs = json.loads((metrics / f"{stem}.info.json").read_text())
            assert zs["pretrain_seed"] == p and zs["steps"][0] == 0
        assert (repo / "data" / "pretrain" / "transformer" / f"p{p}" / "model.json").is_file()
    floor = json.loads((metrics / "finetune_bow_sst2.info.json").read_text())
    assert "pretrain_seed" not in floor and floor["seeds"] == [0, 1]
    for path in floor["predictions"]["test"]:
        scored.add(tuple(pd.read_parquet(repo / path)["id"]))
    assert len(scored) == 1  # every run and seed: the same examples in the same order
    weights = [(repo / "data" / "pretrain" / "transformer" / f"p{p}" / "model.safetensors")
               .read_bytes() for p in SEEDS]
    assert weights[0] != weights[1]  # two pre-training runs, not one run twice
