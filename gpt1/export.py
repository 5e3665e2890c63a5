"""`gpt1 export-hf RUN_DIR OUT_DIR`: a pre-trained run as a transformers OpenAIGPTLMHeadModel.

RUN_DIR may also be a fine-tuned model (<paths.finetuned>/p<seed>/<task>/model): its body (the
Transformer, tied LM layer included) is exported the same way, and its task head, which has no
OpenAIGPT counterpart (a linear layer on the `_classify_` token's state, with a bias), is
written beside as task_head.safetensors (weight, bias) with its labels in task_head.json.
Every export carries a model card (README.md: data, params, scores when the metrics file
exists, limits).

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

from gpt1 import atomic, hf_weights
from gpt1.config import Params
from gpt1.errors import Gpt1Error

log = logging.getLogger(__name__)

TOKENIZER_FILE = "tokenizer.json"  # gpt1.bpe.TOKENIZER_FILE (not imported: tokenizers is heavy)
HEAD_FILES = ("task_head.safetensors", "task_head.json")
EXPORT_FILES = ("config.json", "generation_config.json", "model.safetensors", TOKENIZER_FILE,
                "vocab.json", "merges.txt", "special_tokens_map.json", "tokenizer_config.json",
                "README.md", *HEAD_FILES)
"""Every file an export may write: with --overwrite, only these are replaced in OUT_DIR."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", metavar="CHECKPOINT_DIR",
                        help="pre-training run directory (<paths.checkpoints>/p<seed>)")
    parser.add_argument("out_dir", metavar="OUT_DIR",
                        help="transformers model directory to write: new or empty (a file or a "
                             "non-empty folder is refused unless --overwrite)")
    parser.add_argument("--overwrite", action="store_true",
                        help="OUT_DIR may hold files: replace only the export's own files there "
                             "(each atomically), keep everything else")


def run(args: argparse.Namespace, params: Params) -> None:
    """Entry point of `gpt1 export-hf`; the tokenizer is read from params.paths.tokenizer,
    scores for the card from params.paths.metrics."""
    export_hf(args.run_dir, args.out_dir, params.paths.tokenizer, params.paths.metrics,
              overwrite=args.overwrite)


def model_card(meta: dict[str, Any], scores: dict[str, Any] | None) -> str:
    """README.md of an export: what the model is, its data, params, scores and limits."""
    p, task = meta["params"], meta.get("task")
    m = p["model"]
    what = (f"GPT-1 fine-tuned on **{task}** (body exported as OpenAIGPTLMHeadModel; the task "
            "head is task_head.safetensors, see below)" if task else
            "GPT-1 pre-trained language model (OpenAIGPTLMHeadModel)")
    data = p["data"]
    source = (f"local mirror `{p['paths']['mirror_dir']}`" if data["source"] != "hub"
              else f"hub dataset `{data['hub_dataset']}`")
    lines = [
        f"# gpt1 export: {task or 'pre-trained LM'}", "", what + ", exported by `gpt1 export-hf`"
        " from the gpt1 pipeline (a reproduction of Radford et al. 2018).", "",
        "## Data", "",
        f"- Pre-training corpus: {source}, cleaned and standardised (ftfy + the original "
        "release's punctuation rules); BPE with "
        f"{p['bpe']['n_merges']} merges, vocabulary {meta['vocab_size']} (tokenizer sha256 "
        f"`{meta['tokenizer_hash'][:12]}`).",
        *([f"- Fine-tuning task: `{task}` (canonical tables of the pipeline's prepare_task "
           "stage)."] if task else []), "",
        "## Params", "",
        f"- model: {m['n_layer']} layers, {m['n_head']} heads, width {m['n_embd']}, context "
        f"{m['n_positions']}, {m['afn']}",
        f"- pre-training: lr {p['pretrain']['lr_max']}, {p['pretrain']['max_tokens']} tokens, "
        f"seed {p['seed']}",
        *([f"- fine-tuning: lr {p['finetune']['lr']}, {p['finetune']['epochs']} epochs, "
           f"aux LM weight {p['finetune']['lm_coef']}"] if task else []), "",
        "## Scores", "",
        ("```json\n" + json.dumps(scores, indent=1, sort_keys=True) + "\n```" if scores
         else "No metrics file found for this model."), "",
        "## Limits", "",
        "- Inputs must be standardised like the training text (gpt1.data.clean): transformers'"
        " tokenizer does not run ftfy or the punctuation rules.",
        "- A research reproduction at the params above (the demo preset is a small model on "
        "113 public-domain books): not a general-purpose or safe text generator; it repeats "
        "the biases of 19th-century fiction.",
        *(["- The task head is not loaded by transformers: apply task_head.safetensors to the "
           "hidden state at the `_classify_` token (see gpt1/heads.py)."] if task else []),
        "",
    ]
    return "\n".join(lines)


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


def _load(run_dir: str | Path, tokenizer_dir: str | Path, tok_hash: str
          ) -> tuple[Any, Any, dict[str, Any]]:
    """(GPT body, task head or None, meta) of a pre-training run or a fine-tuned model."""
    from gpt1.checkpoint import load_model, read_model_meta
    from gpt1.predict import load_task_model

    if "task" not in read_model_meta(Path(run_dir)):
        model, meta = load_model(run_dir, tok_hash)
        return model, None, meta
    task_model, _, _, _ = load_task_model(run_dir, tokenizer_dir)
    return task_model.body, task_model.head, read_model_meta(Path(run_dir))


def _scores(meta: dict[str, Any], metrics_dir: str | Path | None) -> dict[str, Any] | None:
    """The model's scores from its stage's metrics file, when there is one."""
    if metrics_dir is None:
        return None
    stem = f"finetune_{meta['task']}" if meta.get("task") else "pretrain"
    seed = meta.get("pretrain_seed")  # the record of that pre-training run, else the old stem
    for name in ([f"{stem}_p{seed}"] if seed is not None else []) + [stem]:
        path = Path(metrics_dir) / f"{name}.json"
        if path.is_file():
            return dict(json.loads(path.read_text(encoding="utf-8")))
    return None


def export_hf(run_dir: str | Path, out_dir: str | Path, tokenizer_dir: str | Path,
              metrics_dir: str | Path | None = None, overwrite: bool = False) -> Path:
    """Write OUT_DIR atomically; Gpt1Error if the run or tokenizer does not fit, or if OUT_DIR
    is a file or a non-empty folder (with `overwrite`: only EXPORT_FILES are replaced there)."""
    from transformers import OpenAIGPTConfig, OpenAIGPTLMHeadModel

    atomic.check_user_folder(out_dir, overwrite, EXPORT_FILES)  # before the slow part
    tok_path = Path(tokenizer_dir) / TOKENIZER_FILE
    try:
        tok_bytes = tok_path.read_bytes()
    except FileNotFoundError:
        raise Gpt1Error("missing; run train_bpe first", tok_path) from None
    model, head, meta = _load(run_dir, tokenizer_dir, hashlib.sha256(tok_bytes).hexdigest())
    from gpt1.checkpoint import recorded_params

    cfg = recorded_params(meta, Path(run_dir) / "model.json").model
    _check_exportable(meta, cfg)
    hf_cfg = OpenAIGPTConfig(
        vocab_size=meta["vocab_size"], n_positions=cfg.n_positions, n_embd=cfg.n_embd,
        n_layer=cfg.n_layer, n_head=cfg.n_head, afn=cfg.afn, resid_pdrop=cfg.resid_pdrop,
        embd_pdrop=cfg.embd_pdrop, attn_pdrop=cfg.attn_pdrop,
        layer_norm_epsilon=cfg.layer_norm_epsilon, initializer_range=cfg.initializer_range,
        architectures=["OpenAIGPTLMHeadModel"],
    )
    hf = OpenAIGPTLMHeadModel(hf_cfg)
    result = hf.load_state_dict(hf_weights.to_hf(model.state_dict(), meta["vocab_size"]),
                                strict=False)
    if result.missing_keys or result.unexpected_keys:
        raise Gpt1Error(f"weights do not map onto OpenAIGPT: missing {result.missing_keys[:3]}, "
                        f"unexpected {result.unexpected_keys[:3]}", run_dir)
    specials = list(meta["params"]["bpe"]["special_tokens"])
    files = _tokenizer_files(json.loads(tok_bytes), specials)
    with atomic.user_folder(out_dir, overwrite, EXPORT_FILES) as tmp:
        hf.eval().save_pretrained(tmp, safe_serialization=True, max_shard_size="1000GB")
        (tmp / TOKENIZER_FILE).write_bytes(tok_bytes)
        for name, text in files.items():
            (tmp / name).write_text(text, encoding="utf-8")
        (tmp / "README.md").write_text(model_card(meta, _scores(meta, metrics_dir)),
                                       encoding="utf-8")
        if head is not None:
            _write_head(tmp, head, meta["task"])
    log.info("exported %s -> %s (OpenAIGPTLMHeadModel, vocab %d)", run_dir, out_dir,
             meta["vocab_size"])
    return Path(out_dir)


def _write_head(out_dir: Path, head: Any, task: str) -> None:
    """The task head as task_head.safetensors (linear weight, bias) + task_head.json."""
    from safetensors.torch import save_file

    from gpt1.tasks.registry import TASKS

    spec = TASKS[task]
    save_file({k: v.contiguous() for k, v in head.linear.state_dict().items()},
              str(out_dir / "task_head.safetensors"))
    (out_dir / "task_head.json").write_text(json.dumps({
        "task": task, "format": spec.fmt, "labels": list(spec.labels),
        "regression": spec.regression,
        "input": "final hidden state at the `_classify_` token of each sequence",
    }, indent=2), encoding="utf-8")
