"""Using the models: `gpt1 generate` sampling rules and `gpt1 predict` on a saved task model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from gpt1 import bpe, checkpoint, generate, predict
from gpt1.__main__ import main
from gpt1.config import GenerateCfg
from gpt1.errors import Gpt1Error
from gpt1.heads import TaskModel
from gpt1.model import GPT
from gpt1.tasks.registry import TASKS
from tests.helpers.runs import random_texts


@pytest.fixture
def lm(tiny_params, tmp_path: Path):
    params = tiny_params.model_copy(update={"bpe": tiny_params.bpe.model_copy(
        update={"n_merges": 40})})
    tok = bpe.train_bpe(random_texts(4, 0), params.bpe, params.paths.tokenizer)
    model = GPT(params.model, tok.vocab_size).eval()
    checkpoint.write_model(checkpoint.pretrain_dir(params, "transformer"), model, {
        "kind": "transformer", "vocab_size": tok.vocab_size, "tokenizer_hash": tok.hash,
        "params": params.as_dict(), "step": 0})
    return params, model, tok


def test_sampling_is_seeded_and_top_k_1_is_greedy(lm) -> None:
    params, model, tok = lm
    ids = generate.encode_prompt(tok, "The cat sat on the mat.")
    cfg = GenerateCfg(max_new_tokens=6, temperature=1.0, top_k=0)
    assert generate.sample_ids(model, ids, cfg, 1) == generate.sample_ids(model, ids, cfg, 1)
    greedy = generate.sample_ids(model, ids, cfg.model_copy(update={"top_k": 1}), 5)
    seq = list(ids)
    with torch.no_grad():
        for _ in range(6):
            h = model(torch.tensor([seq[-params.model.n_positions:]]))
            seq.append(int(model.lm_logits(h)[0, -1].argmax()))
    assert greedy == seq[len(ids):]
    losses = generate.score_texts(model, tok, ["the cat sat.", ""])
    assert losses[0] > 0 and losses[1] != losses[1]  # NaN for a text without 2 tokens


def test_generate_cli_prints_a_continuation_and_checks_flags(lm, tmp_path, capsys) -> None:
    params, _, _ = lm
    params_file = tmp_path / "params.json"
    params_file.write_text(json.dumps(params.as_dict()))
    args = ["--params", str(params_file), "generate", "The cat", "--max-new-tokens", "5"]
    assert main(args) == 0
    first = capsys.readouterr().out
    assert main(args) == 0 and capsys.readouterr().out == first and first.strip()
    assert main([*args, "--temperature", "0"]) == 2
    assert "temperature" in capsys.readouterr().err


def test_predict_scores_a_saved_task_model(lm, tmp_path, capsys) -> None:
    params, model, tok = lm
    task_model = TaskModel(model, TASKS["rte"], 0.1, 0.02)
    model_dir = Path(params.paths.finetuned) / "p1234" / "rte" / predict.MODEL_DIR
    predict.save_task_model(model_dir, task_model, params, "rte", "transformer", tok)
    loaded, tok2, spec, saved = predict.load_task_model(model_dir, params.paths.tokenizer)
    rows = [{"text_a": "a man sleeps.", "text_b": "a person rests."}]
    (out,) = predict.classify(loaded, tok2, spec, saved, rows)
    with torch.no_grad():  # the same head output as the model before saving
        enc = predict.classify(task_model.eval(), tok, spec, params, rows)[0]
    assert out == enc and set(out["probabilities"]) == set(TASKS["rte"].labels)
    assert abs(sum(out["probabilities"].values()) - 1) < 1e-5
    params_file = tmp_path / "params.json"
    params_file.write_text(json.dumps(params.as_dict()))
    assert main(["--params", str(params_file), "predict", "--task", "rte", "a man sleeps.",
                 "--text-b", "a person rests."]) == 0
    line = json.loads(capsys.readouterr().out)
    assert line["text"] == "a man sleeps." and line["label"] == out["label"]
    assert main(["--params", str(params_file), "predict", "--task", "nope", "x"]) == 2
    assert "finetune.tasks" in capsys.readouterr().err
    with pytest.raises(Gpt1Error, match="run the finetune stage"):
        predict.load_task_model(tmp_path / "absent", params.paths.tokenizer)


def _saved(lm, tmp_path: Path, task: str) -> tuple[Path, list[str]]:
    """A task model for `task` at its default place; the CLI's leading arguments."""
    params, model, tok = lm
    model_dir = Path(params.paths.finetuned) / "p1234" / task / predict.MODEL_DIR
    predict.save_task_model(model_dir, TaskModel(model, TASKS[task], 0.1, 0.02), params, task,
                            "transformer", tok)
    params_file = tmp_path / "params.json"
    params_file.write_text(json.dumps(params.as_dict()))
    return model_dir, ["--params", str(params_file), "predict"]


def _refused(capsys, argv: list[str], *needles: str) -> None:
    capsys.readouterr()
    assert main(argv) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and not captured.out, captured
    assert "internal error" not in lines[0] and all(n in lines[0] for n in needles), lines


def test_predict_refuses_a_model_of_another_task(lm, tmp_path, capsys) -> None:
    """--task sst2 with an RTE model is refused naming --task; without --task the model's own
    task answers."""
    rte_dir, cli = _saved(lm, tmp_path, "rte")
    _refused(capsys, [*cli, "--task", "sst2", "--model-dir", str(rte_dir), "a man sleeps."],
             "--task sst2", "fine-tuned on rte")
    assert main([*cli, "--model-dir", str(rte_dir), "a man sleeps.", "--text-b", "he rests."]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out["probabilities"]) == set(TASKS["rte"].labels)
    _refused(capsys, [*cli, "a man sleeps."], "--task")


@pytest.mark.parametrize(
    ("task", "extra", "needles"),
    [
        ("rte", [], ("--text-b", "rte compares two texts")),
        ("rte", ["--text-b", "  "], ("--text-b", "rte compares two texts")),
        ("mrpc", ["--text-b", "b", "--choices", "x", "y"], ("--choices", "not a multiple")),
        ("sst2", ["--text-b", "b"], ("--text-b", "sst2 reads one text")),
        ("race", ["--choices", "a", "b"], ("--choices", "race needs 4 answers", "got 2")),
        ("story_cloze", [], ("--choices", "story_cloze needs 2 answers", "got 0")),
    ],
)
def test_predict_enforces_each_tasks_inputs(lm, tmp_path, capsys, task, extra, needles) -> None:
    _, cli = _saved(lm, tmp_path, task)
    _refused(capsys, [*cli, "--task", task, "a text.", *extra], *needles)


def test_predict_accepts_a_choice_task_with_its_answers(lm, tmp_path, capsys) -> None:
    _, cli = _saved(lm, tmp_path, "story_cloze")
    assert main([*cli, "--task", "story_cloze", "she baked.", "--choices", "it was good.",
                 "it flew."]) == 0
    assert set(json.loads(capsys.readouterr().out)["probabilities"]) == {"1", "2"}
