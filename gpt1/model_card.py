"""The model card (README.md) of an `export-hf` folder, written by huggingface_hub's ModelCard:
a YAML metadata header the Hub reads (license, library_name, pipeline_tag, datasets, metrics,
tags), then what the model is, its data, params, scores (a table) and limits."""

from __future__ import annotations

from pathlib import Path
from typing import Any

LICENSE = "mit"
"""The project's licence (pyproject.toml), the card's `license`."""
HF_METRICS = {"acc": "accuracy", "f1": "f1", "mcc": "matthews_correlation",
              "pearson": "pearsonr", "spearman": "spearmanr"}
"""Our score names -> the Hub's metric ids."""
PIPELINES = {"OpenAIGPTForSequenceClassification": "text-classification",
             "OpenAIGPTDoubleHeadsModel": "multiple-choice"}
"""The exported class -> the pipeline it serves (an LM: text-generation; a task body exported as
an LM beside its head serves none)."""


def corpus(p: dict[str, Any]) -> str:
    """The pre-training corpus the run's body actually saw: the released weights' BooksCorpus
    for an import, else the hub dataset or the local mirror (Project Gutenberg books when the
    run strips Gutenberg headers) that `data.source` names."""
    if p["pretrain"].get("import_hf"):
        return "bookcorpus"
    if p["data"]["source"] == "hub":
        return str(p["data"]["hub_dataset"])
    return ("project-gutenberg (local mirror)" if p["clean"].get("strip_gutenberg")
            else "local mirror")


def eval_results(meta: dict[str, Any], scores: dict[str, Any] | None, spec: Any
                 ) -> list[Any] | None:
    """The card's `model-index`: each of the task's metrics its metrics file recorded (the
    mean over fine-tuning seeds, on the task's test split as the record names it)."""
    from huggingface_hub import EvalResult

    task = meta.get("task")
    if not task or not scores or spec is None:
        return None
    recorded = scores.get("scores", {})
    out = []
    for name in dict.fromkeys((spec.metric, *spec.metrics)):
        value = recorded.get(name)
        mean = value.get("mean") if isinstance(value, dict) else value
        if isinstance(mean, int | float) and not isinstance(mean, bool):
            out.append(EvalResult(
                task_type="text-classification", dataset_type=task_dataset(spec),
                dataset_name=spec.title, dataset_config=spec.hub.name if spec.hub else None,
                dataset_split="test",
                metric_type=HF_METRICS.get(name.split("_")[0], name), metric_name=name,
                metric_value=float(mean),
                metric_config=str(scores.get("scored_on") or "") or None))
    return out or None


def task_dataset(spec: Any) -> str:
    """A task's dataset: its hub id, or the file of a task of the user's own."""
    return str(spec.hub.path) if spec.hub else f"{Path(spec.custom.file).name} (local file)"


def metadata(meta: dict[str, Any], scores: dict[str, Any] | None = None,
             arch: str = "OpenAIGPTLMHeadModel", spec: Any = None) -> Any:
    """The card's ModelCardData: the pre-training corpus the run used and the task's dataset,
    the task's metrics, the pipeline the exported class serves, and the recorded scores as
    `model-index`."""
    from huggingface_hub import ModelCardData

    p, task = meta["params"], meta.get("task")
    datasets = [corpus(p)]
    if task and spec is not None:
        datasets.append(task_dataset(spec))
        metrics = [HF_METRICS.get(m, m) for m in spec.metrics]
        pipeline = PIPELINES.get(arch)
    else:
        metrics, pipeline = ["perplexity"], "text-generation"
    results = eval_results(meta, scores, spec)
    return ModelCardData(license=LICENSE, library_name="transformers", pipeline_tag=pipeline,
                         datasets=datasets, metrics=metrics,
                         tags=["gpt1", "openai-gpt", *([task] if task else [])],
                         model_name=f"gpt1-{task}" if results else None,
                         eval_results=results)


def _score_table(scores: dict[str, Any]) -> list[str]:
    """{"scores": {name: {"mean", "sd", "per_seed"}}} or flat numbers -> a Markdown table."""
    rows = scores.get("scores", scores)
    lines = ["| score | mean | sd | seeds |", "|---|---|---|---|"]
    for name, value in sorted(rows.items()):
        if isinstance(value, dict) and "mean" in value:
            sd, seeds = value.get("sd"), len(value.get("per_seed", []))
            lines.append(f"| {name} | {value['mean']:.4f} | "
                         f"{'' if sd is None else f'{sd:.4f}'} | {seeds} |")
        elif isinstance(value, int | float) and not isinstance(value, bool):
            lines.append(f"| {name} | {value:.4f} | | |")
    return lines


def trained_on(p: dict[str, Any], documents: int | None) -> str:
    """What the body was pre-trained on, in words: the released weights' corpus for an
    import, else the count of documents the workspace's clean_corpus record holds (books when
    Gutenberg headers are stripped), or no count when there is no record."""
    if p["pretrain"].get("import_hf"):
        return "the released weights' BooksCorpus (imported)"
    what = "public-domain books" if p["clean"].get("strip_gutenberg") else "documents"
    return f"{documents} {what}" if documents is not None else f"{corpus(p)} ({what})"


def model_card(meta: dict[str, Any], scores: dict[str, Any] | None, head: str | None,
               arch: str = "OpenAIGPTLMHeadModel", documents: int | None = None,
               spec: Any = None) -> str:
    """README.md of an export: the metadata header, then the card's text. `head` names how
    the task head is exported (None for a pre-trained LM), `arch` the transformers class,
    `documents` the size of the pre-training corpus (None: not known), `spec` the task's
    TaskSpec (its dataset and metrics)."""
    from huggingface_hub import ModelCard

    p, task = meta["params"], meta.get("task")
    m = p["model"]
    what = (f"GPT-1 fine-tuned on **{task}** ({head})" if task else
            "GPT-1 pre-trained language model (OpenAIGPTLMHeadModel)")
    data = p["data"]
    source = (f"the released weights' corpus (`{corpus(p)}`), imported by `gpt1 import-hf`"
              if p["pretrain"].get("import_hf") else
              f"{corpus(p)} `{p['paths']['mirror_dir']}`" if data["source"] != "hub"
              else f"hub dataset `{data['hub_dataset']}`")
    body = [
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
        *(_score_table(scores) if scores else ["No metrics file found for this model."]), "",
        "## Use", "",
        "`gpt1 predict --model <this folder> TEXT` (fine-tuned) or `gpt1 generate --model "
        "<this folder> PROMPT` answer from this folder alone, outside the repository.",
        *(["", "`transformers.pipeline(\"text-classification\", model=<this folder>)` gives the "
           "same labels and probabilities on raw text, with no extra argument (pairs: "
           "`{\"text\": A, \"text_pair\": B}`; one input per batch, the model has no padding "
           "token)."]
          if PIPELINES.get(arch) == "text-classification" else []), "",
        "## Limits", "",
        "- The tokenizer standardises raw text as training did (ftfy's quote and dash fixes, "
        "the original release's punctuation rules, spaCy's English splits and exceptions, "
        "lower-case) with tokenizers' own normalizer and pre-tokenizer. Not reproduced: ftfy's "
        "other repairs (mojibake, HTML entities) and spaCy's URL, emoticon and letter-case "
        f"rules; a text is cut after {m['n_positions'] - len(p['bpe']['special_tokens'])} "
        "characters (each text of a pair task after half of that), so any input fits the "
        "context (gpt1 cuts tokens, so a text that long can answer otherwise).",
        f"- A research reproduction at the params above, pre-trained on "
        f"{trained_on(p, documents)}: not a general-purpose or safe text generator; it "
        "repeats the biases of its corpus.",
        *([f"- The task head: {head}; see gpt1/heads.py for how it reads the `_classify_` "
           "token's state."] if task else []),
        "",
    ]
    header = metadata(meta, scores, arch, spec).to_yaml()
    card = ModelCard(f"---\n{header}\n---\n\n" + "\n".join(body))
    return str(card)
