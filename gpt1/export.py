"""`gpt1 export-hf [--model MODEL] OUT_DIR`: a model as a transformers OpenAIGPT folder.

MODEL (default: the first pre-training seed's run, <paths.checkpoints>/p<seed>; the old
positional form `export-hf RUN_DIR OUT_DIR` still works) may be a pre-training run, a
fine-tuned model (<paths.finetuned>/p<seed>/<task>/model), an export-hf folder or
models:/name/version. A pre-trained LM is exported as OpenAIGPTLMHeadModel. A multiple-choice
model as OpenAIGPTDoubleHeadsModel: its
`multiple_choice_head` (a linear layer with bias on the state at `mc_token_ids`, summary_type
cls_index) is exactly our choice head on the `_classify_` token. A classification or
entailment model as OpenAIGPTForSequenceClassification with `id2label`, so that
`pipeline("text-classification")` answers as `gpt1 predict`: its tokenizer.json lays the input
out as in training (`_start_ A [_delimiter_ B] _classify_`, a post-processor), the model reads
the last token's state, and its `score` layer has no bias, so our head's bias b is folded into
the last block's ln_2 bias (beta + pinv(W) b: W h then gains exactly b; `fold_bias`). Our own
tokenizer file is kept as gpt1_tokenizer.json and the unfolded bias in task_head.safetensors,
so the gpt1 CLI reads the folder back exactly. Similarity (both orders summed) and regression
heads have no transformers counterpart: their body is exported as OpenAIGPTLMHeadModel and
the head is written beside as task_head.safetensors (weight, bias) with its labels in
task_head.json. Every export
carries a model card (README.md with a metadata header, gpt1.model_card) and gpt1_model.json
+ bpe.json (our model's meta and tokenizer meta), so the folder alone is a model the gpt1 CLI
reads back (`load_export`).

Writes config.json, model.safetensors (transformers' names; its Conv1D layers store weights
as (in, out), so ours are transposed), and the tokenizer: tokenizer.json (our exact BPE behind
the text standardisation as tokenizers' normalizer and pre-tokenizer, gpt1.data.hf_text, so it
reads raw text as gpt1 does; loaded by AutoTokenizer as a fast tokenizer: a symbol it has never
seen is dropped, as gpt1's own tokenizer drops it, and `model_max_length` is the context),
vocab.json + merges.txt and the three special tokens; gpt1_tokenizer.json is our tokenizer as
trained. Every file is written 0644.
`from_pretrained(OUT_DIR)` loads it offline and gives our logits (tests/unit/test_export.py).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import sys
from pathlib import Path
from typing import Any

from gpt1 import atomic, hf_weights, names, records
from gpt1.config import Params
from gpt1.errors import Gpt1Error
from gpt1.stage_table import record_prefix

log = logging.getLogger(__name__)

TOKENIZER_FILE = "tokenizer.json"  # gpt1.bpe.TOKENIZER_FILE (not imported: tokenizers is heavy)
BPE_META = "bpe.json"  # gpt1.bpe.META_FILE
GPT1_META = "gpt1_model.json"
"""Our model.json (kind, task, vocab size, tokenizer hash, params) without its file digests."""
HEAD_FILES = ("task_head.safetensors", "task_head.json")
MC_HEAD = "multiple_choice_head.summary."
"""OpenAIGPTDoubleHeadsModel's name prefix of the choice head's linear layer."""
GPT1_TOKENIZER = "gpt1_tokenizer.json"
"""Our exact tokenizer.json, where the export's own carries the classification layout."""
SEQ_CLS = "OpenAIGPTForSequenceClassification"
UNFOLDED = "unfolded_ln_2_bias"
"""task_head.safetensors: the last block's ln_2 bias before the head's bias was folded in."""
EXPORT_FILES = ("config.json", "generation_config.json", "model.safetensors", TOKENIZER_FILE,
                "vocab.json", "merges.txt", "special_tokens_map.json", "tokenizer_config.json",
                "README.md", BPE_META, GPT1_META, GPT1_TOKENIZER, *HEAD_FILES)
"""Every file an export may write: with --overwrite, only these are replaced in OUT_DIR."""


class _OldForm(argparse.Action):
    """`export-hf RUN_DIR OUT_DIR`: RUN_DIR is taken as `--model RUN_DIR` (so it is located,
    tokenizer included, exactly as --model is); with --model as well, refused."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 value: Any, option_string: str | None = None) -> None:
        if value is None:
            return
        if namespace.model is not None:
            parser.error("give OUT_DIR, and the model with --model")
        namespace.model, namespace.paths, namespace.old_form = namespace.paths[0], [value], True


class _Model(argparse.Action):
    """--model after the old form's two paths: refused, as before them."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 value: Any, option_string: str | None = None) -> None:
        if namespace.old_form:
            parser.error("give OUT_DIR, and the model with --model")
        namespace.model = value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs=1, metavar="OUT_DIR",
                        help="transformers model directory to write: new or empty (a file or a "
                             "non-empty folder is refused unless --overwrite); the old form "
                             "`export-hf RUN_DIR OUT_DIR` names the model first")
    parser.add_argument("old_form_out", nargs="?", action=_OldForm,
                        help=argparse.SUPPRESS)  # RUN_DIR OUT_DIR
    parser.add_argument("--model", action=_Model, help="run directory, fine-tuned model, "
                        "export-hf folder or models:/name/version (default: "
                        "<paths.checkpoints>/p<first seed>)")
    parser.set_defaults(old_form=False)
    parser.add_argument("--overwrite", action="store_true",
                        help="OUT_DIR may hold files: replace only the export's own files there "
                             "(each atomically), keep everything else")


def run(args: argparse.Namespace, params: Params) -> None:
    """Entry point of `gpt1 export-hf`; the tokenizer is the model's own (or
    params.paths.tokenizer), scores for the card from params.paths.metrics."""
    from gpt1 import checkpoint

    model = args.model or checkpoint.pretrain_dir(params, names.TRANSFORMER)
    export_hf(model, args.paths[0], getattr(args, "tokenizer", None) or params.paths.tokenizer,
              params.paths.metrics, overwrite=args.overwrite)


def _check_exportable(meta: dict[str, Any], cfg: Any) -> None:
    where = "model.json"
    if meta["kind"] != names.TRANSFORMER or cfg.arch != "gpt1":
        raise Gpt1Error(f"only GPT-1 (post-LN) runs map onto OpenAIGPT, this is "
                        f"{meta['kind']}/{cfg.arch}", where)
    if cfg.n_inner != 4 * cfg.n_embd:
        raise Gpt1Error(f"OpenAIGPT fixes the FFN at 4 x n_embd; n_inner={cfg.n_inner}", where)


def _tokenizer_files(tokenizer_json: dict[str, Any], specials: list[str], n_positions: int
                     ) -> dict[str, str]:
    """vocab.json, merges.txt and the special-token configs from our tokenizer.json. The
    tokenizer class is the generic fast one: transformers' OpenAIGPTTokenizer replaces our
    pre-tokenizer with BERT's and wants an `<unk>` our vocabulary does not have."""
    model = tokenizer_json["model"]
    vocab: dict[str, int] = dict(model["vocab"])
    for added in tokenizer_json.get("added_tokens", []):
        vocab[added["content"]] = added["id"]
    merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
    token_config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": n_positions,
        "additional_special_tokens": specials,
        "model_input_names": ["input_ids", "attention_mask"],  # OpenAIGPT would embed type ids
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
    stem = record_prefix("finetune" if meta.get("task") else "pretrain", task=meta.get("task"))
    pretrain_seed = meta.get("pretrain_seed")  # that pre-training run's record, else the old stem
    for name in ([names.record_stem(stem, pretrain_seed)] if pretrain_seed is not None
                 else []) + [stem]:
        scores = records.read_scores_file(records.record_paths(metrics_dir, name)[0])
        if scores is not None:
            return scores
    return None


def _corpus_documents(metrics_dir: str | Path | None) -> int | None:
    """The pre-training corpus's document count from the workspace's clean_corpus record."""
    if metrics_dir is None:
        return None
    scores = records.read_scores_file(records.record_paths(metrics_dir, "clean_corpus")[0])
    count = (scores or {}).get("documents")
    return count if isinstance(count, int) else None


def export_hf(run_dir: str | Path, out_dir: str | Path, tokenizer_dir: str | Path,
              metrics_dir: str | Path | None = None, overwrite: bool = False) -> Path:
    """Write OUT_DIR atomically; Gpt1Error if the run or tokenizer does not fit, or if OUT_DIR
    is a file or a non-empty folder (with `overwrite`: only EXPORT_FILES are replaced there)."""
    import transformers

    from gpt1.model_card import model_card

    atomic.check_user_folder(out_dir, overwrite, EXPORT_FILES)  # before the slow part
    tok_path = Path(tokenizer_dir) / TOKENIZER_FILE
    try:
        tok_bytes = tok_path.read_bytes()
        bpe_meta = (Path(tokenizer_dir) / BPE_META).read_text(encoding="utf-8")
    except FileNotFoundError as err:
        raise Gpt1Error("missing; run train_bpe first", err.filename) from None
    model, head, meta = _load(run_dir, tokenizer_dir, hashlib.sha256(tok_bytes).hexdigest())
    from gpt1.checkpoint import recorded_params

    cfg = recorded_params(meta, Path(run_dir) / "model.json").model
    _check_exportable(meta, cfg)
    arch = _architecture(head)
    spec = _spec(meta["task"]) if head is not None else None
    labels = ({"id2label": dict(enumerate(spec.labels)),
               "label2id": {name: i for i, name in enumerate(spec.labels)}}
              if spec is not None and arch == SEQ_CLS else {"num_labels": 1})  # choice: 1 score
    hf_cfg = transformers.OpenAIGPTConfig(  # type: ignore[call-arg]
        vocab_size=meta["vocab_size"], n_positions=cfg.n_positions, n_embd=cfg.n_embd,
        n_layer=cfg.n_layer, n_head=cfg.n_head, afn=cfg.afn, resid_pdrop=cfg.resid_pdrop,
        embd_pdrop=cfg.embd_pdrop, attn_pdrop=cfg.attn_pdrop,
        layer_norm_epsilon=cfg.layer_norm_epsilon, initializer_range=cfg.initializer_range,
        architectures=[arch], summary_type="cls_index", summary_use_proj=True,
        summary_proj_to_labels=True, summary_activation=None,
        summary_first_dropout=meta["params"]["finetune"]["clf_pdrop"], **labels,
    )
    hf = getattr(transformers, arch)(hf_cfg)
    state = hf_weights.to_hf(model.state_dict(), meta["vocab_size"])
    unfolded = None
    if arch == "OpenAIGPTDoubleHeadsModel":
        state.update({MC_HEAD + k: v for k, v in head.linear.state_dict().items()})
    elif arch == SEQ_CLS:
        del state[hf_weights.HEAD]
        unfolded = fold_bias(state, head.linear, cfg.n_layer)
    result = hf.load_state_dict(state, strict=False)
    if result.missing_keys or result.unexpected_keys:
        raise Gpt1Error(f"weights do not map onto OpenAIGPT: missing {result.missing_keys[:3]}, "
                        f"unexpected {result.unexpected_keys[:3]}", run_dir)
    specials = list(meta["params"]["bpe"]["special_tokens"])
    files = _tokenizer_files(json.loads(tok_bytes), specials, cfg.n_positions)
    own = {k: v for k, v in meta.items() if k not in ("files", "zeroshot", "digest")}
    how = {"OpenAIGPTDoubleHeadsModel": f"{arch}, its multiple_choice_head the task head",
           SEQ_CLS: f"{arch} with id2label: `pipeline(\"text-classification\")` answers as "
                    "`gpt1 predict` (the head's bias folded into the last ln_2 bias)",
           }.get(arch, "body exported as OpenAIGPTLMHeadModel; the task head is "
                       "task_head.safetensors")
    if not sys.stderr.isatty():
        transformers.utils.logging.disable_progress_bar()  # no bar in a log (gpt1.progress)
    with atomic.user_folder(out_dir, overwrite, EXPORT_FILES) as tmp:
        hf.eval().save_pretrained(tmp, safe_serialization=True, max_shard_size="1000GB")
        (tmp / GPT1_TOKENIZER).write_bytes(tok_bytes)
        (tmp / TOKENIZER_FILE).write_text(
            _reading_raw_text(tok_bytes, specials, cfg.n_positions, arch == SEQ_CLS,
                              spec is not None and _reads_pairs(spec)),
            encoding="utf-8")
        files.update({BPE_META: bpe_meta, GPT1_META: json.dumps(own, indent=1, sort_keys=True),
                      "README.md": model_card(meta, _scores(meta, metrics_dir),
                                              how if head is not None else None, arch,
                                              _corpus_documents(metrics_dir), spec)})
        for name, text in files.items():
            (tmp / name).write_text(text, encoding="utf-8")
        if head is not None and arch != "OpenAIGPTDoubleHeadsModel":
            _write_head(tmp, head, meta["task"], arch, unfolded)
        for path in tmp.iterdir():  # safetensors writes 0600: readable like every other output
            path.chmod(0o644)
    log.info("exported %s -> %s (%s, vocab %d)", run_dir, out_dir, arch, meta["vocab_size"])
    return Path(out_dir)


def _spec(task: str) -> Any:
    from gpt1.tasks.registry import TASKS

    return TASKS[task]


def _architecture(head: Any) -> str:
    """The transformers class a model exports as (see the module docstring)."""
    if head is None:
        return "OpenAIGPTLMHeadModel"
    if head.fmt == "choice":
        return "OpenAIGPTDoubleHeadsModel"
    if head.fmt in ("classify", "entail") and not head.regression:
        return SEQ_CLS
    return "OpenAIGPTLMHeadModel"


def fold_bias(state: dict[str, Any], linear: Any, n_layer: int) -> Any:
    """Put the head's `linear` (W, b) into OpenAIGPTForSequenceClassification's bias-free
    `score` (transformers' names in `state`): score.weight = W, and the last block's ln_2 bias
    beta becomes beta + pinv(W) b, so that W h' = W h + b for the state h' it now outputs (the
    model reads nothing else of it). Returns beta; Gpt1Error if W cannot carry b."""
    import torch

    weight, bias = linear.weight.detach(), linear.bias.detach()
    w64, b64 = weight.double(), bias.double()
    delta = torch.linalg.pinv(w64) @ b64
    if (w64 @ delta - b64).abs().max().item() > 1e-6 * max(1.0, b64.abs().max().item()):
        raise Gpt1Error("the task head's weight has dependent rows: its bias cannot be folded "
                        "into OpenAIGPTForSequenceClassification")
    key = f"{hf_weights.PREFIX}h.{n_layer - 1}.ln_2.bias"
    beta = state[key]
    state[key] = (beta.double() + delta).to(beta.dtype)
    state["score.weight"] = weight.clone()
    return beta


def _reads_pairs(spec: Any) -> bool:
    """The task's input is a pair of texts (entailment and similarity; an own task with a
    text_b column is an entailment-format task)."""
    return bool(spec.fmt in ("entail", "similarity"))


def _reading_raw_text(tok_bytes: bytes, specials: list[str], n_positions: int,
                      layout: bool, pairs: bool = False) -> str:
    """Our tokenizer.json reading raw text as gpt1 does (gpt1.data.hf_text: the text
    standardisation as its normalizer and pre-tokenizer, a text cut where it could exceed the
    context: for a pair task each text at half of it, so that any pair fits); with `layout`,
    also a post-processor laying a text (or a pair) out as fine-tuning does:
    `_start_ A _classify_`, `_start_ A _delimiter_ B _classify_`."""
    from gpt1.data.hf_text import standardizer

    tok = json.loads(tok_bytes)
    tok.update(standardizer((n_positions - len(specials)) // (2 if pairs else 1)))
    if layout:
        tok["post_processor"] = _layout(tok, specials)
    return json.dumps(tok, ensure_ascii=False, indent=2)


def _layout(tok: dict[str, Any], specials: list[str]) -> dict[str, Any]:
    """The post-processor of a classification export (see `_reading_raw_text`)."""
    start, delim, clf = specials
    ids = {a["content"]: a["id"] for a in tok.get("added_tokens", [])}

    def piece(kind: str, name: str) -> dict[str, Any]:
        return {kind: {"id": name, "type_id": 0}}

    return {
        "type": "TemplateProcessing",
        "single": [piece("SpecialToken", start), piece("Sequence", "A"),
                   piece("SpecialToken", clf)],
        "pair": [piece("SpecialToken", start), piece("Sequence", "A"),
                 piece("SpecialToken", delim), piece("Sequence", "B"),
                 piece("SpecialToken", clf)],
        "special_tokens": {t: {"id": t, "ids": [ids[t]], "tokens": [t]} for t in specials},
    }


def _export_tensors(path: Path) -> dict[str, Any]:
    """A safetensors file of an export; Gpt1Error naming it when missing or damaged."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    if not path.is_file():
        raise Gpt1Error("missing: the export is incomplete; export the model again", path)
    try:
        return dict(load_file(str(path)))
    except SafetensorError as err:
        raise Gpt1Error(f"not a valid safetensors file, truncated or damaged ({err}); export "
                        "the model again", path) from None


def _load_into(module: Any, state: dict[str, Any], path: Path) -> None:
    """module.load_state_dict(state), its mismatch as one Gpt1Error naming the file."""
    try:
        module.load_state_dict(state)
    except RuntimeError as err:
        first = " ".join(str(err).split())[:240]
        raise Gpt1Error(f"weights do not fit the model its {GPT1_META} describes ({first})",
                        path) from None


def read_export_meta(folder: str | Path) -> dict[str, Any]:
    """gpt1_model.json of an export-hf folder, checked: valid JSON holding kind, vocab_size,
    params and (a fine-tuned model) a task of the registry."""
    from gpt1.tasks.registry import TASKS

    meta_path = Path(folder) / GPT1_META
    if not meta_path.is_file():
        raise Gpt1Error(f"not a gpt1 export-hf folder (no {GPT1_META}); export it with "
                        "`gpt1 export-hf`", folder)
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise Gpt1Error(f"not valid JSON, truncated or damaged ({err}); export the model "
                        "again", meta_path) from None
    if not isinstance(meta, dict):
        raise Gpt1Error("not a JSON object; export the model again", meta_path)
    missing = [k for k in ("kind", "vocab_size", "params") if k not in meta]
    if missing:
        raise Gpt1Error(f"missing {missing}; export the model again", meta_path)
    try:
        meta["kind"] = names.body(meta["kind"])
    except ValueError as err:
        raise Gpt1Error(f"kind: {err}; export the model again", meta_path) from None
    if not isinstance(meta["vocab_size"], int) or meta["vocab_size"] <= 0:
        raise Gpt1Error(f"vocab_size {meta['vocab_size']!r} is not a positive integer",
                        meta_path)
    custom = ((meta["params"] or {}).get("tasks") or {}).get("custom") or {}
    if meta.get("task") and meta["task"] not in TASKS and meta["task"] not in custom:
        raise Gpt1Error(f"task {meta['task']!r} is neither one of this project's tasks nor a "
                        "tasks.custom task of the export's params", meta_path)
    return meta


def load_export(folder: str | Path) -> tuple[Any, dict[str, Any]]:
    """The gpt1 model (GPT, or TaskModel of a fine-tuned export; eval mode) and its meta,
    read back from an export-hf folder (safetensors only, nothing unpickled); every file is
    checked before use, a missing or damaged one is a Gpt1Error naming it."""
    from gpt1 import networks
    from gpt1.checkpoint import recorded_params
    from gpt1.heads import TaskModel
    from gpt1.tasks.registry import TASKS

    folder = Path(folder)
    meta = read_export_meta(folder)
    params = recorded_params(meta, folder / GPT1_META)
    weights = folder / "model.safetensors"
    state = _export_tensors(weights)
    body = networks.build_model(names.TRANSFORMER, params, meta["vocab_size"])
    ours = hf_weights.from_hf({k: v for k, v in state.items() if k.startswith("transformer.")})
    if "tokens_embed.weight" not in ours and "lm_head.weight" in state:
        ours["tokens_embed.weight"] = state["lm_head.weight"]  # saved once, as the tied head
    if "tokens_embed.weight" in ours:  # model.vocab_pad_multiple: the export has the real rows
        ours = hf_weights.pad_embedding(ours, body.tokens_embed.weight.shape[0])
    spec = TASKS[meta["task"]] if meta.get("task") else None
    head = {} if spec is None else (
        {k[len(MC_HEAD):]: v for k, v in state.items() if k.startswith(MC_HEAD)}
        if spec.fmt == "choice" else _export_tensors(folder / HEAD_FILES[0]))
    if UNFOLDED in head:  # a sequence-classification export: the body's own ln_2 bias
        ours[f"h.{params.model.n_layer - 1}.ln_2.bias"] = head.pop(UNFOLDED)
    missing = set(body.state_dict()) - set(ours)
    if missing:
        raise Gpt1Error(f"weights missing from the export: {sorted(missing)[:3]}", weights)
    _load_into(body, ours, weights)
    model: Any = body
    if spec is not None:
        model = TaskModel(body, spec, params.finetune.clf_pdrop, params.model.initializer_range)
        _load_into(model.head.linear, head,
                   weights if spec.fmt == "choice" else folder / HEAD_FILES[0])
    return model.eval(), meta


def own_tokenizer(folder: Path, spare: Path) -> Path:
    """The folder holding the export's tokenizer as gpt1 reads it (the tokenizer.json the
    model was trained with, hash-checked): `spare` with its gpt1_tokenizer.json (the export's
    tokenizer.json reads raw text), or the export itself when it was written without one."""
    if not (folder / GPT1_TOKENIZER).is_file():
        return folder
    spare.mkdir(parents=True)
    (spare / TOKENIZER_FILE).write_bytes((folder / GPT1_TOKENIZER).read_bytes())
    (spare / BPE_META).write_bytes((folder / BPE_META).read_bytes())
    from gpt1.bpe import load_bpe

    try:
        load_bpe(spare)  # a damaged file is named as the export's, not as the spare copy
    except Gpt1Error as err:
        raise Gpt1Error(err.problem, folder / GPT1_TOKENIZER) from None
    return spare


def _write_head(out_dir: Path, head: Any, task: str, arch: str, unfolded: Any) -> None:
    """The task head as task_head.safetensors (linear weight, bias; the unfolded ln_2 bias of
    a sequence-classification export) + task_head.json."""
    from safetensors.torch import save_file

    spec = _spec(task)
    tensors = {k: v.contiguous() for k, v in head.linear.state_dict().items()}
    if unfolded is not None:
        tensors[UNFOLDED] = unfolded.contiguous()
    save_file(tensors, str(out_dir / "task_head.safetensors"))
    (out_dir / "task_head.json").write_text(json.dumps({
        "task": task, "format": spec.fmt, "labels": list(spec.labels),
        "regression": spec.regression,
        "input": "final hidden state at the `_classify_` token of each sequence",
        "transformers": (f"{arch}: its `score` is this head, the bias folded into the last "
                         "block's ln_2 bias" if arch == SEQ_CLS else
                         "none: load the body as OpenAIGPTLMHeadModel and apply this head"),
    }, indent=2), encoding="utf-8")
