"""The paper-finetune preset end to end through DVC on a tiny imported model.

A copy of the repo with a tiny generated mirror and a tiny transformers OpenAIGPTLMHeadModel
(saved with save_pretrained) in models/openai-gpt runs `dvc repro` of configs/paper-finetune.yaml
shrunk to CPU size: train_bpe and pretrain import the checkpoint instead of training, a task is
fine-tuned with and without the auxiliary LM, the stages that need our own pre-training record
that they did not run, and the report's banner names the imported checkpoint.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.helpers.corpus import write_corpus
from tests.helpers.dvc_repo import copy_repo as _copy_repo
from tests.helpers.dvc_repo import run as _run
from tests.helpers.hf_checkpoint import write_tiny_openai_gpt
from tests.helpers.params import deep_merge
from tests.helpers.repo import REPO
from tests.helpers.task_mirror import write_mirror

pytestmark = pytest.mark.slow
TASKS = ["sst2"]  # one task, fine-tuned with and without the auxiliary LM


def _tiny_preset(n_merges: int) -> dict:
    preset = yaml.safe_load((REPO / "configs" / "paper-finetune.yaml").read_text())
    return deep_merge(preset, {
        "device": "cpu",
        "paths": {"mirror_dir": "mirror"},
        "tracking": {"enabled": False},
        "clean": {"workers": 1},
        "bpe": {"n_merges": n_merges, "min_frequency": 1},
        "shard": {"tokens_per_shard": 5000, "val_frac": 0.25},
        "model": {"n_positions": 32, "n_embd": 32, "n_layer": 2, "n_head": 2, "n_inner": 128},
        "pretrain": {"seq_len": 32, "batch_seqs": 4, "micro_batch_seqs": 2, "eval_batches": 2,
                     "precision": "fp32"},
        "finetune": {"tasks": TASKS, "seeds": [0], "max_train_examples": 12,
                     "max_eval_examples": 8, "epochs": 1, "batch_size": 4},
        "tasks": {"dev_examples": {"story_cloze": 3}, "truncation_overrides": {}},  # no RACE here
        "ablations": {"tasks": ["sst2"]},
        "curves": {"ns": [8], "checkpoints": [0]},  # one point each (no checkpoints to start from)
        "zeroshot": {"tasks": TASKS, "max_examples": 8},  # prepared tasks only
        "report": {"bootstrap_samples": 200, "confirmatory_tasks": ["sst2"]},  # prepared ones
    })


def test_dvc_repro_of_the_import_preset(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    _copy_repo(repo)
    write_corpus(repo / "mirror", n_books=4, n_paragraphs=10)
    write_mirror(repo / "mirror", rows=30)
    info = write_tiny_openai_gpt(repo / "models" / "openai-gpt")  # git-ignored, as downloaded
    preset = _tiny_preset(len(info["merges"]))
    assert preset["pretrain"]["import_hf"] == "models/openai-gpt"
    (repo / "params.yaml").write_text(yaml.safe_dump(preset, sort_keys=False))
    _run(["git", "init", "-q"], repo)
    _run(["dvc", "init", "-q"], repo)
    _run(["git", "add", "-A"], repo)
    _run(["git", "commit", "-qm", "tiny paper-finetune preset"], repo)
    out = _run(["dvc", "repro"], repo)
    for stage in ("train_bpe", "pretrain@1234", "finetune@sst2-1234", "ablation@no_aux-sst2-1234",
                  "report"):
        assert f"Running stage '{stage}'" in out, stage
    assert "transfer_layers" not in out and "ablation@scratch" not in out  # left out

    metrics = repo / "reports" / "metrics"
    pre = json.loads((metrics / "pretrain_p1234.info.json").read_text())
    assert pre["imported_from"]["source"] == "models/openai-gpt"
    assert json.loads((metrics / "pretrain_p1234.json").read_text())["val_ppl"] > 1
    run_dir = repo / "data" / "pretrain" / "transformer" / "p1234"
    model = json.loads((run_dir / "model.json").read_text())
    assert model["vocab_size"] == len(info["vocab"]) + 3
    for stage in ("zeroshot_p1234", "zeroshot_lstm_p1234", "pretrain_lstm_p1234"):
        assert json.loads((metrics / f"{stage}.info.json").read_text())["not_run"].startswith(
            "not run: pretrain.import_hf")
    assert "acc" in json.loads((metrics / "finetune_sst2_p1234.json").read_text())["scores"]

    report = (repo / "reports" / "report.md").read_text()
    banner = next(line for line in report.splitlines() if line.startswith("> **Preset"))
    assert "paper-finetune" in banner and "imported from `models/openai-gpt`" in banner
    assert "No zero-shot results" in report

    again = _run(["dvc", "repro"], repo)  # only the mirror scan re-runs: the import is cached
    assert "Running stage 'scan_mirror'" in again and "Running stage 'pretrain'" not in again
    assert "Running stage 'train_bpe'" not in again
