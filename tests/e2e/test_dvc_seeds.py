"""Two pre-training seeds through DVC on a tiny preset: `dvc dag` shows a pre-training stage per
seed and LM, `dvc repro report` runs every model stage once per seed (the lr pilot once), and
every record says which pre-training run it came from; every run is scored on the same
examples."""

from __future__ import annotations

import json
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


def test_dvc_runs_every_model_stage_per_pretraining_seed(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    _copy_repo(repo)
    write_corpus(repo / "mirror", n_books=4, n_paragraphs=20)
    write_mirror(repo / "mirror", rows=40)
    _set_params(repo, **{
        **TINY, "paths": {"mirror_dir": "mirror"},
        "pretrain": {**TINY["pretrain"], "precision": "fp32", "seeds": SEEDS},
        "finetune": {**TINY["finetune"], "tasks": ["sst2"], "overrides": {}, "seeds": [0, 1],
                     "max_eval_examples": None},
        "ablations": {"tasks": ["sst2"], "variants": ["scratch", "lstm"],
                      "pilot": {"variants": ["scratch"], "lr_grid": [1e-4, 1e-3],
                                "warmup_grid": [0.002], "dev_examples": 8, "seed": 0}},
        "layers": {"tasks": ["sst2"], "layers_transferred": [0, 2],
                   "max_train_examples": None, "max_eval_examples": None},
        "zeroshot": {"tasks": ["sst2"], "max_examples": 8},
        "report": {**TINY["report"], "confirmatory_tasks": ["sst2"]}})  # prepared tasks only
    _run(["git", "init", "-q"], repo)
    _run(["dvc", "init", "-q"], repo)
    _run(["git", "add", "-A"], repo)
    _run(["git", "commit", "-qm", "tiny preset, two pre-training seeds"], repo)

    stages = _run(["dvc", "stage", "list", "--name-only"], repo).split()
    per_seed = ["pretrain@{}", "pretrain_lstm@{}", "finetune@sst2-{}", "ablation@scratch-sst2-{}",
                "ablation@lstm-sst2-{}", "transfer_layers@sst2-0-{}", "transfer_layers@sst2-2-{}",
                "zeroshot@{}", "zeroshot_lstm@{}"]
    assert {s.format(p) for s in per_seed for p in SEEDS} | {"lr_pilot@scratch-sst2",
                                                              "floor@sst2"} <= set(stages)
    out = _run(["dvc", "repro", "report"], repo)
    assert all(f"Running stage '{s.format(p)}'" in out for s in per_seed for p in SEEDS)
    assert out.count("Running stage 'floor@sst2'") == 1  # the floor has no pre-training seed

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
