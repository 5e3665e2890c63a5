"""Figure 2: layer-transfer and zero-shot curves from the records, their bootstrap bands,
the matplotlib figure and the rows of the `dvc plots` CSVs."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from gpt1 import names
from gpt1.config import Params
from gpt1.errors import Gpt1Error
from gpt1.records import Metrics
from gpt1.report.contrasts import Preds, RowPreds, Term, contrast, read_predictions, run_contrast
from gpt1.report.runs import layer_results
from gpt1.tasks.registry import TASKS

MODEL_LABELS = {names.TRANSFORMER: "Transformer", names.LSTM: "LSTM"}
"""Network body (gpt1.names) -> its label in the figure and the report."""


def scored_key(m: Mapping[str, Any]) -> str:
    """The score a Figure 2-left record reports: `dev_acc` in older records (scored on the
    split that chose the epoch), else the task's main score, as every fine-tuning record
    scores it on the test split (disjoint from its training and selection data)."""
    scores = m.get("scores", {})
    if "dev_acc" in scores or m.get("task") not in TASKS:
        return "dev_acc"
    spec = TASKS[m["task"]]
    return spec.score_names.get(spec.metric, spec.metric)


def layer_curves(metrics: Metrics, tasks: Sequence[str], ks: Sequence[int]
                 ) -> dict[str, dict[str, list[tuple[int, float]]]]:
    """task -> {"dev": [(k, acc)] (the scored split), "train": [(k, acc)]} from the
    Figure 2-left records (by their task / layers_transferred fields, pre-training seeds
    pooled)."""
    out: dict[str, dict[str, list[tuple[int, float]]]] = {}
    for task in tasks:
        curves: dict[str, list[tuple[int, float]]] = {"dev": [], "train": []}
        for k in ks:
            m = layer_results(metrics, task, k)
            if m is None:
                continue
            for split, key in (("dev", scored_key(m)), ("train", "train_acc")):
                entry = m["scores"].get(key)
                if entry is not None:
                    curves[split].append((k, float(entry["mean"])))
        out[task] = curves
    return out


def at_floors(params: Params, metrics: Metrics) -> Metrics:
    """The records with each zero-shot task of `report.zeroshot_floors` renormalised at its
    floor: (raw - floor) / (sota - floor) at every checkpoint and the floor as the record's
    `norm` random, so finding (d), the curves, bands and lines all use it (idempotent)."""
    floors = params.report.zeroshot_floors
    out = dict(metrics)
    for stem, m in metrics.items():
        hit = [t for t in floors if t in m.get("norm", {})] if stem.startswith("zeroshot") \
            and "checkpoints" in m else []
        if not hit:
            continue
        norm = {t: {**n, **({"random": floors[t]} if t in hit else {})}
                for t, n in m["norm"].items()}
        out[stem] = {**m, "norm": norm, "checkpoints": [
            {**c, "normalised": {t: (float(c["scores"][t]) - floors[t])
                                 / (norm[t]["sota"] - floors[t])
                                 if t in hit and t in c.get("scores", {}) else v
                                 for t, v in c["normalised"].items()}}
            for c in m["checkpoints"]]}
    return out


def zeroshot_curves(metrics: Metrics) -> dict[str, dict[str, list[tuple[int, float]]]]:
    """model -> task -> [(step, normalised score)] from zeroshot*.json: the mean over the
    model's records (one per pre-training seed) at the steps they all have."""
    acc: dict[str, dict[str, dict[int, list[float]]]] = {}
    for stem, m in sorted(metrics.items()):
        if not stem.startswith("zeroshot") or "checkpoints" not in m:
            continue
        per_model = acc.setdefault(names.record_body(m) or "", {})
        for ckpt in m["checkpoints"]:
            for task, value in ckpt["normalised"].items():
                per_model.setdefault(task, {}).setdefault(int(ckpt["step"]), []).append(
                    float(value))
    return {model: {task: [(s, float(np.mean(v))) for s, v in sorted(by.items())
                           if len(v) == max(len(x) for x in by.values())]
                    for task, by in per_task.items()}
            for model, per_task in acc.items()}


Bands = dict[str, Any]
"""Error bands of Figure 2: "left" task -> [(k, low, high)] (fractions), "right" model -> task
-> [(step, low, high)] (normalised), each a 95 % bootstrap CI."""


def draw_figure2(left: Mapping[str, Mapping[str, Sequence[tuple[int, float]]]],
                 right: Mapping[str, Mapping[str, Sequence[tuple[int, float]]]],
                 n_layer: int, bands: Bands | None = None,
                 lines: Mapping[str, Any] | None = None) -> Any:
    """Figure 2 as one matplotlib figure, two panels: layers transferred (left: scored split
    solid, train dashed, one colour per task), zero-shot vs updates (right: log x, one colour
    per task, Transformer solid, LSTM dashed); shaded 95 % CI bands where `bands` has them;
    chance (dotted) and majority (dash-dot) lines where `lines` (baseline_lines) has them."""
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
        if not band:  # no point with a CI
            continue
        ks, lo, hi = zip(*band, strict=True)
        ax_l.fill_between(ks, [100 * v for v in lo], [100 * v for v in hi],
                          color=colors(list(left).index(task)), alpha=0.15, linewidth=0)
    lines = lines or {}
    for i, (task, (chance, majority)) in enumerate(lines.get("left", {}).items()):
        color: Any = colors(list(left).index(task)) if task in left else colors(i)
        ax_l.axhline(100 * chance, color=color, lw=0.8, ls=":",
                     label=f"{task.upper()} chance")
        ax_l.axhline(100 * majority, color=color, lw=0.8, ls="-.",
                     label=f"{task.upper()} majority")
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
            if task in tasks and band:  # a task with no point with a CI draws no band
                steps, lo, hi = zip(*band, strict=True)
                ax_r.fill_between(steps, lo, hi, color=colors(tasks.index(task)),
                                  alpha=0.12 if model == "transformer" else 0.06, linewidth=0)
    ax_r.set_xscale("log")
    ax_r.axhline(0.0, color="grey", lw=0.8, ls=":", label="chance (random guess = 0)")
    for task, majority in lines.get("right", {}).items():
        color = colors(tasks.index(task)) if task in tasks else "grey"
        ax_r.axhline(majority, color=color, lw=0.8, ls="-.", label=f"{task.upper()} majority")
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
                 path: str | Path, dpi: int, n_layer: int, bands: Bands | None = None,
                 lines: Mapping[str, Any] | None = None) -> None:
    """Figure 2 as one PNG (written atomically)."""
    import matplotlib.pyplot as plt

    from gpt1 import atomic

    fig = draw_figure2(left, right, n_layer, bands, lines)
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


def layer_predictions(metrics: Metrics, tasks: Sequence[str], k: int) -> RowPreds:
    """task -> per-run scored-split predictions of the Figure 2-left run with k blocks."""
    out: RowPreds = {}
    for task in tasks:
        m = layer_results(metrics, task, k)
        split = "test" if m and "test" in m.get("predictions", {}) else "dev"
        p = read_predictions(m, split) if m else None
        if p is not None:
            out[task] = p
    return out


def layer_bands(params: Params, metrics: Metrics) -> dict[str, list[tuple[int, float, float]]]:
    """task -> [(k, low, high)]: 95 % run-level bootstrap CI of each Figure 2-left point."""
    out: dict[str, list[tuple[int, float, float]]] = {}
    for task in params.layers.tasks:
        for k in params.layers.layers_transferred:
            row = layer_predictions(metrics, [task], k)
            b = contrast([row], [1.0], [[f"{task}.{TASKS[task].metric}"]], params)
            if b is not None:
                out.setdefault(task, []).append((k, b.ci.low, b.ci.high))
    return out


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


def zeroshot_bands(params: Params, metrics: Metrics
                   ) -> dict[str, dict[str, list[tuple[int, float, float]]]]:
    """model -> task -> [(step, low, high)]: 95 % bootstrap CI over the scored examples of
    each normalised zero-shot point (one run per pre-training seed)."""
    out: dict[str, dict[str, list[tuple[int, float, float]]]] = {}
    for model in MODEL_LABELS:
        recs = [m for stem, m in sorted(metrics.items()) if stem.startswith("zeroshot")
                and names.record_body(m) == model]
        preds = [(m, p) for m in recs if (p := zeroshot_predictions(m)) is not None]
        if not preds or len(preds) != len(recs):
            continue
        for task in sorted(set.intersection(*(set(p) for _, p in preds))):
            band = []
            for step in sorted(set.intersection(*(set(p[task]) for _, p in preds))):
                runs = {}  # one run per pre-training seed, all scored on the same examples
                for m, p in preds:
                    y, yhat = p[task][step]
                    runs[(int(m.get("pretrain_seed", 0)), 0)] = Preds(
                        np.arange(len(y)), y, yhat, np.full(len(y), ""))
                norm = preds[0][0]["norm"][task]
                b = run_contrast([Term(task, norm["metric"], None, runs,
                                       1.0 / (norm["sota"] - norm["random"]), norm["random"])],
                                 params)
                if b is not None:
                    band.append((step, b.ci.low, b.ci.high))
            if band:
                out.setdefault(model, {})[task] = band
    return out


def baseline_lines(params: Params, metrics: Metrics) -> dict[str, Any]:
    """Chance and majority lines of both panels: "left" task -> (chance, majority) accuracy of
    the layer task's scored split (its records' baselines, else its fine-tuning record's);
    "right" task -> majority in normalised units (the most frequent scored label, from the
    zero-shot predictions; chance is 0 by construction)."""
    left = {}
    for task in params.layers.tasks:
        recs = [m for stem, m in sorted(metrics.items())
                if stem.startswith(("layers_", "finetune_")) and m.get("task") == task
                and "acc" in m.get("baselines", {})]
        if recs:
            base = recs[-1]["baselines"]["acc"]
            left[task] = (float(base["chance"]), float(base["majority"]))
    right = {}
    for stem, m in sorted(metrics.items()):
        preds = zeroshot_predictions(m) if stem.startswith("zeroshot") else None
        for task, by_step in (preds or {}).items():
            norm = m["norm"][task]
            if norm["metric"] != "acc":
                continue  # a constant's MCC is 0 = chance
            y = next(iter(by_step.values()))[0]
            _, counts = np.unique(y, return_counts=True)
            right[task] = (counts.max() / len(y) - norm["random"]) / (norm["sota"]
                                                                     - norm["random"])
    return {"left": left, "right": right}
