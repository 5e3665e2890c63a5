"""Metrics JSON -> reports/report.md (Tables 2-5 beside the paper's) and Figure 2 (spec §3).

Inputs are the metrics files of the pipeline, read by name from paths.metrics:
finetune_<task>.json (Tables 2-4, Table 5 `full` row), ablation_<variant>_<task>.json
(Table 5), layers_<task>_<k>.json (Figure 2 left), zeroshot.json / zeroshot_lstm.json
(Figure 2 right). The paper's numbers come from params (`report`), never from this module.
Values in the JSON are fractions; tables show them x 100 like the paper.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gpt1 import stats
from gpt1.config import Params
from gpt1.errors import Gpt1Error
from gpt1.evaluate import score_parts
from gpt1.tasks.registry import TASKS

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
    """Average components seed by seed, then mean and sample sd over seeds (no sd for one)."""
    if not vals:
        return Cell(None, None, 0, tuple(missing))
    summary = stats.seed_summary(_seed_mean(vals))  # sd only with >= 2 seeds
    return Cell(summary.mean, summary.sd, summary.n, tuple(missing))


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


# ---- per-example predictions and bootstrap CIs -------------------------------------


@dataclass(frozen=True)
class Preds:
    """One seed's predictions on one eval split (rows in file order)."""

    ids: np.ndarray
    label: np.ndarray
    prediction: np.ndarray
    group: np.ndarray


RowPreds = dict[str, list[Preds]]
"""task -> per-seed predictions of one table row (one variant)."""


def read_predictions(m: Mapping[str, Any], split: str) -> list[Preds] | None:
    """The per-seed prediction files a metrics JSON names (`predictions[split]`); None when
    it names none or one is missing (an older run): its cells then get no CI."""
    import pandas as pd

    paths = m.get("predictions", {}).get(split)
    if not paths or not all(Path(p).is_file() for p in paths):
        return None
    out = []
    for path in paths:
        try:
            df = pd.read_parquet(path)
        except Exception as err:  # pyarrow raises several types on a damaged file
            raise Gpt1Error(f"unreadable parquet ({str(err).splitlines()[0]})", path) from None
        out.append(Preds(df["id"].to_numpy(), df["label"].to_numpy(),
                         df["prediction"].to_numpy(), df["group"].to_numpy()))
    return out


def row_predictions(results: Mapping[str, dict[str, Any]], split: str = "test") -> RowPreds:
    """task -> per-seed predictions for every task of a row whose files are readable."""
    return {task: p for task, m in results.items()
            if (p := read_predictions(m, split)) is not None}


def _score_on(p: Preds, component: str, idx: np.ndarray) -> float:
    """`task.score` of one seed's predictions restricted to the example indices idx."""
    task, _, name = component.partition(".")
    metric, group = score_parts(TASKS[task], name)
    y, pred = p.label[idx], p.prediction[idx]
    if group is not None:
        keep = p.group[idx] == group
        y, pred = y[keep], pred[keep]
    return stats.metric(metric, y, pred)


def _row_value(row: RowPreds, cols: Sequence[Sequence[str]], idx: Mapping[str, np.ndarray]
               ) -> float:
    """Mean over seeds of the mean over columns, each column the mean of its components."""
    n_seeds = min(len(row[c.split(".")[0]]) for comps in cols for c in comps)
    return float(np.mean([
        np.mean([np.mean([_score_on(row[c.split(".")[0]][s], c, idx[c.split(".")[0]])
                          for c in comps]) for comps in cols])
        for s in range(n_seeds)]))


def contrast(rows: Sequence[RowPreds], weights: Sequence[float],
             cols: Sequence[Sequence[str]], params: Params) -> stats.Interval | None:
    """95 % bootstrap CI of sum(w * row value) over the columns `cols`: every task's eval
    examples resampled once per draw and shared by all rows and seeds (a paired difference
    for weights +1, -1). None when a row lacks predictions for a task or two rows were
    scored on different examples."""
    tasks = sorted({c.split(".")[0] for comps in cols for c in comps})
    if not tasks or any(t not in r for r in rows for t in tasks):
        return None
    for t in tasks:
        ref = rows[0][t][0].ids
        if any(len(p.ids) != len(ref) or (p.ids != ref).any() for r in rows for p in r[t]):
            return None

    def fn(idx: Sequence[np.ndarray]) -> float:
        by_task = dict(zip(tasks, idx, strict=True))
        return sum(w * _row_value(r, cols, by_task) for r, w in zip(rows, weights, strict=True))

    cfg = params.report
    return stats.joint_bootstrap(fn, [len(rows[0][t][0].ids) for t in tasks],
                                 cfg.bootstrap_samples, cfg.bootstrap_seed)


def _ci_text(ci: stats.Interval | None) -> str:
    return "n/a" if ci is None else f"[{100 * ci.low:.1f}, {100 * ci.high:.1f}]"


def baseline_text(results: Mapping[str, dict[str, Any]], components: Sequence[str],
                  kind: str) -> str:
    """Mean over a column's components of their `chance` or `majority` baseline (x 100)."""
    vals = []
    for comp in components:
        task, _, score = comp.partition(".")
        entry = results.get(task, {}).get("baselines", {}).get(score)
        if entry is None:
            return "n/a"
        vals.append(entry[kind])
    return f"{100 * float(np.mean(vals)):.1f}" if vals else "n/a"


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


def _scored_on(results: Mapping[str, dict[str, Any]], tasks: Sequence[str]) -> str:
    """The split each task of a table is scored on (the `test = ...` part of eval_split)."""
    parts = [f"{task}: {results[task]['eval_split'].split(';')[0].removeprefix('test = ')}"
             for task in dict.fromkeys(tasks) if task in results and "eval_split" in results[task]]
    return "Scored on: " + ("; ".join(parts) if parts else "no task run") + "."


def render_table(name: str, params: Params, results: Mapping[str, dict[str, Any]]) -> str:
    """One of Tables 2-4: paper, ours (mean ± sd over seeds), the 95 % bootstrap CI over eval
    examples, chance and majority-class baselines, delta, seeds and sizes per column; the split
    each task is scored on under the title."""
    cfg = params.report
    preds = row_predictions(results)
    all_tasks = [c.split(".")[0] for label in cfg.paper[name] for c in cfg.columns[label]
                 if c != "glue"]
    lines = [f"### {TABLE_TITLES[name]}", "", _scored_on(results, all_tasks), "",
             "| dataset | paper | ours (mean ± sd) | 95 % CI | chance | majority | Δ | seeds "
             "| n_train | n_eval |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    notes: list[str] = []
    for label, paper in cfg.paper[name].items():
        comps = cfg.columns[label]
        cell = column_cell(results, comps, cfg.glue)
        notes += cell.missing
        tasks = list(cfg.glue) if list(comps) == ["glue"] else [c.split(".")[0] for c in comps]
        res = results.get(tasks[0]) if len(set(tasks)) == 1 else None
        n_train = str(res.get("n_train", "")) if res else ""
        n_eval = str(res.get("n_eval", "")) if res else ""
        have = _present(results, comps)
        ci = contrast([preds], [1.0], [have], params) if have else None
        lines.append(f"| {label} | {paper:.1f} | {cell.text()} | {_ci_text(ci)} | "
                     f"{baseline_text(results, have, 'chance') if have else 'n/a'} | "
                     f"{baseline_text(results, have, 'majority') if have else 'n/a'} | "
                     f"{cell.delta(paper)} | {cell.seeds or ''} | {n_train} | {n_eval} |")
    return "\n".join(lines + [""] + _footnotes(notes))


def table5_columns(params: Params) -> list[str]:
    """Table 5's score columns (the paper's, without Avg)."""
    return [c for c in next(iter(params.report.paper_ablations.values())) if c != "Avg"]


def matched_columns(params: Params, metrics: Metrics) -> list[str]:
    """The Table 5 columns every row that ran has a value for: each row's Avg is over exactly
    these, so no row is averaged against a different set of tasks (a row not run at all, e.g.
    a preset without it, shows no Avg and does not shrink the others' set)."""
    cfg = params.report
    ran = [r for v in cfg.paper_ablations if (r := variant_results(metrics, v))]
    return [c for c in table5_columns(params)
            if ran and all(column_values(r, cfg.columns[c], cfg.glue)[0] for r in ran)]


def render_ablations(params: Params, metrics: Metrics) -> str:
    """Table 5: per variant the paper's row, ours (mean ± sd over seeds), the 95 % bootstrap CI
    and the delta; then chance and majority rows. Avg = the mean over the matched columns
    (those every row has), for every row, the paper's included."""
    cfg = params.report
    cols = table5_columns(params)
    matched = matched_columns(params, metrics)
    full = variant_results(metrics, "full")
    tasks = [c.split(".")[0] for col in cols for c in cfg.columns[col]]
    avg_note = (f"Avg = unweighted mean over the columns every row has ({', '.join(matched)}), "
                "the paper's row recomputed over the same columns"
                + ("" if matched != cols else " (= the paper's Avg up to rounding)") + "."
                if matched else "Avg: n/a, no column is present in every row.")
    lines = ["### Table 5: ablations", "", _scored_on(full, tasks), "", avg_note, "",
             "| method | | Avg | " + " | ".join(cols) + " |",
             "|---|---|" + "---:|" * (len(cols) + 1)]
    notes: list[str] = []
    for variant, paper in cfg.paper_ablations.items():
        results = variant_results(metrics, variant)
        preds = row_predictions(results)
        cells, cis, row_vals = {}, {}, []
        for c in cols:
            vals, missing = column_values(results, cfg.columns[c], cfg.glue)
            cells[c] = _summary(vals, missing)
            notes += [f"{cfg.row_labels[variant]}: {m}" for m in missing]
            have = [_present(results, cfg.columns[c])]
            cis[c] = contrast([preds], [1.0], have, params) if have[0] else None
            if c in matched and vals:
                row_vals.append(_seed_mean(vals))
        cells["Avg"] = _summary(row_vals if len(row_vals) == len(matched) else [], [])
        cis["Avg"] = contrast([preds], [1.0], _matched_components(params, matched, results),
                              params) if matched else None
        paper_row = {**paper, "Avg": float(np.mean([paper[c] for c in matched]))
                     if matched else None}
        order = ["Avg", *cols]
        lines.append(f"| {cfg.row_labels[variant]} | paper | " + " | ".join(
            "n/a" if paper_row[c] is None else f"{paper_row[c]:.1f}" for c in order) + " |")
        lines.append("| | ours | " + " | ".join(cells[c].text() for c in order) + " |")
        lines.append("| | 95 % CI | " + " | ".join(_ci_text(cis[c]) for c in order) + " |")
        lines.append("| | Δ | " + " | ".join(cells[c].delta(paper_row[c]) for c in order)
                     + " |")
    for kind in ("chance", "majority"):
        per_col = {c: baseline_text(full, cfg.columns[c], kind) if cfg.columns[c] != ("glue",)
                   else "n/a" for c in cols}
        nums = [float(per_col[c]) for c in matched if per_col[c] != "n/a"]
        avg = f"{np.mean(nums):.1f}" if matched and len(nums) == len(matched) else "n/a"
        lines.append(f"| {kind} baseline | | {avg} | "
                     + " | ".join(per_col[c] for c in cols) + " |")
    return "\n".join(lines + [""] + _footnotes(notes))


def _matched_components(params: Params, matched: Sequence[str],
                        results: Mapping[str, dict[str, Any]]) -> list[list[str]]:
    """Per matched column, the components of it that this row has (the ones it is scored on)."""
    return [_present(results, params.report.columns[c]) for c in matched]


def _present(results: Mapping[str, dict[str, Any]], components: Sequence[str]) -> list[str]:
    """The `task.score` components that the results hold (never the `glue` pseudo-column)."""
    return [c for c in components if c != "glue" and c.split(".")[0] in results
            and c.split(".")[1] in results[c.split(".")[0]]["scores"]]


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


Bands = dict[str, Any]
"""Error bands of Figure 2: "left" task -> [(k, low, high)] (fractions), "right" model -> task
-> [(step, low, high)] (normalised), each a 95 % bootstrap CI."""


def draw_figure2(left: Mapping[str, Mapping[str, Sequence[tuple[int, float]]]],
                 right: Mapping[str, Mapping[str, Sequence[tuple[int, float]]]],
                 n_layer: int, bands: Bands | None = None) -> Any:
    """Figure 2 as one matplotlib figure, two panels: layers transferred (left: dev solid,
    train dashed, one colour per task), zero-shot vs updates (right: log x, one colour per
    task, Transformer solid, LSTM dashed); shaded 95 % CI bands where `bands` has them."""
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
    bands = bands or {}
    for task, band in bands.get("left", {}).items():
        ks, lo, hi = zip(*band, strict=True)
        ax_l.fill_between(ks, [100 * v for v in lo], [100 * v for v in hi],
                          color=colors(list(left).index(task)), alpha=0.15, linewidth=0)
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
    for model, per_task in bands.get("right", {}).items():
        for task, band in per_task.items():
            if task in tasks:
                steps, lo, hi = zip(*band, strict=True)
                ax_r.fill_between(steps, lo, hi, color=colors(tasks.index(task)),
                                  alpha=0.12 if model == "transformer" else 0.06, linewidth=0)
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
                 path: str | Path, dpi: int, n_layer: int, bands: Bands | None = None) -> None:
    """Figure 2 as one PNG (written atomically)."""
    import matplotlib.pyplot as plt

    from gpt1 import atomic

    fig = draw_figure2(left, right, n_layer, bands)
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
    parts = [(f"as in the paper, the Transformer's zero-shot score trends upward with "
              f"pre-training (rho {rho:+.2f}; finding (d) tests the rise against its CI)"
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


# ---- findings (a)-(e): one verdict line each ---------------------------------------

LARGE_TRAIN = 100_000
"""Training examples from which a task counts as large for finding (b): the paper's aux-LM gain
is on QNLI, QQP and MNLI (105k-393k examples), its loss on CoLA, SST-2, MRPC, STS-B, RTE."""
SCRATCH_WORDING = ("\"we also compare with our transformer architecture directly trained on "
                   "supervised target tasks, without pre-training\" (paper §5, Ablation "
                   "studies); it does not say whether that row keeps the auxiliary LM objective")


def _points(ci: stats.Interval | None, per_seed: Sequence[float]) -> str:
    seeds = ", ".join(f"{100 * d:+.1f}" for d in per_seed)
    est = f"{100 * ci.estimate:+.1f}" if ci else f"{100 * float(np.mean(per_seed)):+.1f}"
    return f"{est} points (per seed: {seeds}), 95 % CI {_ci_text(ci)}"


def _row_pair(params: Params, metrics: Metrics, better: str, worse: str
              ) -> tuple[list[str], stats.Interval | None, list[float], list[str]]:
    """Columns both rows have, the paired-difference CI of their average (better - worse),
    the per-seed differences, and per-column `label diff [CI]` texts."""
    cfg = params.report
    res = {v: variant_results(metrics, v) for v in (better, worse)}
    preds = {v: row_predictions(r) for v, r in res.items()}
    cols = [c for c in table5_columns(params)
            if all(column_values(r, cfg.columns[c], cfg.glue)[0] for r in res.values())]
    comps = [_present(res[worse], _present(res[better], cfg.columns[c])) for c in cols]
    per_seed: list[float] = []
    if cols:
        rows = {v: _seed_mean([_seed_mean(column_values(r, cfg.columns[c], cfg.glue)[0])
                               for c in cols]) for v, r in res.items()}
        n = min(len(x) for x in rows.values())
        per_seed = [float(d) for d in rows[better][:n] - rows[worse][:n]]
    rows_p = [preds[better], preds[worse]]
    ci = contrast(rows_p, [1.0, -1.0], comps, params) if cols else None
    per_col = [f"{c} {100 * float(np.mean(per_seed_col(res, better, worse, c, params))):+.1f} "
               f"{_ci_text(contrast(rows_p, [1.0, -1.0], [k], params))}"
               for c, k in zip(cols, comps, strict=True)]
    return cols, ci, per_seed, per_col


def per_seed_col(res: Mapping[str, Mapping[str, dict[str, Any]]], better: str, worse: str,
                 col: str, params: Params) -> np.ndarray:
    """Per-seed difference (better - worse) of one column."""
    cfg = params.report
    a, b = (_seed_mean(column_values(res[v], cfg.columns[col], cfg.glue)[0])
            for v in (better, worse))
    n = min(len(a), len(b))
    return a[:n] - b[:n]


def _verdict_word(ci: stats.Interval | None) -> str:
    return "inconclusive (no per-example predictions to bootstrap)" if ci is None \
        else stats.verdict(ci)


def _finding_rows(params: Params, metrics: Metrics, tag: str, title: str, better: str,
                  worse: str) -> str:
    cols, ci, per_seed, per_col = _row_pair(params, metrics, better, worse)
    labels = params.report.row_labels
    if not cols:
        return f"- **({tag}) {title}: inconclusive** — no column has both rows."
    return (f"- **({tag}) {title}: {_verdict_word(ci)}.** {labels[better]} − {labels[worse]} "
            f"on the mean of {', '.join(cols)} = {_points(ci, per_seed)}; per column: "
            f"{'; '.join(per_col)}. Test: paired difference (same seeds, same eval examples), "
            "percentile bootstrap over eval examples resampled jointly for both rows and all "
            "seeds; held = CI above 0, not held = CI below 0, else inconclusive.")


def _finding_aux(params: Params, metrics: Metrics) -> str:
    cols, ci, per_seed, per_col = _row_pair(params, metrics, "full", "no_aux")
    if not cols:
        return "- **(b) auxiliary LM objective: inconclusive** — no column has both rows."
    n_train = max(int(m.get("n_train", 0)) for m in variant_results(metrics, "no_aux").values())
    regime = "large" if n_train >= LARGE_TRAIN else "small"
    # small regime: the paper's finding is "no gain", i.e. (without - with) > 0
    tested = ci if ci is None or regime == "large" else stats.Interval(-ci.estimate, -ci.high,
                                                                       -ci.low)
    held = _verdict_word(tested)
    return (f"- **(b) auxiliary LM objective (rows 1 vs 3): {held}.** Our regime is {regime} "
            f"(at most {n_train:,} training examples per task; the paper's aux-LM gain is on "
            f"tasks of >= {LARGE_TRAIN:,}, its loss on the smaller ones). With aux LM − without "
            f"on the mean of {', '.join(cols)} = {_points(ci, per_seed)}; per column: "
            f"{'; '.join(per_col)}. Test: paired bootstrap difference as in (a); in the small "
            "regime held = CI below 0 (no gain, as the paper's small datasets), not held = CI "
            "above 0, else inconclusive.")


def layer_predictions(metrics: Metrics, tasks: Sequence[str], k: int) -> RowPreds:
    """task -> per-seed dev predictions of the Figure 2-left run with k blocks transferred."""
    out: RowPreds = {}
    for task in tasks:
        m = metrics.get(f"layers_{task}_{k}")
        p = read_predictions(m, "dev") if m else None
        if p is not None:
            out[task] = p
    return out


def layer_bands(params: Params, metrics: Metrics) -> dict[str, list[tuple[int, float, float]]]:
    """task -> [(k, low, high)]: 95 % bootstrap CI of each Figure 2-left dev point (seed mean;
    dev examples resampled once per draw for all seeds)."""
    out: dict[str, list[tuple[int, float, float]]] = {}
    for task in params.layers.tasks:
        for k in params.layers.layers_transferred:
            row = layer_predictions(metrics, [task], k)
            ci = contrast([row], [1.0], [[f"{task}.{TASKS[task].metric}"]], params)
            if ci is not None:
                out.setdefault(task, []).append((k, ci.low, ci.high))
    return out


def _finding_layers(params: Params, metrics: Metrics,
                    left: Mapping[str, Mapping[str, Sequence[tuple[int, float]]]]) -> str:
    ks = sorted(params.layers.layers_transferred)
    tasks = [t for t in params.layers.tasks if len(left.get(t, {}).get("dev", [])) >= 2]
    if len(ks) < 2 or not tasks:
        return "- **(c) Figure 2 left: inconclusive** — fewer than two transfer points."
    cols = [[f"{t}.{TASKS[t].metric}"] for t in tasks]
    rows = [layer_predictions(metrics, tasks, ks[-1]), layer_predictions(metrics, tasks, ks[0])]
    ci = contrast(rows, [1.0, -1.0], cols, params)
    gains = {t: dict(left[t]["dev"]).get(ks[-1], np.nan) - dict(left[t]["dev"]).get(ks[0], np.nan)
             for t in tasks}
    ups = sum(b[1] > a[1] for t in tasks for a, b in zip(left[t]["dev"], left[t]["dev"][1:],
                                                           strict=False))
    steps = sum(len(left[t]["dev"]) - 1 for t in tasks)
    return (f"- **(c) transfer rises with blocks transferred (Figure 2 left): "
            f"{_verdict_word(ci)}.** Dev accuracy with {ks[-1]} − with {ks[0]} blocks, mean "
            f"over {', '.join(t.upper() for t in tasks)} and seeds = "
            f"{'n/a' if ci is None else f'{100 * ci.estimate:+.1f}'} points, 95 % CI "
            f"{_ci_text(ci)} (per task: "
            + ", ".join(f"{t.upper()} {100 * g:+.1f}" for t, g in gains.items())
            + f"); the curve rises in {ups} of {steps} steps. Test: paired bootstrap over dev "
            "examples (shared by both k and all seeds); held = CI above 0.")


ZsPreds = dict[str, dict[int, tuple[np.ndarray, np.ndarray]]]
"""task -> checkpoint step -> (labels, predictions) of the zero-shot heuristics."""


def zeroshot_predictions(m: Mapping[str, Any]) -> ZsPreds | None:
    """The per-example zero-shot predictions a zeroshot metrics JSON names; None if absent."""
    import pandas as pd

    path = m.get("predictions")
    if not path or not Path(path).is_file():
        return None
    try:
        df = pd.read_parquet(path).sort_values(["task", "step", "example"], kind="stable")
    except Exception as err:  # pyarrow raises several types on a damaged file
        raise Gpt1Error(f"unreadable parquet ({str(err).splitlines()[0]})", path) from None
    out: ZsPreds = {}
    for (task, step), g in df.groupby(["task", "step"], sort=True):
        out.setdefault(str(task), {})[int(step)] = (g["label"].to_numpy(),
                                                    g["prediction"].to_numpy())
    return out


def _zs_value(m: Mapping[str, Any], preds: ZsPreds, task: str, step: int,
              idx: np.ndarray) -> float:
    """Normalised zero-shot score of one task at one checkpoint on the examples idx."""
    norm = m["norm"][task]
    y, p = preds[task][step]
    raw = stats.metric(norm["metric"], y[idx], p[idx])
    return (raw - norm["random"]) / (norm["sota"] - norm["random"])


def zeroshot_bands(params: Params, metrics: Metrics
                   ) -> dict[str, dict[str, list[tuple[int, float, float]]]]:
    """model -> task -> [(step, low, high)]: 95 % bootstrap CI over the scored examples of
    each normalised zero-shot point (one pre-training run per model: no seed spread)."""
    cfg = params.report
    out: dict[str, dict[str, list[tuple[int, float, float]]]] = {}
    for stem, m in sorted(metrics.items()):
        preds = zeroshot_predictions(m) if stem.startswith("zeroshot") else None
        if preds is None:
            continue
        for task, by_step in preds.items():
            band = []
            for step in sorted(by_step):
                ci = stats.bootstrap_ci(functools.partial(_zs_value, m, preds, task, step),
                                        len(by_step[step][0]), cfg.bootstrap_samples,
                                        cfg.bootstrap_seed)
                band.append((step, ci.low, ci.high))
            out.setdefault(m["model"], {})[task] = band
    return out


def zeroshot_gain(params: Params, m: Mapping[str, Any]) -> stats.Interval | None:
    """Task-mean normalised score at the last minus the first checkpoint, with its paired
    bootstrap CI (each task's examples resampled once per draw for both checkpoints)."""
    preds = zeroshot_predictions(m)
    if not preds:
        return None
    tasks = sorted(preds)
    steps = sorted(set.intersection(*(set(preds[t]) for t in tasks)))
    if len(steps) < 2:
        return None

    def fn(idx: Sequence[np.ndarray]) -> float:
        return float(np.mean([_zs_value(m, preds, t, steps[-1], i)
                              - _zs_value(m, preds, t, steps[0], i)
                              for t, i in zip(tasks, idx, strict=True)]))

    cfg = params.report
    return stats.joint_bootstrap(fn, [len(preds[t][steps[0]][0]) for t in tasks],
                                 cfg.bootstrap_samples, cfg.bootstrap_seed)


def _finding_zeroshot(params: Params, metrics: Metrics,
                      right: Mapping[str, Mapping[str, Sequence[tuple[int, float]]]]) -> str:
    trend = {m: t for m, per_task in right.items() if (t := _trend(per_task)) is not None}
    if "transformer" not in trend:
        return "- **(d) zero-shot (Figure 2 right): inconclusive** — fewer than two checkpoints."
    rho, rough, net = trend["transformer"]
    gain = zeroshot_gain(params, metrics.get("zeroshot", {}))
    if gain is not None:  # the rise: held / not held / inconclusive by its CI, as (a)
        rise = "held" if gain.low > 0 else "not held" if gain.high < 0 else "inconclusive"
    else:
        rise = "held" if rho > 0 and net > rough else "not held"
    lstm = trend.get("lstm")
    rougher = lstm is not None and lstm[1] > rough
    word = rise if rougher else "not held"
    lstm_text = ("no LSTM curve" if lstm is None else
                 f"LSTM sd of step-to-step change {lstm[1]:.3f} vs Transformer {rough:.3f}")
    ci = ("" if gain is None else f", 95 % CI [{gain.low:+.3f}, {gain.high:+.3f}] (bootstrap "
          "over the scored examples, paired across the two checkpoints)")
    rule = ("rises = the CI of the net change is above 0" if gain is not None else
            "rises = rho > 0 and net change > step-to-step sd (no per-example predictions)")
    return (f"- **(d) zero-shot rises with pre-training, LSTM more variable (Figure 2 right): "
            f"{word}.** Transformer task-mean normalised score: net change {net:+.3f} from "
            f"the first to the last checkpoint{ci}, Spearman rho with updates {rho:+.2f}, sd "
            f"of step-to-step change {rough:.3f}; {lstm_text}. Test: {rule}; more variable = "
            "larger sd of step-to-step change; held needs both. One pre-training run per "
            "model: the spread is over examples, not pre-training seeds; a rise whose CI "
            "spans 0 is inconclusive.")


def render_findings(params: Params, metrics: Metrics,
                    left: Mapping[str, Mapping[str, Sequence[tuple[int, float]]]],
                    right: Mapping[str, Mapping[str, Sequence[tuple[int, float]]]]) -> list[str]:
    """## Findings: a verdict line per finding (a)-(e) of the paper, with its statistic."""
    lam = params.ablations.presets["scratch"].lm_coef if "scratch" in \
        params.ablations.presets else None
    lam_text = params.finetune.lm_coef if lam is None else lam
    return ["## Findings (a)–(e)", "",
            _finding_rows(params, metrics, "a", "pre-training helps (rows 1 vs 2)", "full",
                          "scratch"),
            _finding_aux(params, metrics),
            _finding_layers(params, metrics, left),
            _finding_zeroshot(params, metrics, right),
            _finding_rows(params, metrics, "e", "Transformer beats the LSTM (rows 1 vs 4)",
                          "full", "lstm"),
            "",
            f"The from-scratch row's auxiliary LM weight is λ = {lam_text}, our choice ("
            + ("as row 1: only the initialisation differs" if lam_text == params.finetune.lm_coef
               else f"row 1 has λ = {params.finetune.lm_coef}")
            + f"). The paper: {SCRATCH_WORDING}.",
            ""]


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
    stage's process start to its record; gpt1.stages.write_metrics), in pipeline order, and
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


def split_kind(source: str) -> str:
    """A task's reported split, in words: official test, official dev, or carved out."""
    text = source.lower()
    if "carved" in text or "held-out" in text:
        return "carved"
    return "official test" if re.search(r"official[^;]*\btest\b", text) else "official dev"


def gpt_parameters(params: Params, vocab_size: int) -> int:
    """Parameters of the Transformer: embeddings (tied output) + per block attention, MLP and
    two LayerNorms (+ a final LayerNorm for the gpt2 arch)."""
    m = params.model
    c, inner = m.n_embd, m.n_inner
    block = (3 * c * c + 3 * c) + (c * c + c) + (2 * c * inner + inner + c) + 4 * c
    return (vocab_size + m.n_positions) * c + m.n_layer * block + (2 * c if m.arch == "gpt2"
                                                                   else 0)


def banner(params: Params, metrics: Metrics) -> list[str]:
    """Preset, model size, pre-training tokens and validation perplexity, data substitutions."""
    m, pre = params.model, metrics.get("pretrain", {})
    vocab = metrics.get("train_bpe", {}).get("vocab_size")
    size = (f"{m.n_layer} layers x {m.n_embd} wide, {m.n_head} heads, context {m.n_positions}"
            + (f", {gpt_parameters(params, int(vocab)) / 1e6:.1f} M parameters" if vocab else ""))
    tokens = f"{pre['tokens']:,}" if "tokens" in pre else "n/a"
    ppl = f"{pre['val_ppl']:.1f}" if "val_ppl" in pre else "n/a"
    ft = params.finetune
    full = variant_results(metrics, "full")
    kinds: dict[str, list[str]] = {}
    for task in full:
        kinds.setdefault(split_kind(TASKS[task].sources["test"]), []).append(task)
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
        paths[name] = out / "plots" / f"{name}.csv"
        atomic.write_text(paths[name], pd.DataFrame(rows).to_csv(index=False))
    text = build_report(params, metrics, params.digest(), paths["figure"].name, expected_hashes)
    atomic.write_text(paths["report"], text)
    return paths
