"""Metrics JSON -> reports/report.md (Tables 2-5 beside the paper's) and Figure 2 (spec §3).

Inputs are the metrics files of the pipeline, read by name from paths.metrics:
finetune_<task>.json (Tables 2-4, Table 5 `full` row), ablation_<variant>_<task>.json
(Table 5), layers_<task>_<k>.json (Figure 2 left), zeroshot.json / zeroshot_lstm.json
(Figure 2 right). The paper's numbers come from params (`report`), never from this module.
Values in the JSON are fractions; tables show them x 100 like the paper.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gpt1.config import Params
from gpt1.errors import Gpt1Error

log = logging.getLogger(__name__)

Metrics = dict[str, dict[str, Any]]
"""Metrics file stem (e.g. finetune_cola) -> its JSON."""
TABLE_TITLES = {
    "table2": "Table 2: natural language inference (accuracy)",
    "table3": "Table 3: question answering and commonsense reasoning (accuracy)",
    "table4": "Table 4: semantic similarity and classification (MCC, acc, F1, Pearson)",
}
MODEL_LABELS = {"transformer": "Transformer", "lstm": "LSTM"}


INFO_SUFFIX = ".info.json"
"""A stage's sidecar beside its metrics file (gpt1.stages.write_metrics): what is not a score."""


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise Gpt1Error(f"not valid JSON ({err})", path) from None


def read_metrics(metrics_dir: str | Path) -> Metrics:
    """Every stage record under metrics_dir by stem: `<stem>.json` (the scores) merged with its
    sidecar `<stem>.info.json` (splits, counts, throughput, config_hash) when there is one;
    a damaged file is a Gpt1Error naming it."""
    out: Metrics = {}
    for path in sorted(Path(metrics_dir).glob("*.json")):
        if path.name.endswith(INFO_SUFFIX):
            continue
        data = _read_json(path)
        info = path.with_name(path.stem + INFO_SUFFIX)
        if isinstance(data, dict):
            out[path.stem] = {**(_read_json(info) if info.is_file() else {}), **data}
    return out


def variant_results(metrics: Metrics, variant: str) -> dict[str, dict[str, Any]]:
    """task -> fine-tuning metrics JSON of one variant (`full` = the finetune stage; Table 5
    rows = finetune_<variant>_<task>.json), by the JSON's own task / variant fields."""
    return {m["task"]: m for stem, m in sorted(metrics.items())
            if stem.startswith("finetune_") and m.get("variant") == variant and "scores" in m}


@dataclass(frozen=True)
class Cell:
    """One of our numbers: mean and sd over seeds (fractions), or why it is missing."""

    mean: float | None
    sd: float | None
    seeds: int
    missing: tuple[str, ...]
    """Components (task.score) that could not be found, with the reason."""

    def text(self) -> str:
        if self.mean is None:
            return "n/a"
        sd = "" if self.sd is None else f" ± {100 * self.sd:.1f}"
        return f"{100 * self.mean:.1f}{sd}{'*' if self.missing else ''}"

    def delta(self, paper: float | None) -> str:
        if self.mean is None or paper is None:
            return "n/a"
        return f"{100 * self.mean - paper:+.1f}"


def _seed_mean(vals: Sequence[np.ndarray]) -> np.ndarray:
    """Seed-wise mean of several per-seed vectors (cut to the shortest)."""
    n = min(len(v) for v in vals)
    return np.mean([v[:n] for v in vals], axis=0)


def _summary(vals: Sequence[np.ndarray], missing: Sequence[str]) -> Cell:
    """Average components seed by seed, then mean and sample sd over seeds."""
    if not vals:
        return Cell(None, None, 0, tuple(missing))
    per_seed = _seed_mean(vals)
    sd = float(np.std(per_seed, ddof=1)) if len(per_seed) > 1 else 0.0
    return Cell(float(np.mean(per_seed)), sd, len(per_seed), tuple(missing))


def _component(results: Mapping[str, dict[str, Any]], task: str, score: str
               ) -> tuple[np.ndarray | None, str]:
    """Per-seed values of task.score, or None with the reason it is missing."""
    res = results.get(task)
    if res is None:
        return None, f"{task}.{score}: not run"
    entry = res["scores"].get(score)
    if entry is None:
        reason = res.get("missing_scores", {}).get(score, "not in the metrics file")
        return None, f"{task}.{score}: {reason}"
    per_seed = entry.get("per_seed") or [entry["mean"]]
    return np.asarray(per_seed, dtype=float), ""


def column_values(results: Mapping[str, dict[str, Any]], components: Sequence[str],
                  glue: Mapping[str, Sequence[str]]) -> tuple[list[np.ndarray], list[str]]:
    """Per-seed vectors of a column's `task.score` components and the missing ones;
    `glue` = one vector per GLUE task (the seed-wise mean of its scores)."""
    if list(components) == ["glue"]:
        per_task, missing = [], []
        for task, scores in glue.items():
            vals, miss = column_values(results, [f"{task}.{s}" for s in scores], {})
            missing += miss
            if vals:
                per_task.append(_seed_mean(vals))
        return per_task, missing
    got, missing = [], []
    for comp in components:
        task, _, score = comp.partition(".")
        v, why = _component(results, task, score)
        if v is None:
            missing.append(why)
        else:
            got.append(v)
    return got, missing


def column_cell(results: Mapping[str, dict[str, Any]], components: Sequence[str],
                glue: Mapping[str, Sequence[str]]) -> Cell:
    """Our value of one paper column: the seed-wise mean of its components."""
    return _summary(*column_values(results, components, glue))


def _footnotes(notes: list[str]) -> list[str]:
    """Unique notes; the `not run` ones of one row collapse into a single line."""
    not_run: dict[str, list[str]] = {}
    other = []
    for note in dict.fromkeys(notes):
        if note.endswith(": not run"):
            row, _, comp = note.removesuffix(": not run").rpartition(": ")
            not_run.setdefault(row, []).append(comp.split(".")[0])
        else:
            other.append(note)
    lines = [f"- * {row + ': ' if row else ''}not run for "
             f"{', '.join(dict.fromkeys(tasks))}" for row, tasks in not_run.items()]
    return lines + [f"- * {n}" for n in other]


def render_table(name: str, params: Params, results: Mapping[str, dict[str, Any]]) -> str:
    """One of Tables 2-4: paper, ours (mean ± sd), delta, seeds and sizes per column."""
    cfg = params.report
    lines = [f"### {TABLE_TITLES[name]}", "",
             "| dataset | paper | ours (mean ± sd) | Δ | seeds | n_train | n_eval |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    notes: list[str] = []
    for label, paper in cfg.paper[name].items():
        comps = cfg.columns[label]
        cell = column_cell(results, comps, cfg.glue)
        notes += cell.missing
        tasks = list(cfg.glue) if list(comps) == ["glue"] else [c.split(".")[0] for c in comps]
        res = results.get(tasks[0]) if len(set(tasks)) == 1 else None
        n_train = str(res.get("n_train", "")) if res else ""
        n_eval = str(res.get("n_eval", "")) if res else ""
        lines.append(f"| {label} | {paper:.1f} | {cell.text()} | {cell.delta(paper)} | "
                     f"{cell.seeds or ''} | {n_train} | {n_eval} |")
    return "\n".join(lines + [""] + _footnotes(notes))


def render_ablations(params: Params, metrics: Metrics) -> str:
    """Table 5: per variant the paper's row, ours and the delta; Avg = mean of the row
    (seed-wise, over the columns we have; `*` when some are missing)."""
    cfg = params.report
    cols = [c for c in next(iter(cfg.paper_ablations.values())) if c != "Avg"]
    lines = ["### Table 5: ablations", "",
             "| method | | Avg | " + " | ".join(cols) + " |",
             "|---|---|" + "---:|" * (len(cols) + 1)]
    notes: list[str] = []
    for variant, paper in cfg.paper_ablations.items():
        results = variant_results(metrics, variant)
        cells, row_vals, row_missing = {}, [], []
        for c in cols:
            vals, missing = column_values(results, cfg.columns[c], cfg.glue)
            cells[c] = _summary(vals, missing)
            notes += [f"{cfg.row_labels[variant]}: {m}" for m in missing]
            if vals:
                row_vals.append(_seed_mean(vals))
            else:
                row_missing.append(c)
        cells["Avg"] = _summary(row_vals, [f"without {', '.join(row_missing)}"]
                                if row_missing else [])
        order = ["Avg", *cols]
        lines.append(f"| {cfg.row_labels[variant]} | paper | "
                     + " | ".join(f"{paper[c]:.1f}" for c in order) + " |")
        lines.append("| | ours | " + " | ".join(cells[c].text() for c in order) + " |")
        lines.append("| | Δ | " + " | ".join(cells[c].delta(paper[c]) for c in order) + " |")
    return "\n".join(lines + [""] + _footnotes(notes))


# ---- Figure 2 data -------------------------------------------------------------------


def layer_curves(metrics: Metrics, tasks: Sequence[str], ks: Sequence[int]
                 ) -> dict[str, dict[str, list[tuple[int, float]]]]:
    """task -> {"dev": [(k, acc)], "train": [(k, acc)]} from layers_<task>_<k>.json."""
    out: dict[str, dict[str, list[tuple[int, float]]]] = {}
    for task in tasks:
        curves: dict[str, list[tuple[int, float]]] = {"dev": [], "train": []}
        for k in ks:
            m = metrics.get(f"layers_{task}_{k}")
            if m is None:
                continue
            for split in curves:
                entry = m["scores"].get(f"{split}_acc")
                if entry is not None:
                    curves[split].append((k, float(entry["mean"])))
        out[task] = curves
    return out


def zeroshot_curves(metrics: Metrics) -> dict[str, dict[str, list[tuple[int, float]]]]:
    """model -> task -> [(step, normalised score)] from zeroshot*.json."""
    out: dict[str, dict[str, list[tuple[int, float]]]] = {}
    for stem, m in sorted(metrics.items()):
        if not stem.startswith("zeroshot") or "checkpoints" not in m:
            continue
        per_task: dict[str, list[tuple[int, float]]] = {}
        for ckpt in sorted(m["checkpoints"], key=lambda c: c["step"]):
            for task, value in ckpt["normalised"].items():
                per_task.setdefault(task, []).append((int(ckpt["step"]), float(value)))
        out[m["model"]] = per_task
    return out


def draw_figure2(left: Mapping[str, Mapping[str, Sequence[tuple[int, float]]]],
                 right: Mapping[str, Mapping[str, Sequence[tuple[int, float]]]],
                 n_layer: int) -> Any:
    """Figure 2 as one matplotlib figure, two panels: layers transferred (left: dev solid,
    train dashed, one colour per task), zero-shot vs updates (right: log x, one colour per
    task, Transformer solid, LSTM dashed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    fig, (ax_l, ax_r) = plt.subplots(1, 2, figsize=(12, 4.6))
    colors = plt.get_cmap("tab10")
    for i, (task, curves) in enumerate(left.items()):
        for split, style in (("dev", "-"), ("train", "--")):
            pts = curves.get(split, [])
            if pts:
                ks, acc = zip(*pts, strict=True)
                ax_l.plot(ks, [100 * a for a in acc], style, marker="o", color=colors(i),
                          label=f"{task.upper()} {split}")
    ax_l.set_xlabel("# of layers transferred")
    ax_l.set_ylabel("accuracy (%)")
    ax_l.set_xlim(-0.3, n_layer + 0.3)
    ax_l.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    ax_l.set_title("Transfer: layers of the pre-trained model copied")
    ax_l.grid(alpha=0.3)
    tasks = sorted({t for per_task in right.values() for t in per_task})
    for model, per_task in right.items():
        style = "-" if model == "transformer" else "--"
        for task, pts in per_task.items():
            steps, vals = zip(*pts, strict=True)
            ax_r.plot(steps, vals, style, marker=".", color=colors(tasks.index(task)),
                      label=f"{task.upper()} ({MODEL_LABELS.get(model, model)})")
    ax_r.set_xscale("log")
    ax_r.axhline(0.0, color="grey", lw=0.8)
    ax_r.set_xlabel("pre-training updates (log scale)")
    ax_r.set_ylabel("normalised zero-shot performance")
    ax_r.set_title("Zero-shot: Transformer (solid) vs LSTM (dashed)")
    ax_r.grid(alpha=0.3)
    for ax in (ax_l, ax_r):
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7, loc="best", ncol=1 if ax is ax_l else 2, handlelength=4)
        else:
            ax.text(0.5, 0.5, "no data at this preset", ha="center", transform=ax.transAxes)
    fig.tight_layout()
    return fig


def plot_figure2(left: Mapping[str, Mapping[str, Sequence[tuple[int, float]]]],
                 right: Mapping[str, Mapping[str, Sequence[tuple[int, float]]]],
                 path: str | Path, dpi: int, n_layer: int) -> None:
    """Figure 2 as one PNG (written atomically)."""
    import matplotlib.pyplot as plt

    from gpt1 import atomic

    fig = draw_figure2(left, right, n_layer)
    with atomic.atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=dpi)
    plt.close(fig)


def plot_tables(left: Mapping[str, Mapping[str, Sequence[tuple[int, float]]]],
                right: Mapping[str, Mapping[str, Sequence[tuple[int, float]]]],
                zeroshot_tasks: Sequence[str]) -> dict[str, list[dict[str, Any]]]:
    """Rows for the `dvc plots` files: figure2_left (one row per k; <task>_dev, <task>_train
    in %) and zeroshot_<model> for both models (one row per checkpoint; one column per task).
    Every file and column exists even without data, so the plot definitions always resolve."""
    ks = sorted({k for c in left.values() for pts in c.values() for k, _ in pts})
    cols = [f"{task}_{split}" for task in left for split in ("dev", "train")]
    rows_left = []
    for k in ks:
        row: dict[str, Any] = {"layers": k, **dict.fromkeys(cols)}
        for task, curves in left.items():
            for split, pts in curves.items():
                row.update({f"{task}_{split}": round(100 * a, 4) for kk, a in pts if kk == k})
        rows_left.append(row)
    out = {"figure2_left": rows_left or [{"layers": None, **dict.fromkeys(cols)}]}
    for model in MODEL_LABELS:
        per_task = right.get(model, {})
        steps = sorted({s for pts in per_task.values() for s, _ in pts})
        rows = [{"step": s, "log10_step": round(math.log10(s), 4) if s > 0 else 0.0,
                 **dict.fromkeys(zeroshot_tasks),
                 **{t: round(v, 4) for t, pts in per_task.items() for ss, v in pts if ss == s}}
                for s in steps]
        out[f"zeroshot_{model}"] = rows or [{"step": None, "log10_step": None,
                                             **dict.fromkeys(zeroshot_tasks)}]
    return out


# ---- words -------------------------------------------------------------------------


def describe_left(left: Mapping[str, Mapping[str, Sequence[tuple[int, float]]]]) -> str:
    """What our layer-transfer curves show, in one sentence per task."""
    parts = []
    for task, curves in left.items():
        pts = curves.get("dev", [])
        if len(pts) < 2:
            parts.append(f"{task.upper()}: fewer than two points, no trend to report.")
            continue
        (k0, a0), (k1, a1) = pts[0], pts[-1]
        ups = sum(b[1] > a[1] for a, b in zip(pts, pts[1:], strict=False))
        parts.append(
            f"{task.upper()} dev accuracy goes from {100 * a0:.1f} with {k0} blocks to "
            f"{100 * a1:.1f} with {k1} ({100 * (a1 - a0):+.1f} points; it rises in {ups} of "
            f"{len(pts) - 1} steps).")
    return " ".join(parts) if parts else "No layer-transfer results at this preset."


def compare_left(left: Mapping[str, Mapping[str, Sequence[tuple[int, float]]]]) -> str:
    """Do our curves go the paper's way (more transferred blocks, higher dev accuracy)?"""
    agree: list[str] = []
    disagree: list[str] = []
    for task, curves in left.items():
        pts = curves.get("dev", [])
        if len(pts) >= 2:
            (agree if pts[-1][1] > pts[0][1] else disagree).append(task.upper())
    if not agree and not disagree:
        return "No comparison with the paper possible."
    parts = []
    if agree:
        parts.append(f"as in the paper, transfer helps on {', '.join(agree)}")
    if disagree:
        parts.append(f"unlike the paper, it does not help on {', '.join(disagree)}")
    return "Compared with the paper: " + "; ".join(parts) + "."


def compare_right(right: Mapping[str, Mapping[str, Sequence[tuple[int, float]]]]) -> str:
    """Does the Transformer rise with updates (rho > 0 and a net gain larger than its typical
    step-to-step change, so a flat, noisy curve is not called rising) and is the LSTM the
    rougher curve?"""
    stats_ = {m: t for m, per_task in right.items() if (t := _trend(per_task)) is not None}
    if "transformer" not in stats_:
        return "No comparison with the paper possible."
    rho, rough, net = stats_["transformer"]
    rises = rho > 0 and net > rough
    parts = [("as in the paper, the Transformer's zero-shot score rises with pre-training"
              if rises else "unlike the paper, the Transformer's zero-shot score does not "
              "rise with pre-training")]
    if "lstm" in stats_:
        lstm_rough = stats_["lstm"][1]
        parts.append("the LSTM's curve is the more variable one, as in the paper"
                     if lstm_rough > rough else
                     "the LSTM's curve is not more variable than the Transformer's")
    return "Compared with the paper: " + "; ".join(parts) + "."


def _trend(
    per_task: Mapping[str, Sequence[tuple[int, float]]],
) -> tuple[float, float, float] | None:
    """(Spearman rho of the task-mean against the step, sd of its step-to-step change, last
    minus first task-mean)."""
    from scipy import stats

    steps = sorted({s for pts in per_task.values() for s, _ in pts})
    if len(steps) < 2:
        return None
    mean = [float(np.mean([v for pts in per_task.values() for s, v in pts if s == st]))
            for st in steps]
    rho = float(stats.spearmanr(steps, mean)[0]) if np.ptp(mean) > 0 else 0.0
    return rho, float(np.std(np.diff(mean))), mean[-1] - mean[0]


def describe_right(right: Mapping[str, Mapping[str, Sequence[tuple[int, float]]]]) -> str:
    """Trend (Spearman rho of the task-mean against the step) and roughness per model."""
    parts = []
    for model, per_task in right.items():
        name = MODEL_LABELS.get(model, model)
        trend = _trend(per_task)
        if trend is None:
            parts.append(f"{name}: fewer than two checkpoints.")
            continue
        steps = sorted({s for pts in per_task.values() for s, _ in pts})
        mean = [float(np.mean([v for pts in per_task.values() for s, v in pts if s == st]))
                for st in (steps[0], steps[-1])]
        parts.append(
            f"{name}: mean normalised score {mean[0]:.2f} at step {steps[0]} -> {mean[1]:.2f} "
            f"at step {steps[-1]} (Spearman rho with updates {trend[0]:+.2f}; sd of "
            f"step-to-step change {trend[1]:.2f}).")
    return " ".join(parts) if parts else "No zero-shot results at this preset."


# ---- the report --------------------------------------------------------------------


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
        text = m.get("eval_split", "")
        which = [split for split in ("test", "dev") if f"{split} = carved" in text]
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
        f"Config hash `{config_hash}` (sha256 of the params, first 12 hex digits).", "",
        "**Ours are dev-set numbers; the paper's GLUE numbers are test-server results.** "
        "Each task is scored on the split named under *Evaluation splits* (an official dev "
        "or test set where the mirror has one, else a seeded carve-out), after model "
        "selection on a separate dev split. Numbers are x 100; ours are mean ± sample sd "
        f"over seeds (seeds per task: {', '.join(map(str, seeds)) or 'none'}); "
        "Δ = ours - paper. `*` = some of the column's scores are missing (footnotes).", "",
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
    out += ["## Figure 2", "", f"![Figure 2]({figure_name})", "",
            f"Left, layers transferred ({', '.join(params.layers.tasks)}; k in "
            f"{list(params.layers.layers_transferred)}; solid = dev, dashed = train "
            "accuracy). " + describe_left(left) + f" Paper: {cfg.paper_figure2['left']}. "
            + compare_left(left), "",
            "Right, zero-shot (0 = random guess, 1 = state of the art; Transformer solid, "
            "LSTM dashed). " + describe_right(right)
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
    plot_figure2(left, right, paths["figure"], params.report.figure_dpi, params.model.n_layer)
    for name, rows in plot_tables(left, right, params.zeroshot.tasks).items():
        paths[name] = out / "plots" / f"{name}.csv"
        atomic.write_text(paths[name], pd.DataFrame(rows).to_csv(index=False))
    text = build_report(params, metrics, params.digest(), paths["figure"].name, expected_hashes)
    atomic.write_text(paths["report"], text)
    return paths
