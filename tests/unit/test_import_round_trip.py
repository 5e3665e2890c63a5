"""The released-weights round trip: `import-hf SRC OUT` is a first-class model folder (its
tokenizer found wherever the run is) for generate, export-hf and, after fine-tuning, predict,
in a repository and outside any; import-hf runs outside a repository and keeps the task head
of a fine-tuned export (or names the head it cannot keep)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from gpt1 import bpe, checkpoint, predict
from gpt1.__main__ import main
from gpt1.heads import TaskModel
from gpt1.tasks.registry import TASKS
from tests.helpers.cli import refused
from tests.helpers.hf_checkpoint import write_tiny_openai_gpt
from tests.helpers.runs import random_texts, task_export

pytest.importorskip("transformers")


def _ok(capsys, argv: list[str]) -> str:
    """`gpt1 argv` succeeds; its stdout."""
    capsys.readouterr()
    code = main(argv)
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return captured.out


def _repo(make_params, tmp_path: Path) -> Path:
    """A workspace (dvc.yaml, params.yaml) whose paths.tokenizer holds a tokenizer of its own,
    as after train_bpe: not the one of the weights imported below."""
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "dvc.yaml").write_text("stages: {}\n")
    params = make_params({"bpe": {"n_merges": 40}})
    bpe.train_bpe(random_texts(4, 0), params.bpe, params.paths.tokenizer)
    (repo / "params.yaml").write_text(json.dumps(params.as_dict()))
    return repo


def _fine_tune(repo: Path, run: Path, task: str) -> Path:
    """A fine-tuned model of the imported run as the finetune stage saves it, its params
    naming the imported tokenizer as the docs say (paths.tokenizer: <OUT>/tokenizer,
    relative to the repository)."""
    tok = bpe.load_bpe(run / "tokenizer")
    body, meta = checkpoint.load_model(run, tok.hash)
    raw = meta["params"]
    raw["paths"]["tokenizer"] = str((run / "tokenizer").relative_to(repo))
    params = checkpoint.recorded_params(meta, run / "model.json").model_validate(raw)
    model = TaskModel(body, TASKS[task], 0.1, 0.02)
    with torch.no_grad():
        torch.nn.init.normal_(model.head.linear.weight, std=1.0)
    out = repo / "data" / "finetuned" / "p1" / task / predict.MODEL_DIR
    predict.save_task_model(out, model, params, task, "transformer", tok)
    return out


def test_imported_run_serves_generate_export_and_predict_in_and_outside_the_repo(
        make_params, tmp_path, capsys, monkeypatch):
    src = tmp_path / "openai-gpt"
    write_tiny_openai_gpt(src)
    repo = _repo(make_params, tmp_path)
    monkeypatch.chdir(repo)
    _ok(capsys, ["import-hf", str(src), "imported"])
    gen = ["the cat", "--max-new-tokens", "5", "--seed", "3"]
    text = _ok(capsys, ["generate", "--model", "imported", *gen])
    assert text.strip()
    _ok(capsys, ["export-hf", "--model", "imported", "hf-lm"])
    assert _ok(capsys, ["generate", "--model", "hf-lm", *gen]) == text
    _ok(capsys, ["export-hf", "imported", "hf-old-form"])  # RUN_DIR OUT_DIR = --model RUN_DIR
    assert _ok(capsys, ["generate", "--model", "hf-old-form", *gen]) == text
    ft = _fine_tune(repo, repo / "imported", "sst2")
    answer = _ok(capsys, ["predict", "--model", str(ft.relative_to(repo)), "a fine film"])
    assert json.loads(answer)["label"] in TASKS["sst2"].labels
    _ok(capsys, ["export-hf", "--model", str(ft.relative_to(repo)), "hf-sst2"])
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # no params.yaml, no repository
    assert _ok(capsys, ["generate", "--model", str(repo / "imported"), *gen]) == text
    _ok(capsys, ["export-hf", "--model", str(repo / "imported"), "hf-lm"])
    assert _ok(capsys, ["generate", "--model", "hf-lm", *gen]) == text
    assert _ok(capsys, ["predict", "--model", str(ft), "a fine film"]) == answer
    assert _ok(capsys, ["predict", "--model", str(repo / "hf-sst2"), "a fine film"]) == answer


def test_import_hf_outside_a_repository_needs_no_params(tmp_path, capsys, monkeypatch):
    src = tmp_path / "openai-gpt"
    write_tiny_openai_gpt(src)
    monkeypatch.chdir(tmp_path)
    _ok(capsys, ["import-hf", str(src), "imported"])
    meta = checkpoint.read_model_meta(tmp_path / "imported")
    assert meta["params"]["model"]["n_layer"] == 2 and meta["imported_from"]["source"] == str(src)
    assert _ok(capsys, ["generate", "--model", "imported", "the cat", "--max-new-tokens", "3"])


@pytest.mark.parametrize("task,inputs", [
    ("rte", ["a man sleeps.", "--text-b", "a person rests."]),
    ("story_cloze", ["she left.", "--choices", "it rained.", "the sea sang."])])
def test_import_of_a_fine_tuned_export_outside_a_repository_keeps_its_head(
        tiny_params, tmp_path, capsys, monkeypatch, task, inputs):
    task_export(tiny_params, tmp_path / "w", task)  # w/ft (fine-tuned), w/hf (its export)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    expected = _ok(capsys, ["predict", "--model", str(tmp_path / "w" / "hf"), *inputs])
    _ok(capsys, ["import-hf", str(tmp_path / "w" / "hf"), "imported"])
    meta = checkpoint.read_model_meta(elsewhere / "imported")
    assert meta["task"] == task
    assert sorted(p.name for p in (elsewhere / "imported").iterdir()) == [
        "model.json", "model.safetensors", "tokenizer"]
    assert _ok(capsys, ["predict", "--model", "imported", *inputs]) == expected


@pytest.mark.parametrize("task,head", [("rte", "task_head.safetensors"),
                                       ("story_cloze", "multiple_choice_head")])
def test_a_task_head_import_hf_cannot_keep_is_named(tiny_params, tmp_path, capsys, monkeypatch,
                                                    task, head):
    """Without gpt1_model.json nothing says which task a head answers: refused, naming it."""
    task_export(tiny_params, tmp_path / "w", task)
    (tmp_path / "w" / "hf" / "gpt1_model.json").unlink()
    monkeypatch.chdir(tmp_path)
    refused(capsys, ["import-hf", str(tmp_path / "w" / "hf"), "imported"], head,
             "import-hf keeps a task head only from a gpt1 export-hf folder")
    assert not (tmp_path / "imported").exists()
