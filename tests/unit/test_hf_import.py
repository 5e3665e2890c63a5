"""import-hf: a transformers OpenAIGPTLMHeadModel becomes our pre-trained run with the same
logits, its export round-trips, our tokenizer gives the original release's ids, and every
refusal is one line, exit 2, nothing written."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

from gpt1 import bpe, checkpoint
from gpt1.__main__ import main
from gpt1.data.clean import standardize_text
from gpt1.export import export_hf
from tests.helpers.hf_checkpoint import PARAGRAPH, write_tiny_openai_gpt

transformers = pytest.importorskip("transformers")

# transformers 4.x's OpenAIGPTTokenizer with ftfy + spaCy installed, which is the original
# release's encoder (text_utils.py): ftfy, this standardisation, spaCy tokens, lower-cased BPE.
# transformers 5 dropped that path (its tokenizer is BERT's BasicTokenizer front end only).
_PUNCT = re.compile(r"""(-+|~+|!+|"+|;+|\?+|\++|,+|\)+|\(+|\\+|\/+|\*+|\[+|\]+|}+|{+|\|+|_+)""")


def _release_standardize(text: str) -> str:
    for a, b in (("—", "-"), ("–", "-"), ("―", "-"), ("…", "..."), ("´", "'")):
        text = text.replace(a, b)
    text = _PUNCT.sub(r" \1 ", text)
    text = re.sub(r"\s*\n\s*", " \n ", text)
    return re.sub(r"[^\S\n]+", " ", text).strip()


def _release_ids(hf_tok, text: str) -> list[int]:
    """The ftfy/spaCy path of OpenAIGPTTokenizer, on transformers' own BPE model."""
    import ftfy
    import spacy

    nlp = spacy.blank("en").tokenizer
    model = hf_tok.backend_tokenizer.model
    # spaCy keeps " \n " as the token "\n "; the release's bpe() turns its "\n  </w>" into
    # "\n</w>" (`if word == '\n  </w>': word = '\n</w>'`)
    words = [token.text.lower().replace("\n ", "\n")
             for token in nlp(_release_standardize(ftfy.fix_text(text)))]
    return [t.id for word in words for t in model.tokenize(word)]


@pytest.fixture
def hf_dir(tmp_path: Path) -> Path:
    out = tmp_path / "openai-gpt"
    write_tiny_openai_gpt(out)
    return out


def _params_file(make_params, tmp_path: Path) -> Path:
    path = tmp_path / "params.yaml"
    path.write_text(json.dumps(make_params().as_dict()))
    return path


def _import(make_params, tmp_path: Path, source: str | Path, out: Path) -> int:
    return main(["--params", str(_params_file(make_params, tmp_path)), "import-hf", str(source),
                 str(out)])


def _logits(model, idx: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model.eval().lm_logits(model.eval()(idx))


def _hf_logits(hf_dir: Path, idx: torch.Tensor) -> torch.Tensor:
    hf = transformers.OpenAIGPTLMHeadModel.from_pretrained(hf_dir, local_files_only=True)
    with torch.no_grad():
        return hf.eval()(idx).logits


def test_import_matches_transformers_and_round_trips(make_params, tmp_path, hf_dir):
    out = tmp_path / "run"
    assert _import(make_params, tmp_path, hf_dir, out) == 0
    model, meta = checkpoint.load_model(out, bpe.load_bpe(out / "tokenizer").hash)
    n_vocab = json.loads((hf_dir / "config.json").read_text())["vocab_size"]
    assert meta["vocab_size"] == n_vocab + 3 and meta["imported_from"]["source"] == str(hf_dir)
    idx = torch.randint(0, n_vocab, (3, 32))
    theirs = _hf_logits(hf_dir, idx)
    ours = _logits(model, idx)
    assert (ours[..., :n_vocab] - theirs).abs().max().item() <= 1e-5
    special = model.tokens_embed.weight[n_vocab:].detach()  # fresh N(0, 0.02) rows
    assert special.shape[0] == 3 and 0.005 < special.std().item() < 0.05
    # export-hf of the imported run reloads in transformers with the same logits
    export_hf(out, tmp_path / "exported", out / "tokenizer")
    idx = torch.randint(0, n_vocab + 3, (2, 32))
    assert (_hf_logits(tmp_path / "exported", idx) - _logits(model, idx)).abs().max() <= 1e-5
    # ... and importing that export gives the same run back (specials kept, not redrawn)
    assert _import(make_params, tmp_path, tmp_path / "exported", tmp_path / "again") == 0
    again, _ = checkpoint.load_model(tmp_path / "again", None)
    assert torch.equal(again.tokens_embed.weight, model.tokens_embed.weight)


def test_bare_names_and_old_buffers_import_the_same(make_params, tmp_path, hf_dir):
    """A checkpoint saved from OpenAIGPTModel (no `transformer.` prefix) by an older
    transformers (its causal-mask buffers saved too) gives the same run."""
    from safetensors.torch import load_file, save_file

    assert _import(make_params, tmp_path, hf_dir, tmp_path / "run") == 0
    state = {k.removeprefix("transformer."): v
             for k, v in load_file(hf_dir / "model.safetensors").items()}
    state["h.0.attn.bias"] = torch.tril(torch.ones(32, 32)).view(1, 1, 32, 32)
    save_file(state, hf_dir / "model.safetensors")
    assert _import(make_params, tmp_path, hf_dir, tmp_path / "bare") == 0
    assert (tmp_path / "bare" / "model.safetensors").read_bytes() == (
        tmp_path / "run" / "model.safetensors").read_bytes()


def test_tokenizer_gives_the_release_ids(make_params, tmp_path, hf_dir):
    assert _import(make_params, tmp_path, hf_dir, tmp_path / "run") == 0
    ours = bpe.load_bpe(tmp_path / "run" / "tokenizer")
    hf_tok = transformers.AutoTokenizer.from_pretrained(hf_dir, local_files_only=True)
    assert type(hf_tok).__name__.startswith("OpenAIGPTTokenizer")
    ids = ours.encode_batch([standardize_text(PARAGRAPH)])[0]
    assert ids == _release_ids(hf_tok, PARAGRAPH)
    assert len(ids) > 40 and max(ids) < ours.vocab_size - 3
    assert "ç" not in json.loads((hf_dir / "vocab.json").read_text())  # unknown: id 0, as the
    assert ours.encode_batch(["ç"])[0] == [0]                          # release encodes it
    # transformers' own fallback (BERT's BasicTokenizer) differs: it splits "don't" into
    # "don ' t" and strips accents; we follow the original release (docs/import-hf.md)
    backend = hf_tok.backend_tokenizer
    fallback = [w for w, _ in backend.pre_tokenizer.pre_tokenize_str(
        backend.normalizer.normalize_str(PARAGRAPH))]
    release = standardize_text(PARAGRAPH).lower().split(" ")
    assert "n't" in release and "café" in release and "..." in release
    assert "n't" not in fallback and "cafe" in fallback and "..." not in fallback
    assert ours.encode_batch([standardize_text("the cat sat on the mat.")])[0] == hf_tok(
        "the cat sat on the mat.", add_special_tokens=False)["input_ids"]


def _one_line_refusal(capsys, code: int, needle: str, out: Path) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and needle in err[0], err
    assert not out.exists() and not list(out.parent.glob(f".{out.name}*"))
    return err[0]


def _edit_json(path: Path, **changes) -> None:
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))


@pytest.mark.parametrize("case,needle", [
    ("gpt2", "config.json"), ("no_config", "config.json"), ("no_weights", "model.safetensors"),
    ("shape", "model.safetensors"), ("vocab", "vocab.json"), ("merges", "merges.txt")])
def test_refusals(make_params, tmp_path, hf_dir, capsys, case, needle):
    if case == "gpt2":
        _edit_json(hf_dir / "config.json", model_type="gpt2")
    elif case == "no_config":
        (hf_dir / "config.json").unlink()
    elif case == "no_weights":
        (hf_dir / "model.safetensors").unlink()
    elif case == "shape":  # config says wider than the weights are
        _edit_json(hf_dir / "config.json", n_embd=64)
    elif case == "vocab":  # a tokenizer of another vocabulary size than the weights
        vocab = json.loads((hf_dir / "vocab.json").read_text())
        vocab["zzz_extra</w>"] = len(vocab)
        (hf_dir / "vocab.json").write_text(json.dumps(vocab))
    else:  # a merge whose product is not in vocab.json
        with (hf_dir / "merges.txt").open("a") as fh:
            fh.write("q qq\n")
    out = tmp_path / "out"
    capsys.readouterr()
    line = _one_line_refusal(capsys, _import(make_params, tmp_path, hf_dir, out), needle, out)
    assert str(hf_dir) in line


def test_hub_name_offline_stops_in_one_line(make_params, tmp_path, capsys, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))  # an empty cache
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf-home" / "hub"))
    out = tmp_path / "out"
    capsys.readouterr()
    line = _one_line_refusal(capsys, _import(make_params, tmp_path, "openai-gpt", out),
                             "offline", out)
    assert line.startswith("gpt1 import-hf: error: openai-gpt:")


def test_hub_name_without_network_stops_at_once_in_one_line(make_params, tmp_path, capsys,
                                                           monkeypatch):
    """No HF_HUB_OFFLINE but no network: one line at once, not huggingface_hub's retries."""
    import socket

    from huggingface_hub import constants

    def no_dns(*args, **kwargs):
        raise socket.gaierror(-2, "Name or service not known")

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(socket, "getaddrinfo", no_dns)
    out = tmp_path / "out"
    capsys.readouterr()
    _one_line_refusal(capsys, _import(make_params, tmp_path, "openai-community/openai-gpt", out),
                      "there is no network", out)


def test_out_dir_holding_files_is_refused(make_params, tmp_path, hf_dir, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "mine.txt").write_text("mine")
    capsys.readouterr()
    assert _import(make_params, tmp_path, hf_dir, out) == 2
    assert "folder is not empty" in capsys.readouterr().err
    assert [p.name for p in out.iterdir()] == ["mine.txt"]


def test_pipeline_import_refuses_params_of_another_shape(make_params, tmp_path, hf_dir):
    """Under pretrain.import_hf the preset must describe the checkpoint: a mismatch stops
    train_bpe before it writes, naming the key to set."""
    from gpt1 import hf_stand_in as import_hf
    from gpt1.errors import Gpt1Error

    n_merges = len((hf_dir / "merges.txt").read_text().splitlines()) - 1
    params = make_params({"pretrain": {"import_hf": str(hf_dir)},
                          "bpe": {"n_merges": n_merges}, "model": {"n_layer": 3}})
    with pytest.raises(Gpt1Error, match=r"params model\.n_layer is 3, the checkpoint has 2"):
        import_hf.train_bpe(params)
    assert not Path(params.paths.tokenizer).exists()
    ok = make_params({"pretrain": {"import_hf": str(hf_dir)}, "bpe": {"n_merges": n_merges}})
    vocab = json.loads((hf_dir / "vocab.json").read_text())
    assert import_hf.train_bpe(ok)["vocab_size"] == len(vocab) + 3
