"""`gpt1 export-hf RUN_DIR OUT_DIR`: a pre-trained run as a transformers OpenAIGPTLMHeadModel.

Writes config.json, model.safetensors (transformers' names; its Conv1D layers store weights
as (in, out), so ours are transposed), and the tokenizer: tokenizer.json (our exact BPE),
vocab.json + merges.txt (OpenAIGPTTokenizer's slow-format files) and the three special tokens.
`OpenAIGPTLMHeadModel.from_pretrained(OUT_DIR)` loads it offline and gives our logits
(tests/unit/test_export.py). Inputs must be standardized text (gpt1.data.clean), as for our
own tokenizer: transformers' tokenizer does not run ftfy/spaCy (spec §5).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
from pathlib import Path
from typing import Any

from gpt1 import atomic
from gpt1.config import Params
from gpt1.errors import Gpt1Error

log = logging.getLogger(__name__)

TOKENIZER_FILE = "tokenizer.json"  # gpt1.bpe.TOKENIZER_FILE (not imported: tokenizers is heavy)
_CONV1D = (".attn.c_attn.weight", ".attn.c_proj.weight", ".mlp.c_fc.weight", ".mlp.c_proj.weight")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", metavar="CHECKPOINT_DIR",
                        help="pre-training run directory (params.paths.checkpoints)")
    parser.add_argument("out_dir", metavar="OUT_DIR", help="transformers model directory to write")


def run(args: argparse.Namespace, params: Params) -> None:
    """Entry point of `gpt1 export-hf`; the tokenizer is read from params.paths.tokenizer."""
    export_hf(args.run_dir, args.out_dir, params.paths.tokenizer)


def hf_state_dict(state: dict[str, Any]) -> dict[str, Any]:
    """Our GPT state dict -> OpenAIGPTLMHeadModel's (prefix, Conv1D transposes, tied head)."""
    out = {}
    for name, tensor in state.items():
        value = tensor.t().contiguous() if name.endswith(_CONV1D) else tensor
        out[f"transformer.{name}"] = value
    out["lm_head.weight"] = state["tokens_embed.weight"]
    return out


def _check_exportable(meta: dict[str, Any], cfg: Any) -> None:
    where = "model.json"
    if meta["kind"] != "gpt" or cfg.arch != "gpt1":
        raise Gpt1Error(f"only GPT-1 (post-LN) runs map onto OpenAIGPT, this is "
                        f"{meta['kind']}/{cfg.arch}", where)
    if cfg.n_inner != 4 * cfg.n_embd:
        raise Gpt1Error(f"OpenAIGPT fixes the FFN at 4 x n_embd; n_inner={cfg.n_inner}", where)


def _tokenizer_files(tokenizer_json: dict[str, Any], specials: list[str]) -> dict[str, str]:
    """vocab.json, merges.txt and the special-token configs from our tokenizer.json."""
    model = tokenizer_json["model"]
    vocab: dict[str, int] = dict(model["vocab"])
    for added in tokenizer_json.get("added_tokens", []):
        vocab[added["content"]] = added["id"]
    merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
    token_config = {
        "tokenizer_class": "OpenAIGPTTokenizer",
        "model_max_length": None,
        "additional_special_tokens": specials,
        "do_lower_case": True,
        "clean_up_tokenization_spaces": False,
    }
    return {
        "vocab.json": json.dumps(vocab, ensure_ascii=False, indent=0, sort_keys=True),
        "merges.txt": "#version: 0.2\n" + "\n".join(merges) + "\n",
        "special_tokens_map.json": json.dumps({"additional_special_tokens": specials}, indent=2),
        "tokenizer_config.json": json.dumps(token_config, indent=2),
    }


def export_hf(run_dir: str | Path, out_dir: str | Path, tokenizer_dir: str | Path) -> Path:
    """Write OUT_DIR atomically; Gpt1Error if the run or tokenizer does not fit."""
    from transformers import OpenAIGPTConfig, OpenAIGPTLMHeadModel

    from gpt1.checkpoint import load_model

    tok_path = Path(tokenizer_dir) / TOKENIZER_FILE
    try:
        tok_bytes = tok_path.read_bytes()
    except FileNotFoundError:
        raise Gpt1Error("missing; run train_bpe first", tok_path) from None
    model, meta = load_model(run_dir, hashlib.sha256(tok_bytes).hexdigest())
    cfg = Params.model_validate(meta["params"]).model
    _check_exportable(meta, cfg)
    hf_cfg = OpenAIGPTConfig(
        vocab_size=meta["vocab_size"], n_positions=cfg.n_positions, n_embd=cfg.n_embd,
        n_layer=cfg.n_layer, n_head=cfg.n_head, afn=cfg.afn, resid_pdrop=cfg.resid_pdrop,
        embd_pdrop=cfg.embd_pdrop, attn_pdrop=cfg.attn_pdrop,
        layer_norm_epsilon=cfg.layer_norm_epsilon, initializer_range=cfg.initializer_range,
        architectures=["OpenAIGPTLMHeadModel"],
    )
    hf = OpenAIGPTLMHeadModel(hf_cfg)
    result = hf.load_state_dict(hf_state_dict(model.state_dict()), strict=False)
    if result.missing_keys or result.unexpected_keys:
        raise Gpt1Error(f"weights do not map onto OpenAIGPT: missing {result.missing_keys[:3]}, "
                        f"unexpected {result.unexpected_keys[:3]}", run_dir)
    specials = list(meta["params"]["bpe"]["special_tokens"])
    files = _tokenizer_files(json.loads(tok_bytes), specials)
    with atomic.atomic_path(out_dir) as tmp:
        hf.eval().save_pretrained(tmp, safe_serialization=True)
        (tmp / TOKENIZER_FILE).write_bytes(tok_bytes)
        for name, text in files.items():
            (tmp / name).write_text(text, encoding="utf-8")
    log.info("exported %s -> %s (OpenAIGPTLMHeadModel, vocab %d)", run_dir, out_dir,
             meta["vocab_size"])
    return Path(out_dir)
