"""The report document: banner, tables, findings, Figure 2 and its words, evaluation splits,
provenance and stage wall times, assembled into reports/report.md beside the figure and the
`dvc plots` CSVs."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gpt1.config import Params
from gpt1.records import Metrics, split_origins, variant_results
from gpt1.report.figure2 import (
    MODEL_LABELS,
    layer_bands,
    layer_curves,
    plot_figure2,
    plot_tables,
    zeroshot_bands,
    zeroshot_curves,
)
from gpt1.report.findings import render_findings
from gpt1.report.prose import compare_left, compare_right, describe_left, describe_right
from gpt1.report.tables import render_ablations, render_table
from gpt1.tasks.registry import TASKS


def _splits_section(metrics: Metrics) -> list[str]:
    lines = ["| metrics file | evaluated on | n_train | n_eval | config hash |",
             "|---|---|---:|---:|---|"]
    for stem, m in sorted(metrics.items()):
        same = metrics.get(f"finetune_{m.get('task')}", {}).get("eval_split")
        variant = m.get("variant", "full")
        if "eval_split" in m and not (variant != "full" and m["eval_split"] == same):
            lines.append(f"| {stem} | {m['eval_split']} | {m.get('n_train', '')} | "
                         f"{m.get('n_eval', '')} | {m.get('config_hash', '')} |")
    return lines


def _carved(full: Mapping[str, dict[str, Any]]) -> str:
    """Which canonical splits of each task were carved out of another file (seeded)."""
    parts = []
    for task, m in sorted(full.items()):
        origins = split_origins(m)
        which = [split for split in ("test", "dev") if origins.get(split) == "carved"]
        if which:
            parts.append(f"{task} ({' and '.join(which)})")
    return ", ".join(parts) if parts else "none among the tasks run"


def _zeroshot_table(metrics: Metrics) -> list[str]:
    """Raw zero-shot scores (x 100) per checkpoint and model."""
    lines: list[str] = []
    for stem, m in sorted(metrics.items()):
        if not stem.startswith("zeroshot") or "checkpoints" not in m:
            continue
        tasks = [t for t in m["checkpoints"][0]["normalised"]] if m["checkpoints"] else []
        if not lines:
            lines = ["| model | step | " + " | ".join(tasks) + " |",
                     "|---|---:|" + "---:|" * len(tasks)]
        for c in m["checkpoints"]:
            raw = c.get("scores", {})
            lines.append(f"| {MODEL_LABELS.get(m['model'], m['model'])} | {c['step']} | "
                         + " | ".join(f"{100 * raw[t]:.1f}" if t in raw else "n/a"
                                      for t in tasks) + " |")
    return lines


def _provenance(params: Params, metrics: Metrics) -> list[str]:
    lines = [f"- Task data: {params.paths.mirror_dir or 'the Hugging Face hub'} "
             "(files and sources in its MANIFEST.md), read in place; canonical tables in "
             f"`{params.paths.tasks}`."]
    dl = metrics.get("download_corpus")
    if dl:
        lines.append(f"- Pre-training corpus: source `{dl.get('source')}`, {dl.get('files')} "
                     f"files, {dl.get('bytes')} bytes (BooksCorpus stand-in).")
    for stage in ("pretrain", "pretrain_lstm"):
        m = metrics.get(stage)
        if m:
            keys = ", ".join(f"{k} {m[k]:.4g}" if isinstance(m[k], float) else f"{k} {m[k]}"
                             for k in ("steps", "tokens", "val_ppl", "val_loss") if k in m)
            lines.append(f"- `{stage}`: {keys or 'see its metrics file'}.")
    return lines


# Pipeline order of the stage records (a record's stem starts with its stage's prefix).
_STAGE_ORDER = ("download_corpus", "clean_corpus", "check_corpus", "train_bpe", "shard_corpus",
                "pretrain", "prepare_task", "finetune", "layers", "zeroshot")


def _stage_rank(stem: str) -> tuple[int, str]:
    ranks = [i for i, p in enumerate(_STAGE_ORDER) if stem == p or stem.startswith(p + "_")]
    return (min(ranks) if ranks else len(_STAGE_ORDER), stem)


def _minutes(seconds: float) -> str:
    return f"{int(seconds // 60)}:{int(round(seconds % 60)):02d}"


def wall_times(metrics: Metrics) -> list[str]:
    """The wall time of every stage record that carries one (sidecar `wall_seconds`: from the
    stage's process start to its record; gpt1.records.write_metrics), in pipeline order, and
    their sum; the stages without one are named."""
    timed = sorted((s for s, m in metrics.items()
                    if isinstance(m.get("wall_seconds"), (int, float))), key=_stage_rank)
    if not timed:
        return []
    total = sum(float(metrics[s]["wall_seconds"]) for s in timed)
    lines = ["| stage record | wall (m:ss) | seconds |", "|---|---:|---:|"]
    lines += [f"| {s} | {_minutes(metrics[s]['wall_seconds'])} | {metrics[s]['wall_seconds']:.1f} |"
              for s in timed]
    lines += [f"| **sum** | **{_minutes(total)}** | {total:.1f} |", ""]
    untimed = sorted(set(metrics) - set(timed), key=_stage_rank)
    lines.append("Each stage's process, from start to its record (imports included); DVC's own "
                 "bookkeeping between stages and the untimed `scan_mirror` and `report` stages "
                 "are outside the sum." + (f" Records without a wall time: {', '.join(untimed)}."
                                           if untimed else ""))
    return lines


def _parameters(params: Params, vocab_size: int) -> int:
    """Parameters of the Transformer, counted on the model built on torch's meta device."""
    import torch

    from gpt1.model import GPT, count_parameters

    with torch.device("meta"):
        return count_parameters(GPT(params.model, vocab_size))


def _split_kind(task: str) -> str:
    """A task's reported split as the banner groups it: official test, official dev, or carved
    (carved by us or held out of the official train)."""
    origin = TASKS[task].origin("test")
    return "carved" if origin in ("carved", "held-out") else origin


def banner(params: Params, metrics: Metrics) -> list[str]:
    """Preset, model size, pre-training tokens and validation perplexity, data substitutions."""
    m, pre = params.model, metrics.get("pretrain", {})
    vocab = metrics.get("train_bpe", {}).get("vocab_size")
    size = (f"{m.n_layer} layers x {m.n_embd} wide, {m.n_head} heads, context {m.n_positions}"
            + (f", {_parameters(params, int(vocab)) / 1e6:.1f} M parameters" if vocab else ""))
    tokens = f"{pre['tokens']:,}" if "tokens" in pre else "n/a"
    ppl = f"{pre['val_ppl']:.1f}" if "val_ppl" in pre else "n/a"
    ft = params.finetune
    full = variant_results(metrics, "full")
    kinds: dict[str, list[str]] = {}
    for task in full:
        kinds.setdefault(_split_kind(task), []).append(task)
    over = ", ".join(f"{t} {o.max_train_examples:,}" for t, o in ft.overrides.items()
                     if o.max_train_examples)
    cap = ("all training examples" if ft.max_train_examples is None else
           f"training sets sampled to at most {ft.max_train_examples:,} examples per task "
           f"(seeded; per-task caps: {over or 'none'})")
    return [
        f"> **Preset: {params.report.preset}.** Model: {size}. Pre-training: {tokens} tokens, "
        f"validation perplexity {ppl}. Seeds: {', '.join(map(str, ft.seeds))}.",
        f"> Data substitutions: Project Gutenberg books for BooksCorpus; {cap}; reported "
        "splits: " + "; ".join(f"{k}: {', '.join(sorted(v))}" for k, v in sorted(kinds.items()))
        + ".", ""]


# The command that regenerates each preset's report from a fresh clone (README, "Presets").
REGENERATE = {
    "demo": "dvc repro",
    "study": "cp configs/cpu-study.yaml params.yaml && dvc exp run -n study",
    "paper": "cp configs/paper.yaml params.yaml && dvc exp run -n paper",
}


def build_report(params: Params, metrics: Metrics, config_hash: str, figure_name: str,
                 expected_hashes: Mapping[str, str]) -> str:
    """The markdown report (deterministic: same metrics and params, same text).

    A metrics file whose config_hash is neither `expected_hashes[stem]` (variants run with
    overridden params) nor `config_hash` is listed as stale.
    """
    cfg = params.report
    full = variant_results(metrics, "full")
    left = layer_curves(metrics, params.layers.tasks, params.layers.layers_transferred)
    right = zeroshot_curves(metrics)
    stale = sorted(s for s, m in metrics.items()
                   if m.get("config_hash") not in (None, expected_hashes.get(s, config_hash)))
    seeds = sorted({len(next(iter(m["scores"].values())).get("per_seed", [0]))
                    for m in full.values() if m["scores"]})
    out = [
        "# GPT-1 reproduction: results", "",
        f"Regenerate from a fresh clone (after `bash setup.sh && source .venv/bin/activate`): "
        f"`{REGENERATE[params.report.preset]}`.", "", *banner(params, metrics),
        f"Config hash `{config_hash}` (sha256 of the params, first 12 hex digits).", "",
        "Each table names the split each task is scored on (official test, official dev, or a "
        "seeded carve-out where the mirror lacks it), after model selection on a separate dev "
        "split; the paper's GLUE numbers are test-server results. Numbers are x 100; ours are "
        "the mean over seeds, ± the sample sd where there are >= 2 seeds (seeds per task: "
        f"{', '.join(map(str, seeds)) or 'none'}); 95 % CI = percentile bootstrap over eval "
        f"examples ({params.report.bootstrap_samples} resamples, seed "
        f"{params.report.bootstrap_seed}), shared by the seeds; chance = expected score of "
        "uniform random guessing, majority = always the training split's most frequent label, "
        "both on the scored split; Δ = ours - paper. `*` = some of the column's scores are "
        "missing (footnotes).", "",
    ]
    if stale:
        out += [f"Metrics written under another config hash (params changed since they ran; "
                f"`dvc status` tells whether their own inputs did): {', '.join(stale)}.", ""]
    for name in cfg.paper:
        out += [render_table(name, params, full), ""]
    glue_def = "; ".join(f"{t}: {'/'.join(s)}" for t, s in cfg.glue.items())
    out += [f"Our GLUE column is the mean over {len(cfg.glue)} GLUE tasks of each task's mean "
            f"score ({glue_def}); the paper's also includes WNLI and is a test-server "
            "score, so it is not directly comparable.", ""]
    out += [render_ablations(params, metrics), ""]
    out += render_findings(params, metrics, left, right)
    out += ["## Figure 2", "", f"![Figure 2]({figure_name})", "",
            f"Left, layers transferred ({', '.join(params.layers.tasks)}; k in "
            f"{list(params.layers.layers_transferred)}; solid = dev, dashed = train "
            "accuracy, mean over seeds; shaded = 95 % bootstrap CI over dev examples). "
            + describe_left(left) + f" Paper: {cfg.paper_figure2['left']}. "
            + compare_left(left), "",
            "Right, zero-shot (0 = random guess, 1 = state of the art; Transformer solid, "
            "LSTM dashed; shaded = 95 % bootstrap CI over the scored examples: one pre-training "
            "run per model, so no seed spread). " + describe_right(right)
            + f" Paper: {cfg.paper_figure2['right']}. " + compare_right(right), ""]
    ztable = _zeroshot_table(metrics)
    if ztable:
        out += ["Zero-shot raw scores (x 100; accuracy, CoLA MCC) per checkpoint:", "",
                *ztable, ""]
    norm = params.zeroshot.norm
    out += ["Zero-shot normalisation: " + "; ".join(
        f"{t} {n.metric}: random {n.random}, state of the art {n.sota} ({n.source})"
        for t, n in norm.items()) + ".", ""]
    out += ["## Evaluation splits", "",
            "Ablation files are listed only where their split differs from that of "
            "finetune_<task>.", "",
            f"Splits carved out of another file (seeded; gpt1/tasks/registry.py): "
            f"{_carved(full)}.", "", *_splits_section(metrics), ""]
    out += ["## Data provenance", "", *_provenance(params, metrics), ""]
    times = wall_times(metrics)
    if times:
        out += ["## Stage wall times", "", *times, ""]
    return "\n".join(out)


def write_outputs(params: Params, metrics: Metrics, expected_hashes: Mapping[str, str]
                  ) -> dict[str, Path]:
    """reports/report.md, reports/figure2.png and the `dvc plots` CSVs (reports/plots/)."""
    import pandas as pd

    from gpt1 import atomic

    out = Path(params.paths.reports)
    left = layer_curves(metrics, params.layers.tasks, params.layers.layers_transferred)
    right = zeroshot_curves(metrics)
    paths = {"figure": out / "figure2.png", "report": out / "report.md"}
    bands = {"left": layer_bands(params, metrics), "right": zeroshot_bands(params, metrics)}
    plot_figure2(left, right, paths["figure"], params.report.figure_dpi, params.model.n_layer,
                 bands)
    for name, rows in plot_tables(left, right, params.zeroshot.tasks).items():
        if name == "figure2_left":  # one file per task of params layers.tasks: the plot
            for task in params.layers.tasks:  # definition (a folder) follows the params
                paths[f"{name}_{task}"] = out / "plots" / name / f"{task}.csv"
                table = [{"layers": r["layers"], "dev": r.get(f"{task}_dev"),
                          "train": r.get(f"{task}_train")} for r in rows]
                atomic.write_text(paths[f"{name}_{task}"], pd.DataFrame(table).to_csv(index=False))
            continue
        paths[name] = out / "plots" / f"{name}.csv"
        atomic.write_text(paths[name], pd.DataFrame(rows).to_csv(index=False))
    text = build_report(params, metrics, params.digest(), paths["figure"].name, expected_hashes)
    atomic.write_text(paths["report"], text)
    paths["headline"] = out / HEADLINE_FILE
    atomic.write_json(paths["headline"], headline(params, metrics))
    return paths


HEADLINE_FILE = "headline.json"
"""The scores a user compares across experiments, as one small DVC metrics file (short,
unique keys, so `dvc exp show --drop '.*' --keep 'Experiment|ft'` and `dvc metrics show` fit a
terminal): each fine-tuned task's primary score (mean over seeds, %) as ft.<task>."""


def headline(params: Params, metrics: Metrics) -> dict[str, Any]:
    """{"ft": {task: primary score %}} for the tasks of params.finetune.tasks fine-tuned under
    the current params (a record of another config is left out)."""
    scores = {}
    for task in params.finetune.tasks:
        record = metrics.get(f"finetune_{task}")
        if record is None or record.get("config_hash") != params.digest():
            continue
        value = record["scores"].get(TASKS[task].metric, {}).get("mean")
        if value is not None:
            scores[task] = round(100 * float(value), 1)
    return {"ft": scores}
