"""export-hf: transformers' OpenAIGPTLMHeadModel loaded from our export gives our logits."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from gpt1 import bpe, checkpoint, stages
from gpt1.__main__ import main
from gpt1.errors import Gpt1Error
from gpt1.export import export_hf
from gpt1.model import GPT
from tests.unit.test_checkpoint import _prepare, _texts

transformers = pytest.importorskip("transformers")


def _hf_logits(out_dir: Path, idx: torch.Tensor) -> torch.Tensor:
    hf = transformers.OpenAIGPTLMHeadModel.from_pretrained(out_dir, local_files_only=True)
    with torch.no_grad():
        return hf.eval()(idx).logits


def _our_logits(model, idx):
    with torch.no_grad():
        return model.eval().lm_logits(model.eval()(idx))


def _random_run(params, run_dir: Path, tok_hash: str, vocab: int) -> GPT:
    model = GPT(params.model, vocab)
    with torch.no_grad():  # non-trivial LayerNorm gains and biases too
        for name, p in model.named_parameters():
            if "ln_" in name or name.endswith("bias"):
                p.add_(0.1 * torch.randn_like(p))
    checkpoint.write_model(run_dir, model, {"kind": "gpt", "vocab_size": vocab,
                                            "tokenizer_hash": tok_hash, "params": params.as_dict(),
                                            "step": 0})
    return model


def test_random_tiny_model_matches_transformers(tiny_params, tmp_path):
    params = tiny_params.model_copy(update={"bpe": tiny_params.bpe.model_copy(
        update={"n_merges": 40})})
    tok = bpe.train_bpe(_texts(4, 0), params.bpe, tmp_path / "tok")
    model = _random_run(params, tmp_path / "run", tok.hash, tok.vocab_size)
    export_hf(tmp_path / "run", tmp_path / "hf", tmp_path / "tok")
    idx = torch.randint(0, tok.vocab_size, (3, params.model.n_positions))
    diff = (_our_logits(model, idx) - _hf_logits(tmp_path / "hf", idx)).abs().max().item()
    assert diff <= 1e-4, diff


def test_trained_checkpoint_matches_transformers_via_cli(tmp_path):
    params_file, params = _prepare(tmp_path, "run", {"pretrain": {"max_tokens": 16 * 4 * 32}})
    stages.pretrain(params)
    out = tmp_path / "hf"
    assert main(["--params", str(params_file), "export-hf", params.paths.checkpoints,
                 str(out)]) == 0
    model, meta = checkpoint.load_model(params.paths.checkpoints, None)
    idx = torch.randint(0, meta["vocab_size"], (2, params.pretrain.seq_len))
    diff = (_our_logits(model, idx) - _hf_logits(out, idx)).abs().max().item()
    assert diff <= 1e-4, diff
    # the tokenizer files load in transformers and tokenize as ours (standardized input)
    ours = bpe.load_bpe(params.paths.tokenizer)
    hf_tok = transformers.AutoTokenizer.from_pretrained(out, local_files_only=True)
    text = _texts(1, 5)[0][:200]
    assert hf_tok(text, add_special_tokens=False)["input_ids"] == ours.encode_batch([text])[0]
    specials = list(params.bpe.special_tokens)
    assert hf_tok.convert_tokens_to_ids(specials) == [ours.start_id, ours.delimiter_id,
                                                      ours.classify_id]
    assert sorted((out).iterdir())  # config.json, model.safetensors, vocab.json, merges.txt ...
    for name in ["config.json", "model.safetensors", "vocab.json", "merges.txt",
                 "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"]:
        assert (out / name).is_file(), name


@pytest.mark.parametrize("change", [{"arch": "gpt2"}, {"n_inner": 96}])
def test_unmappable_models_are_refused(tiny_params, tmp_path, change):
    params = tiny_params.model_copy(update={
        "model": tiny_params.model.model_copy(update=change),
        "bpe": tiny_params.bpe.model_copy(update={"n_merges": 40})})
    tok = bpe.train_bpe(_texts(4, 0), params.bpe, tmp_path / "tok")
    _random_run(params, tmp_path / "run", tok.hash, tok.vocab_size)
    with pytest.raises(Gpt1Error, match="model.json"):
        export_hf(tmp_path / "run", tmp_path / "hf", tmp_path / "tok")
    assert not (tmp_path / "hf").exists()


def test_other_tokenizer_is_refused(tiny_params, tmp_path):
    params = tiny_params.model_copy(update={"bpe": tiny_params.bpe.model_copy(
        update={"n_merges": 40})})
    tok = bpe.train_bpe(_texts(4, 0), params.bpe, tmp_path / "tok")
    _random_run(params, tmp_path / "run", tok.hash, tok.vocab_size)
    bpe.train_bpe(_texts(4, 1), params.bpe, tmp_path / "tok")
    with pytest.raises(Gpt1Error, match="trained with tokenizer"):
        export_hf(tmp_path / "run", tmp_path / "hf", tmp_path / "tok")


def test_finetuned_model_exports_its_body_head_and_card(tiny_params, tmp_path):
    from gpt1.heads import TaskModel
    from gpt1.predict import save_task_model
    from gpt1.tasks.registry import TASKS

    params = tiny_params.model_copy(update={"bpe": tiny_params.bpe.model_copy(
        update={"n_merges": 40})})
    tok = bpe.train_bpe(_texts(4, 0), params.bpe, tmp_path / "tok")
    body = _random_run(params, tmp_path / "run", tok.hash, tok.vocab_size)
    task_model = TaskModel(body, TASKS["sst2"], 0.1, 0.02)
    save_task_model(tmp_path / "ft", task_model, params, "sst2", "gpt", tok)
    metrics = tmp_path / "metrics"
    metrics.mkdir()
    (metrics / "finetune_sst2.json").write_text('{"scores": {"acc": {"mean": 0.61}}}')
    export_hf(tmp_path / "ft", tmp_path / "hf", tmp_path / "tok", metrics)
    idx = torch.randint(0, tok.vocab_size, (2, params.model.n_positions))
    diff = (_our_logits(body, idx) - _hf_logits(tmp_path / "hf", idx)).abs().max().item()
    assert diff <= 1e-4, diff
    head = load_file(tmp_path / "hf" / "task_head.safetensors")
    assert torch.equal(head["weight"], task_model.head.linear.weight.detach())
    assert json.loads((tmp_path / "hf" / "task_head.json").read_text())["labels"] == [
        "negative", "positive"]
    card = (tmp_path / "hf" / "README.md").read_text()
    assert "fine-tuned on **sst2**" in card and '"mean": 0.61' in card and "## Limits" in card
    assert f"vocabulary {tok.vocab_size}" in card


def test_pretrained_export_card_without_metrics(tiny_params, tmp_path):
    params = tiny_params.model_copy(update={"bpe": tiny_params.bpe.model_copy(
        update={"n_merges": 40})})
    tok = bpe.train_bpe(_texts(4, 0), params.bpe, tmp_path / "tok")
    _random_run(params, tmp_path / "run", tok.hash, tok.vocab_size)
    export_hf(tmp_path / "run", tmp_path / "hf", tmp_path / "tok", tmp_path / "no-metrics")
    card = (tmp_path / "hf" / "README.md").read_text()
    assert card.startswith("# gpt1 export: pre-trained LM") and "No metrics file" in card
    assert not (tmp_path / "hf" / "task_head.json").exists()
