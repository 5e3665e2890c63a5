"""export-hf: transformers' OpenAIGPTLMHeadModel loaded from our export gives our logits."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from gpt1 import bpe, checkpoint
from gpt1.__main__ import main
from gpt1.errors import Gpt1Error
from gpt1.export import export_hf, load_export
from gpt1.model import GPT
from gpt1.stages import pretrain as pretrain_stages
from tests.helpers.runs import prepare_run, random_run, random_texts, task_export, tiny_run

transformers = pytest.importorskip("transformers")


def _hf_logits(out_dir: Path, idx: torch.Tensor) -> torch.Tensor:
    hf = transformers.OpenAIGPTLMHeadModel.from_pretrained(out_dir, local_files_only=True)
    with torch.no_grad():
        return hf.eval()(idx).logits


def _our_logits(model, idx):
    with torch.no_grad():
        return model.eval().lm_logits(model.eval()(idx))


@pytest.mark.parametrize("pad", [1, 64])
def test_random_tiny_model_matches_transformers(tiny_params, tmp_path, pad):
    """Also with the output rows padded (model.vocab_pad_multiple): the export strips them."""
    params = tiny_params.model_copy(update={
        "bpe": tiny_params.bpe.model_copy(update={"n_merges": 40}),
        "model": tiny_params.model.model_copy(update={"vocab_pad_multiple": pad})})
    tok = bpe.train_bpe(random_texts(4, 0), params.bpe, tmp_path / "tok")
    model = random_run(params, tmp_path / "run", tok.hash, tok.vocab_size)
    assert (model.tokens_embed.weight.shape[0] > tok.vocab_size) == (pad > 1)
    export_hf(tmp_path / "run", tmp_path / "hf", tmp_path / "tok")
    exported = load_file(tmp_path / "hf" / "model.safetensors")
    assert exported["transformer.tokens_embed.weight"].shape[0] == tok.vocab_size
    idx = torch.randint(0, tok.vocab_size, (3, params.model.n_positions))
    diff = (_our_logits(model, idx) - _hf_logits(tmp_path / "hf", idx)).abs().max().item()
    assert diff <= 1e-4, diff


def test_trained_checkpoint_matches_transformers_via_cli(tmp_path):
    params_file, params = prepare_run(tmp_path, "run", {"pretrain": {"max_tokens": 16 * 4 * 32}})
    pretrain_stages.pretrain(params)
    out = tmp_path / "hf"
    run_dir = checkpoint.pretrain_dir(params, "transformer")
    assert main(["--params", str(params_file), "export-hf", str(run_dir), str(out)]) == 0
    model, meta = checkpoint.load_model(run_dir, None)
    idx = torch.randint(0, meta["vocab_size"], (2, params.pretrain.seq_len))
    diff = (_our_logits(model, idx) - _hf_logits(out, idx)).abs().max().item()
    assert diff <= 1e-4, diff
    # the tokenizer files load in transformers and tokenize as ours (standardized input),
    # a text cut after n_positions - 3 characters (never more tokens than the context)
    ours = bpe.load_bpe(params.paths.tokenizer)
    hf_tok = transformers.AutoTokenizer.from_pretrained(out, local_files_only=True)
    cut = params.model.n_positions - 3
    text = random_texts(1, 5)[0]
    kept = text[:next(i for i in range(len(text)) if len(text[:i].replace(" ", "")) == cut)]
    assert hf_tok(text, add_special_tokens=False)["input_ids"] == ours.encode_batch([kept])[0]
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
    tok = bpe.train_bpe(random_texts(4, 0), params.bpe, tmp_path / "tok")
    random_run(params, tmp_path / "run", tok.hash, tok.vocab_size)
    with pytest.raises(Gpt1Error, match="model.json"):
        export_hf(tmp_path / "run", tmp_path / "hf", tmp_path / "tok")
    assert not (tmp_path / "hf").exists()


def test_other_tokenizer_is_refused(tiny_params, tmp_path):
    params = tiny_params.model_copy(update={"bpe": tiny_params.bpe.model_copy(
        update={"n_merges": 40})})
    tok = bpe.train_bpe(random_texts(4, 0), params.bpe, tmp_path / "tok")
    random_run(params, tmp_path / "run", tok.hash, tok.vocab_size)
    bpe.train_bpe(random_texts(4, 1), params.bpe, tmp_path / "tok")
    with pytest.raises(Gpt1Error, match="trained with tokenizer"):
        export_hf(tmp_path / "run", tmp_path / "hf", tmp_path / "tok")


def test_finetuned_model_exports_its_body_head_and_card(tiny_params, tmp_path):
    from gpt1.heads import TaskModel
    from gpt1.predict import save_task_model
    from gpt1.tasks.registry import TASKS

    params = tiny_params.model_copy(update={"bpe": tiny_params.bpe.model_copy(
        update={"n_merges": 40})})
    tok = bpe.train_bpe(random_texts(4, 0), params.bpe, tmp_path / "tok")
    body = random_run(params, tmp_path / "run", tok.hash, tok.vocab_size)
    task_model = TaskModel(body, TASKS["sst2"], 0.1, 0.02)
    save_task_model(tmp_path / "ft", task_model, params, "sst2", "transformer", tok, 7)
    metrics = tmp_path / "metrics"
    metrics.mkdir()
    (metrics / "finetune_sst2.json").write_text('{"scores": {"acc": {"mean": 0.5}}}')
    (metrics / "finetune_sst2_p7.json").write_text('{"scores": {"acc": {"mean": 0.61}}}')
    export_hf(tmp_path / "ft", tmp_path / "hf", tmp_path / "tok", metrics)
    idx = torch.randint(0, tok.vocab_size, (2, params.model.n_positions))
    back, _ = load_export(tmp_path / "hf")  # the body read back exactly (bias unfolded)
    diff = (_our_logits(body, idx) - _our_logits(back.body, idx)).abs().max().item()
    assert diff <= 1e-5, diff
    head = load_file(tmp_path / "hf" / "task_head.safetensors")
    assert torch.equal(head["weight"], task_model.head.linear.weight.detach())
    assert json.loads((tmp_path / "hf" / "task_head.json").read_text())["labels"] == [
        "negative", "positive"]
    card = (tmp_path / "hf" / "README.md").read_text()
    assert "fine-tuned on **sst2**" in card and "| acc | 0.6100 |" in card and "## Limits" in card
    assert f"vocabulary {tok.vocab_size}" in card
    from huggingface_hub import ModelCard  # the header is the Hub's metadata

    data = ModelCard.load(tmp_path / "hf" / "README.md").data
    assert card.startswith("---\n") and data.license == "mit"
    assert (data.library_name, data.pipeline_tag) == ("transformers", "text-classification")
    assert data.datasets == ["project-gutenberg (local mirror)", "nyu-mll/glue"]  # the source
    assert data.metrics == ["accuracy"]
    (result,) = data.eval_results  # model-index: the recorded score
    assert (result.metric_type, result.metric_value, result.dataset_type) == (
        "accuracy", 0.61, "nyu-mll/glue")


def test_card_datasets_name_the_corpus_the_run_used() -> None:
    from gpt1.model_card import corpus

    def params(source: str, import_hf: str | None = None) -> dict:
        return {"data": {"source": source, "hub_dataset": "bookcorpus"},
                "clean": {"strip_gutenberg": True}, "pretrain": {"import_hf": import_hf}}

    assert corpus(params("mirror")) == "project-gutenberg (local mirror)"
    assert corpus(params("hub")) == "bookcorpus"
    assert corpus(params("mirror", "models/openai-gpt")) == "bookcorpus"  # the released weights


RAW = [("Don't you think the film's ending was GREAT?!", "Nobody's sleeping."),
       ("I couldn't stop laughing... it's a masterpiece, really.", "He'd left (again)."),
       ("Mr. Smith's café served crème brûlée—delicious!", "The U.S. team won 3-2."),
       ("\u201cIt wasn't bad,\u201d she said; the king's ship sailed at 10am.", "I'm not sure.")]
"""Raw sentences: punctuation, contractions, capitals, curly quotes, dashes and accents."""


@pytest.mark.parametrize("task", ["sst2", "rte", "questions"])
def test_text_classification_pipeline_answers_as_predict(make_params, tmp_path, task):
    """transformers' pipeline("text-classification") on the export, with no extra argument,
    gives `gpt1 predict`'s labels and probabilities on raw sentences (a pair as text /
    text_pair; a task of the user's own too): its tokenizer standardises the text as gpt1
    does, lays the input out as fine-tuning does, drops a symbol it never saw as ours does,
    and cuts a 2,000-word input to the context. Every file is readable by all (0644)."""
    from gpt1.predict import classify, load_task_model
    from gpt1.tasks.registry import register_custom

    params = make_params({"model": {"n_positions": 128},  # every RAW input fits, uncut
                          "tasks": {"custom": {"questions": {
                              "file": "questions.csv", "text": "question", "label": "topic",
                              "labels": ["cooking", "sports", "music"]}}}})
    task_export(params, tmp_path, task)
    model, tok, spec, saved = load_task_model(tmp_path / "ft", tmp_path / "tok")
    rows = [{"text_a": a, "text_b": b if task == "rte" else ""} for a, b in RAW]
    ours = classify(model, tok, spec, saved, rows)
    pipe = transformers.pipeline("text-classification", model=str(tmp_path / "hf"),
                                 device="cpu")
    inputs = [{"text": a, "text_pair": b} if task == "rte" else a for a, b in RAW]
    for mine, theirs in zip(ours, [pipe(x, top_k=None) for x in inputs], strict=True):
        assert theirs[0]["label"] == mine["label"]
        for answer in theirs:
            assert abs(answer["score"] - mine["probabilities"][answer["label"]]) <= 1e-3
    long_text = " ".join(["The film's plot, sadly, wasn't great."] * 300)  # 2,100 words
    hf_tok = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf", local_files_only=True)
    long_input = {"text": long_text, "text_pair": long_text} if task == "rte" else long_text
    pair = (long_text, long_text) if task == "rte" else (long_text,)
    assert len(hf_tok(*pair)["input_ids"]) <= saved.model.n_positions
    answer = pipe(long_input)  # a pair of 2,000-word texts too
    assert (answer[0] if isinstance(answer, list) else answer)["label"] in spec.labels
    assert hf_tok.model_max_length == saved.model.n_positions
    ids = hf_tok("naïve ☃ the ship")["input_ids"]  # unseen symbols: dropped, as ours drops them
    assert ids == [tok.start_id, *tok.encode_batch(["naïve ☃ the ship"])[0], tok.classify_id]
    if task == "rte":
        assert hf_tok("a", "b")["input_ids"][-1] == tok.classify_id
        assert tok.delimiter_id in hf_tok("the", "ship")["input_ids"]
    assert {oct(p.stat().st_mode & 0o777) for p in (tmp_path / "hf").iterdir()} == {"0o644"}
    register_custom({})


def test_card_names_the_corpus_size_the_workspace_recorded(tiny_params, tmp_path):
    """The card's corpus size is the clean_corpus record's document count, never a preset's."""
    from gpt1.export import _corpus_documents
    from gpt1.model_card import model_card

    (tmp_path / "clean_corpus.json").write_text(json.dumps({"documents": 4}))
    assert _corpus_documents(tmp_path) == 4 and _corpus_documents(tmp_path / "none") is None
    meta = {"params": tiny_params.as_dict(), "vocab_size": 10, "tokenizer_hash": "ab" * 32}
    assert "pre-trained on 4 public-domain books" in model_card(meta, None, None, documents=4)
    unknown = model_card(meta, None, None)
    assert "113" not in unknown and "project-gutenberg (local mirror) (public-domain" in unknown


def test_pretrained_export_card_without_metrics(tiny_params, tmp_path):
    params = tiny_params.model_copy(update={"bpe": tiny_params.bpe.model_copy(
        update={"n_merges": 40})})
    tok = bpe.train_bpe(random_texts(4, 0), params.bpe, tmp_path / "tok")
    random_run(params, tmp_path / "run", tok.hash, tok.vocab_size)
    export_hf(tmp_path / "run", tmp_path / "hf", tmp_path / "tok", tmp_path / "no-metrics")
    card = (tmp_path / "hf" / "README.md").read_text()
    assert card.startswith("---\n") and "\nlicense: mit\n" in card and "No metrics file" in card
    assert "\n# gpt1 export: pre-trained LM" in card and "pipeline_tag: text-generation" in card
    assert not (tmp_path / "hf" / "task_head.json").exists()


def _cli_export(params, tmp_path, out: Path, *flags: str) -> int:
    params_file = tmp_path / "params.yaml"
    raw = params.as_dict()
    raw["paths"]["tokenizer"] = str(tmp_path / "tok")
    params_file.write_text(json.dumps(raw))
    return main(["--params", str(params_file), "export-hf", str(tmp_path / "run"), str(out),
                 *flags])


def test_export_refuses_a_non_empty_folder_and_a_file(tiny_params, tmp_path, capsys):
    """OUT_DIR holding the user's files, or being a file, is refused in one line (exit 2),
    and left exactly as it was, with nothing hidden beside it."""
    params = tiny_run(tiny_params, tmp_path / "w")
    work = tmp_path / "w"
    folder, file = work / "mine", work / "notes.txt"
    folder.mkdir()
    (folder / "thesis.tex").write_text("mine")
    file.write_text("my notes")
    before = sorted(p.name for p in work.iterdir())
    for out, needle in ((folder, "folder is not empty"), (file, "exists and is not a folder")):
        capsys.readouterr()
        assert _cli_export(params, work, out) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and str(out) in err[0] and needle in err[0], err
    assert (folder / "thesis.tex").read_text() == "mine" and file.read_text() == "my notes"
    assert sorted(p.name for p in folder.iterdir()) == ["thesis.tex"]
    assert sorted(p.name for p in work.iterdir()) == sorted([*before, "params.yaml"])
    capsys.readouterr()
    assert _cli_export(params, work, file, "--overwrite") == 2  # a file is never replaced
    assert "exists and is not a folder" in capsys.readouterr().err
    assert file.read_text() == "my notes"


def test_export_overwrite_replaces_only_its_own_files(tiny_params, tmp_path):
    """--overwrite: the export's files are replaced (a stale task head of an earlier export
    removed), the user's files stay, no temp or .old path is left beside OUT_DIR."""
    from gpt1.export import EXPORT_FILES

    params = tiny_run(tiny_params, tmp_path / "w")
    work, out = tmp_path / "w", tmp_path / "w" / "hf"
    out.mkdir()
    (out / "notes.md").write_text("mine")
    (out / "task_head.json").write_text("{}")  # as an earlier fine-tuned export left it
    (out / "config.json").write_text("{}")
    assert _cli_export(params, work, out, "--overwrite") == 0
    assert (out / "notes.md").read_text() == "mine"
    assert not (out / "task_head.json").exists()
    assert json.loads((out / "config.json").read_text())["model_type"] == "openai-gpt"
    assert set(p.name for p in out.iterdir()) - {"notes.md"} <= set(EXPORT_FILES)
    assert sorted(p.name for p in work.iterdir()) == ["hf", "params.yaml", "run", "tok"]
    idx = torch.randint(0, 10, (1, params.model.n_positions))
    assert _hf_logits(out, idx).shape[-1] == json.loads((out / "config.json").read_text())[
        "vocab_size"]


def test_export_into_an_empty_folder(tiny_params, tmp_path):
    params = tiny_run(tiny_params, tmp_path / "w")
    out = tmp_path / "w" / "hf"
    out.mkdir()
    assert _cli_export(params, tmp_path / "w", out) == 0
    assert (out / "model.safetensors").is_file()
    assert sorted(p.name for p in (tmp_path / "w").iterdir()) == ["hf", "params.yaml", "run",
                                                                  "tok"]


def test_run_written_before_vocabulary_padding_still_loads(tiny_params, tmp_path):
    """A model.json without model.vocab_pad_multiple (older runs) loads as unpadded and exports."""
    params = tiny_params.model_copy(update={"bpe": tiny_params.bpe.model_copy(
        update={"n_merges": 40})})
    tok = bpe.train_bpe(random_texts(4, 0), params.bpe, tmp_path / "tok")
    raw = params.as_dict()
    del raw["model"]["vocab_pad_multiple"]
    model = GPT(params.model, tok.vocab_size)
    checkpoint.write_model(tmp_path / "run", model, {
        "kind": "transformer", "vocab_size": tok.vocab_size, "tokenizer_hash": tok.hash,
        "params": raw, "step": 0})
    loaded, _ = checkpoint.load_model(tmp_path / "run", tok.hash)
    assert torch.equal(loaded.tokens_embed.weight, model.tokens_embed.weight)
    export_hf(tmp_path / "run", tmp_path / "hf", tmp_path / "tok")
    idx = torch.randint(0, tok.vocab_size, (2, params.model.n_positions))
    diff = (_our_logits(model, idx) - _hf_logits(tmp_path / "hf", idx)).abs().max().item()
    assert diff <= 1e-4, diff


def test_choice_head_exports_as_transformers_double_heads_model(tiny_params, tmp_path):
    """A multiple-choice model loads as OpenAIGPTDoubleHeadsModel; its mc_logits at the
    `_classify_` token are our choice head's scores."""
    _, task_model, tok = task_export(tiny_params, tmp_path, "story_cloze")
    assert not (tmp_path / "hf" / "task_head.safetensors").exists()
    hf = transformers.OpenAIGPTDoubleHeadsModel.from_pretrained(tmp_path / "hf",
                                                                local_files_only=True).eval()
    idx = torch.randint(0, tok.vocab_size - 3, (2, 2, 10))  # 2 examples x 2 answers
    idx[:, :, -1] = tok.classify_id
    lengths = torch.full((2, 2), 10)
    with torch.no_grad():
        ours, _ = task_model(idx, lengths)
        theirs = hf(idx, mc_token_ids=lengths - 1).mc_logits
    assert (ours - theirs).abs().max().item() <= 1e-4
    card = (tmp_path / "hf" / "README.md").read_text()
    assert "OpenAIGPTDoubleHeadsModel" in card


@pytest.mark.parametrize("task", ["rte", "story_cloze"])
def test_predict_reads_an_export_outside_the_repository(tiny_params, tmp_path, monkeypatch,
                                                         capsys, task):
    """`gpt1 predict --model <export-hf folder>` answers from the folder alone (no params file,
    cwd outside any repository), as the fine-tuned model does; --model-dir is its alias."""
    params, _, _ = task_export(tiny_params, tmp_path / "w", task)
    raw = params.as_dict()
    raw["paths"]["tokenizer"] = str(tmp_path / "w" / "tok")
    (tmp_path / "w" / "params.yaml").write_text(json.dumps(raw))
    inputs = (["a man sleeps.", "--text-b", "a person rests."] if task == "rte" else
              ["she left.", "--choices", "it rained.", "the sea sang."])
    assert main(["--params", str(tmp_path / "w" / "params.yaml"), "predict", "--model-dir",
                 str(tmp_path / "w" / "ft"), *inputs]) == 0
    expected = capsys.readouterr().out
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    monkeypatch.chdir(outside)
    assert main(["predict", "--model", str(tmp_path / "w" / "hf"), *inputs]) == 0
    captured = capsys.readouterr()
    assert captured.out == expected and json.loads(expected)["label"], captured.err
    assert main(["generate", "--model", str(tmp_path / "w" / "hf"), "the cat"]) == 2
    assert "Transformer LM" in capsys.readouterr().err  # a task model is not an LM


def test_generate_reads_a_pretrained_export_outside_the_repository(tiny_params, tmp_path,
                                                                   monkeypatch, capsys):
    tiny_run(tiny_params, tmp_path)
    export_hf(tmp_path / "run", tmp_path / "hf", tmp_path / "tok")
    monkeypatch.chdir(tmp_path)  # no params.yaml here
    args = ["generate", "--model", str(tmp_path / "hf"), "The cat", "--max-new-tokens", "4"]
    assert main(args) == 0
    first = capsys.readouterr().out
    assert first.strip()
    assert main([*args[:2], str(tmp_path / "run"), *args[3:]]) == 2  # no tokenizer there
    assert "paths.tokenizer" in capsys.readouterr().err
