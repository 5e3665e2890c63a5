"""The report document: banner, plan, tables, findings, Figure 2 and its words, evaluation
splits, data provenance and stage wall times, assembled into reports/report.md beside the
figure, the `dvc plots` CSVs, the findings file and the headline."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from gpt1 import names
from gpt1.config import Params
from gpt1.freshness import is_current
from gpt1.records import Metrics
from gpt1.report.curves import FIGURE, curves_section, plot_curves
from gpt1.report.design import design_section
from gpt1.report.estimates import Finding, findings_json
from gpt1.report.figure2 import (
    MODEL_LABELS,
    at_floors,
    baseline_lines,
    layer_bands,
    layer_curves,
    plot_figure2,
    plot_tables,
    zeroshot_bands,
    zeroshot_curves,
)
from gpt1.report.findings import evaluate_findings, render_findings
from gpt1.report.headline import HEADLINE_FILE, headline
from gpt1.report.pilots import pilot_section
from gpt1.report.plan import plan_section
from gpt1.report.prose import compare_left, compare_right, describe_left, describe_right
from gpt1.report.runs import first_run, split_origins, variant_results
from gpt1.report.tables import render_ablations, render_custom, render_table
from gpt1.stage_table import record_prefix
from gpt1.tasks.registry import FRESH, TASKS


def _splits_section(metrics: Metrics) -> list[str]:
    lines = ["| metrics file | evaluated on | n_train | n_eval | config hash |",
             "|---|---|---:|---:|---|"]
    for stem, m in sorted(metrics.items()):
        full = first_run(metrics, record_prefix("finetune", task=m.get("task")),
                         task=m.get("task"),
                         variant="full")
        same = (full or {}).get("eval_split")
        variant = m.get("variant", "full")
        if "eval_split" in m and not (variant != "full" and m["eval_split"] == same):
            lines.append(f"| {stem} | {m['eval_split']} | {m.get('n_train', '')} | "
                         f"{m.get('n_eval', '')} | {m.get('config_hash', '')} |")
        fresh = m.get(FRESH)
        if isinstance(fresh, Mapping) and variant == "full":  # every arm scores the same rows
            lines.append(f"| {stem} | {FRESH} = {fresh.get('scored_on', '')} | "
                         f"{m.get('n_train', '')} | {fresh.get('n_eval', '')} | "
                         f"{m.get('config_hash', '')} |")
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
            seed = f" p{m['pretrain_seed']}" if "pretrain_seed" in m else ""
            body = names.record_body(m) or "?"
            lines.append(f"| {MODEL_LABELS.get(body, body)}{seed} | {c['step']} | "
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
        m = first_run(metrics, stage)
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
    m, pre = params.model, first_run(metrics, "pretrain") or {}
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
    # pretrain.import_hf (gpt1/hf_stand_in.py)
    src = (pre.get("imported_from") or {}).get("source")
    pretraining, books = ((f"OpenAI's released weights imported from `{src}` (gpt1 import-hf; "
                           f"not pre-trained here), validation perplexity {ppl} on our "
                           "held-out books", "none for pre-training (the release's BooksCorpus)")
                          if src else (f"{tokens} tokens, validation perplexity {ppl}",
                                       "Project Gutenberg books for BooksCorpus"))
    return [
        f"> **Preset: {params.report.preset}.** Model: {size}. Pre-training: {pretraining}. "
        f"Seeds: {', '.join(map(str, ft.seeds))}.",
        *hardware_line(metrics),
        f"> Data substitutions: {books}; {cap}; reported "
        "splits: " + "; ".join(f"{k}: {', '.join(sorted(v))}" for k, v in sorted(kinds.items()))
        + ".", ""]


def hardware_line(metrics: Metrics) -> list[str]:
    """The banner's line naming the CPU(s) the run was made on, from the records' `hardware`
    fields (gpt1.hardware: model name and widest instruction set), each with its count of
    records; nothing when no record carries the field (records written before it)."""
    cpus: dict[str, int] = {}
    for m in metrics.values():
        hw = m.get("hardware")
        if hw:
            text = f"{hw['model']} ({hw['isa']})"  # gpt1.hardware.Cpu.text, from the record
            cpus[text] = cpus.get(text, 0) + 1
    if not cpus:
        return []
    without = len(metrics) - sum(cpus.values())
    return ["> Made on: " + "; ".join(f"{cpu}, {n} of {len(metrics)} stage records"
                                      for cpu, n in sorted(cpus.items(), key=lambda c: -c[1]))
            + (f"; {without} records name no CPU (written before the field)" if without
               else "") + " (the records' `hardware` field: model name and widest instruction "
            "set)."]


def selection_text(full: Mapping[str, dict[str, Any]]) -> str:
    """How the scored epoch was chosen, from the records' `select` field."""
    kinds = {m.get("select") for m in full.values()}
    if kinds == {"final"}:
        return "the final epoch is scored (no selection, as the paper)."
    if kinds == {"dev"}:
        return "the epoch is chosen on a dev split that no table reports."
    return ("records without a `select` field chose the epoch on a dev split (see Evaluation "
            "splits).")


# The command that regenerates each preset's report from a fresh clone (README, "Presets").
REGENERATE = {
    "demo": "dvc repro",
    "study": "cp configs/cpu-study.yaml params.yaml && dvc exp run -n study",
    "gpu-study": "cp configs/gpu-study.yaml params.yaml && dvc exp run -n gpu-study",
    "paper": "cp configs/paper.yaml params.yaml && dvc exp run -n paper",
    "paper-finetune": "cp configs/paper-finetune.yaml params.yaml && dvc exp run -n "
                      "paper-finetune",
}


def build_report(params: Params, metrics: Metrics, config_hash: str, figure_name: str,
                 expected_hashes: Mapping[str, str],
                 found: Sequence[Finding] | None = None) -> str:
    """The markdown report (deterministic: same metrics and params, same text).

    A record whose stage hash is not its stage's now (gpt1.freshness) is listed as stale; one
    written before stage hashes, when its config_hash is neither `expected_hashes[stem]`
    (variants run with overridden params) nor `config_hash`.
    """
    cfg = params.report
    metrics = at_floors(params, metrics)
    full = variant_results(metrics, "full")
    left = layer_curves(metrics, params.layers.tasks, params.layers.layers_transferred)
    right = zeroshot_curves(metrics)
    stale = sorted(s for s, m in metrics.items() if ("stage_hash" in m or "config_hash" in m)
                   and not is_current(params, s, m, expected_hashes.get(s, config_hash)))
    seeds = sorted({len(next(iter(m["scores"].values())).get("per_seed", [0]))
                    for m in full.values() if m["scores"]})
    out = [
        "# GPT-1 reproduction: results", "",
        f"Regenerate from a fresh clone (after `bash setup.sh && source .venv/bin/activate`): "
        f"`{REGENERATE[params.report.preset]}`.", "", *banner(params, metrics),
        f"Config hash `{config_hash}` (sha256 of the params, first 12 hex digits).", "",
        "Each table names the split each task is scored on (official test, official dev, or a "
        f"seeded carve-out where the mirror lacks it); {selection_text(full)} The paper's GLUE "
        "numbers are test-server results. Numbers are x 100; ours are the mean over runs "
        "(pre-training seed x fine-tuning seed), ± the sample sd where there are >= 2 runs "
        f"(runs per task: {', '.join(map(str, seeds)) or 'none'}); 95 % CI = run-level "
        f"hierarchical bootstrap ({params.report.bootstrap_samples:,} draws, seed "
        f"{params.report.bootstrap_seed}): eval examples resampled once per draw and shared by "
        "every arm and run, plus the fine-tuning-seed error drawn from its t distribution "
        "(F - 1 degrees of freedom; gpt1/stats.py), conditional on the pre-trained models "
        "(their seeds are kept, not resampled); no CI where the per-example prediction files "
        "are absent. Chance = expected score of "
        "uniform random guessing, majority = always the training split's most frequent label, "
        "both on the scored split; Δ = ours - paper, not printed for a flagged cell (FLAG: >= "
        f"{100 * params.report.degenerate_frac:.0f} % of predictions one class, or a CI that "
        "does not clear the majority baseline; `unchecked` = no predictions to check). `*` = "
        "some of the column's scores are missing (footnotes).", "",
        *plan_section(params), "",
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
    out += render_custom(params, full)
    out += [render_ablations(params, metrics), ""]
    lrs = pilot_section(params, metrics)
    if lrs:
        out += ["### Pilots (on a split carved from the training pool) and the gate", "", *lrs,
                ""]
    found = list(found) if found is not None else evaluate_findings(params, metrics, left, right)
    out += render_findings(params, metrics, left, right, found)
    out += design_section(params, metrics)
    out += ["## Figure 2", "", f"![Figure 2]({figure_name})", "",
            f"Left, layers transferred ({', '.join(params.layers.tasks)}; k in "
            f"{list(params.layers.layers_transferred)}; solid = the scored split, dashed = train "
            "accuracy, mean over runs; shaded = 95 % run-level bootstrap CI; dotted = chance, "
            "dash-dot = majority). "
            + describe_left(left) + f" Paper: {cfg.paper_figure2['left']}. "
            + compare_left(found[2]), "",
            "Right, zero-shot (0 = random guess, 1 = state of the art; Transformer solid, "
            "LSTM dashed; shaded = 95 % bootstrap CI over the scored examples and pre-training "
            "seeds; dotted = chance (0), dash-dot = majority). " + describe_right(right)
            + f" Paper: {cfg.paper_figure2['right']}. " + compare_right(found[3]), ""]
    out += curves_section(params, metrics)
    ztable = _zeroshot_table(metrics)
    if ztable:
        out += ["Zero-shot raw scores (x 100; accuracy, CoLA MCC) per checkpoint:", "",
                *ztable, ""]
    norm = params.zeroshot.norm
    out += ["Zero-shot normalisation: " + "; ".join(
        f"{t} {n.metric}: " + (f"floor {cfg.zeroshot_floors[t]} (report.zeroshot_floors; "
                               f"random guess {n.random})" if t in cfg.zeroshot_floors
                               else f"random {n.random}")
        + f", state of the art {n.sota} ({n.source})" for t, n in norm.items()) + ".", ""]
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
    records = metrics  # the findings file's digest is of the records as written
    metrics = at_floors(params, metrics)
    left = layer_curves(metrics, params.layers.tasks, params.layers.layers_transferred)
    right = zeroshot_curves(metrics)
    paths = {"figure": out / "figure2.png", "report": out / "report.md", "curves": out / FIGURE}
    bands = {"left": layer_bands(params, metrics), "right": zeroshot_bands(params, metrics)}
    plot_figure2(left, right, paths["figure"], params.report.figure_dpi, params.model.n_layer,
                 bands, baseline_lines(params, metrics))
    plot_curves(params, metrics, paths["curves"])
    for name, rows in plot_tables(left, right, params.zeroshot.tasks).items():
        if name == "figure2_left":  # one file per task of params layers.tasks: the plot
            for task in params.layers.tasks:  # definition (a folder) follows the params
                paths[f"{name}_{task}"] = out / "plots" / name / f"{task}.csv"
                table = pd.DataFrame([{"layers": r["layers"], "dev": r.get(f"{task}_dev"),
                                       "train": r.get(f"{task}_train")} for r in rows])
                if "train" in table and table["train"].isna().all():  # unmeasured: no empty series
                    table = table.drop(columns="train")
                atomic.write_text(paths[f"{name}_{task}"], table.to_csv(index=False))
            continue
        paths[name] = out / "plots" / f"{name}.csv"
        atomic.write_text(paths[name], pd.DataFrame(rows).to_csv(index=False))
    found = evaluate_findings(params, metrics, left, right)
    text = build_report(params, metrics, params.digest(), paths["figure"].name, expected_hashes,
                        found)
    atomic.write_text(paths["report"], text)
    paths["findings"] = out / FINDINGS_FILE
    atomic.write_json(paths["findings"], findings_json(found, records, params.digest()))
    paths["headline"] = out / HEADLINE_FILE
    atomic.write_json(paths["headline"], headline(params, metrics))
    return paths


FINDINGS_FILE = "findings.json"
"""The findings (a)-(e) with their CIs as data, for `gpt1 verdicts` (gpt1.report.estimates)."""
