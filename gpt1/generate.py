"""`gpt1 generate PROMPT`: sample a continuation from the pre-trained LM.

The prompt goes through the project's own text path, as the corpus did: standardise (ftfy +
the original release's punctuation rules, spec §5), BPE, then tokens are sampled one at a
time with temperature and top-k (params `generate`, overridable by flags) from a seeded
generator, and decoded. `score_texts` gives the LM's mean per-token loss of texts (what the
MLflow pyfunc model of the pre-trained LM returns).
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from pydantic import ValidationError

from gpt1 import names
from gpt1.config import GenerateCfg, Params
from gpt1.errors import Gpt1Error

log = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("prompt", help="text to continue (raw; standardised like the corpus)")
    parser.add_argument("--max-new-tokens", type=int, help="default: generate.max_new_tokens")
    parser.add_argument("--temperature", type=float, help="default: generate.temperature")
    parser.add_argument("--top-k", type=int, help="default: generate.top_k (0 = no cut-off)")
    parser.add_argument("--seed", type=int, help="default: params seed")
    parser.add_argument("--model", "--run-dir", dest="model",
                        help="a pre-training run, an export-hf folder of it or "
                             "models:/gpt1-pretrain/N (default: <paths.checkpoints>/p<first "
                             "of pretrain.seeds>)")


def run(args: argparse.Namespace, params: Params) -> None:
    """Entry point of `gpt1 generate`: prints the prompt's continuation."""
    overrides = {k: v for k, v in (("max_new_tokens", args.max_new_tokens),
                                   ("temperature", args.temperature), ("top_k", args.top_k))
                 if v is not None}
    try:
        cfg = GenerateCfg.model_validate({**params.generate.model_dump(), **overrides})
    except ValidationError as err:
        bad = err.errors()[0]
        flag = "--" + str(bad["loc"][0]).replace("_", "-")
        raise Gpt1Error(f"{flag} {bad['input']!r}: {bad['msg']}") from None
    from gpt1 import checkpoint

    model, tok = load_lm(args.model or checkpoint.pretrain_dir(params, names.TRANSFORMER),
                         getattr(args, "tokenizer", None) or params.paths.tokenizer)
    seed = params.seed if args.seed is None else args.seed
    print(generate(model, tok, args.prompt, cfg, seed))


def load_lm(run_dir: str | Path, tokenizer_dir: str | Path) -> tuple[Any, Any]:
    """The finished pre-trained Transformer (eval mode) and its tokenizer, hash-checked."""
    from gpt1 import bpe, checkpoint

    tok = bpe.load_bpe(tokenizer_dir)
    task = checkpoint.read_model_meta(Path(run_dir)).get("task")
    if task:
        raise Gpt1Error(f"generate needs the pre-trained Transformer LM, this model is "
                        f"fine-tuned on {task} (use gpt1 predict)",
                        Path(run_dir) / checkpoint.MODEL_META)
    model, meta = checkpoint.load_model(run_dir, tok.hash)
    if meta["kind"] != names.TRANSFORMER:
        raise Gpt1Error(f"generate needs the Transformer LM, this run is {meta['kind']}",
                        Path(run_dir) / checkpoint.MODEL_META)
    return model, tok


def encode_prompt(tok: Any, text: str) -> list[int]:
    """Raw text -> ids exactly as the corpus was encoded (standardise, then BPE)."""
    from gpt1.data.clean import standardize_texts

    return list(tok.encode_batch(standardize_texts([text]))[0])


@torch.no_grad()
def sample_ids(model: Any, ids: list[int], cfg: GenerateCfg, seed: int) -> list[int]:
    """`cfg.max_new_tokens` ids sampled after `ids` (temperature, top-k, seeded)."""
    gen = torch.Generator().manual_seed(seed)
    n_ctx = model.cfg.n_positions
    out = list(ids)
    for _ in range(cfg.max_new_tokens):
        idx = torch.tensor([out[-n_ctx:]], dtype=torch.long)
        logits = model.lm_logits(model(idx)[:, -1:, :])[0, -1].float() / cfg.temperature
        if 0 < cfg.top_k < logits.numel():
            cut = torch.topk(logits, cfg.top_k).values[-1]
            logits = logits.masked_fill(logits < cut, float("-inf"))
        out.append(int(torch.multinomial(torch.softmax(logits, -1), 1, generator=gen)))
    return out[len(ids):]


def generate(model: Any, tok: Any, prompt: str, cfg: GenerateCfg, seed: int) -> str:
    """The decoded continuation of `prompt` (the prompt itself not repeated)."""
    ids = encode_prompt(tok, prompt)
    if not ids:
        raise Gpt1Error("the prompt is empty after standardisation")
    text = tok.decode(sample_ids(model, ids, cfg, seed))
    log.info("generated %d tokens after a %d-token prompt", cfg.max_new_tokens, len(ids))
    return str(text)


@torch.no_grad()
def score_texts(model: Any, tok: Any, texts: Sequence[str]) -> list[float]:
    """Mean next-token cross-entropy (nats) of each text under the LM (its last n_positions
    tokens; NaN for a text of fewer than 2 tokens)."""
    n_ctx = model.cfg.n_positions
    out = []
    for text in texts:
        ids = encode_prompt(tok, text)[-n_ctx:]
        if len(ids) < 2:
            out.append(float("nan"))
            continue
        idx = torch.tensor([ids], dtype=torch.long)
        h = model(idx[:, :-1])
        out.append(float(model.lm_losses(h[0], idx[0, 1:]).mean()))
    return out
