"""The model card (README.md) of an `export-hf` folder, written by huggingface_hub's ModelCard:
a YAML metadata header the Hub reads (license, library_name, pipeline_tag, datasets, metrics,
tags), then what the model is, its data, params, scores (a table) and limits."""

from __future__ import annotations

from typing import Any

LICENSE = "mit"
"""The project's licence (pyproject.toml), the card's `license`."""
HF_METRICS = {"acc": "accuracy", "f1": "f1", "mcc": "matthews_correlation",
              "pearson": "pearsonr", "spearman": "spearmanr"}
"""Our score names -> the Hub's metric ids."""


def metadata(meta: dict[str, Any]) -> Any:
    """The card's ModelCardData: the pre-training corpus and the task's dataset, the task's
    metrics, and the pipeline the exported class serves."""
    from huggingface_hub import ModelCardData

    from gpt1.tasks.registry import TASKS

    p, task = meta["params"], meta.get("task")
    data = p["data"]
    datasets = [data["hub_dataset"]] if data.get("hub_dataset") else []
    if task:
        spec = TASKS[task]
        datasets.append(spec.hub.path)
        metrics = [HF_METRICS.get(m, m) for m in spec.metrics]
        pipeline = "text-classification"
    else:
        metrics, pipeline = ["perplexity"], "text-generation"
    return ModelCardData(license=LICENSE, library_name="transformers", pipeline_tag=pipeline,
                         datasets=datasets, metrics=metrics,
                         tags=["gpt1", "openai-gpt", *([task] if task else [])])


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


def model_card(meta: dict[str, Any], scores: dict[str, Any] | None, head: str | None) -> str:
    """README.md of an export: the metadata header, then the card's text. `head` names how
    the task head is exported (None for a pre-trained LM)."""
    from huggingface_hub import ModelCard

    p, task = meta["params"], meta.get("task")
    m = p["model"]
    what = (f"GPT-1 fine-tuned on **{task}** ({head})" if task else
            "GPT-1 pre-trained language model (OpenAIGPTLMHeadModel)")
    data = p["data"]
    source = (f"local mirror `{p['paths']['mirror_dir']}`" if data["source"] != "hub"
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
        "<this folder> PROMPT` answer from this folder alone, outside the repository.", "",
        "## Limits", "",
        "- Inputs must be standardised like the training text (gpt1.data.clean): transformers'"
        " tokenizer does not run ftfy or the punctuation rules.",
        "- A research reproduction at the params above (the demo preset is a small model on "
        "113 public-domain books): not a general-purpose or safe text generator; it repeats "
        "the biases of 19th-century fiction.",
        *([f"- The task head: {head}; see gpt1/heads.py for how it reads the `_classify_` "
           "token's state."] if task else []),
        "",
    ]
    card = ModelCard(f"---\n{metadata(meta).to_yaml()}\n---\n\n" + "\n".join(body))
    return str(card)
