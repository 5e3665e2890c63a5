"""Where pre-training can show, in the report: the labelled-data curve
(accuracy vs training examples n, one line per arm of curves.arms and the bag-of-words
floor) and the pre-training-compute curve (fine-tuned accuracy vs the pre-training step the
run started from), each point with its 95 % run-level bootstrap band, and the compute
curve's slope test. Read from the records of the curve_n, curve_floor and curve_step stages
(gpt1/stages/curves.py) and their per-example prediction files."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpt1 import stats
from gpt1.config import Params
from gpt1.records import Metrics
from gpt1.report.contrasts import (
    RunPreds,
    component_term,
    distinct_runs,
    read_predictions,
    run_contrast,
)
from gpt1.report.estimates import component

FLOOR_ARM = "bow"
"""The floor's line of the labelled-data curve (gpt1.floor.VARIANT)."""
FIGURE = "curves.png"
"""The figure's file, beside report.md."""


@dataclass(frozen=True)
class Point:
    """One point of a curve: its x (n, or the pre-training step), the mean over its runs and
    the 95 % run-level bootstrap CI (None: no prediction files), and how many runs."""

    x: int
    mean: float
    low: float | None
    high: float | None
    runs: int


def _stem_records(metrics: Metrics, prefix: str) -> list[dict[str, Any]]:
    """The records of one point (every pre-training seed's: `<prefix>_p<seed>`, or `<prefix>`
    for a stage with no pre-training seed), in stem order."""
    return [m for stem, m in sorted(metrics.items())
            if stem == prefix or (stem.startswith(prefix + "_p")
                                  and stem[len(prefix) + 2:].isdigit())]


def _runs(recs: Sequence[Mapping[str, Any]]) -> RunPreds | None:
    """The point's runs (pre-training seed, fine-tuning seed) -> predictions, pooled over its
    records; a from-scratch arm's repeats over pre-training seeds count once. None when a
    record's prediction files are absent."""
    pooled: RunPreds = {}
    for m in recs:
        runs = read_predictions(m, "test")
        if runs is None:
            return None
        pooled.update(runs)
    return distinct_runs(recs[0], pooled) if recs else None


def _record_mean(recs: Sequence[Mapping[str, Any]], task: str) -> tuple[float, int]:
    """(mean over the records' per-seed scores, their number): a point without predictions."""
    score = component(task).partition(".")[2]
    vals = [float(v) for m in recs
            for v in m["scores"][score].get("per_seed") or [m["scores"][score]["mean"]]]
    return sum(vals) / len(vals), len(vals)


def _point(params: Params, task: str, x: int, recs: Sequence[Mapping[str, Any]]
           ) -> Point | None:
    if not recs or not all("scores" in m for m in recs):
        return None
    runs = _runs(recs)
    b = (run_contrast([component_term(runs, component(task), 1.0)], params)
         if runs else None)
    if b is None:
        mean, n_runs = _record_mean(recs, task)
        return Point(x, mean, None, None, n_runs)
    return Point(x, b.ci.estimate, b.ci.low, b.ci.high, b.runs)


def label_curve(params: Params, metrics: Metrics, task: str) -> dict[str, list[Point]]:
    """arm -> its points over curves.ns (the arms of curves.arms, then the floor `bow`);
    an n without records is left out."""
    out: dict[str, list[Point]] = {}
    for arm in (*params.curves.arms, FLOOR_ARM):
        for n in params.curves.ns:
            prefix = (f"curve_floor_{task}_{n}" if arm == FLOOR_ARM
                      else f"curve_n_{task}_{n}_{arm}")
            point = _point(params, task, n, _stem_records(metrics, prefix))
            if point is not None:
                out.setdefault(arm, []).append(point)
    return out


def compute_records(params: Params, metrics: Metrics, task: str
                    ) -> list[tuple[int, list[dict[str, Any]]]]:
    """(pre-training step, the records fine-tuned from it) per kept checkpoint of
    curves.checkpoints that has records, in step order."""
    out = []
    for k in params.curves.checkpoints:
        recs = _stem_records(metrics, f"curve_step_{task}_{k}")
        if recs and all("pretrain_step" in m for m in recs):
            out.append((int(recs[0]["pretrain_step"]), recs))
    return sorted(out, key=lambda p: p[0])


def compute_curve(params: Params, metrics: Metrics, task: str) -> list[Point]:
    """The pre-training-compute curve: one point per kept checkpoint, x = its step."""
    return [p for step, recs in compute_records(params, metrics, task)
            if (p := _point(params, task, step, recs)) is not None]


def slope_x(step: int) -> float:
    """The compute curve's x for its slope: log10(1 + step) (the checkpoints are log-spaced
    from step 0)."""
    return math.log10(1.0 + step)


def compute_slope(params: Params, metrics: Metrics, task: str
                  ) -> tuple[stats.RunBootstrap | None, int]:
    """(the hierarchical bootstrap of the least-squares slope of accuracy over log10(1 +
    step), over the runs every checkpoint has; the number of checkpoints). None with fewer
    than two checkpoints or without prediction files."""
    points = compute_records(params, metrics, task)
    if len(points) < 2:
        return None, len(points)
    w = stats.slope_weights([slope_x(s) for s, _ in points])
    terms = []
    for (_, recs), wk in zip(points, w, strict=True):
        runs = _runs(recs)
        if runs is None:
            return None, len(points)
        terms.append(component_term(runs, component(task), float(wk)))
    return run_contrast(terms, params), len(points)


def _pts(v: float | None) -> str:
    return "n/a" if v is None else f"{100 * v:.1f}"


def _band(p: Point) -> str:
    ci = "" if p.low is None else f" [{_pts(p.low)}, {_pts(p.high)}]"
    return f"{_pts(p.mean)}{ci} ({p.runs} runs)"


def curves_section(params: Params, metrics: Metrics) -> list[str]:
    """The report's section: both curves as tables (x 100, 95 % run-level bootstrap CI in
    brackets), the figure, and the compute curve's slope test; empty without curve records."""
    out: list[str] = []
    for task in params.curves.tasks:
        labels, compute = label_curve(params, metrics, task), compute_curve(params, metrics, task)
        if not labels and not compute:
            continue
        if not out:
            out += ["## Where pre-training can show: labelled data and pre-training compute", "",
                    f"![Labelled-data and pre-training-compute curves]({FIGURE})", ""]
        ns = params.curves.ns
        if labels:
            out += [f"Labelled-data curve, {task.upper()} (x 100, test split; mean over runs, "
                    "95 % run-level bootstrap CI in brackets where the prediction files exist; "
                    "bow = the bag-of-words floor at "
                    "the same training samples):", "",
                    "| arm | " + " | ".join(f"n = {n:,}" for n in ns) + " |",
                    "|---|" + "---|" * len(ns)]
            for arm, pts in labels.items():
                by_n = {p.x: _band(p) for p in pts}
                out.append(f"| {arm} | " + " | ".join(by_n.get(n, "—") for n in ns) + " |")
            out.append("")
        if compute:
            b, k = compute_slope(params, metrics, task)
            out += [f"Pre-training-compute curve, {task.upper()} (the `full` recipe on "
                    f"{params.curves.compute_n:,} training examples, fine-tuned from each kept "
                    "checkpoint; x 100): "
                    + "; ".join(f"step {p.x:,}: {_band(p)}" for p in compute) + ".", ""]
            if b is None:
                out += [f"Slope test: not run ({k} checkpoints with prediction files; it "
                        "needs two or more).", ""]
            else:
                out += [f"Slope test: least-squares slope of accuracy over log10(1 + step), "
                        f"{k} checkpoints, {b.runs} runs: {_pts(b.ci.estimate)} points per "
                        f"decade, 95 % CI [{_pts(b.ci.low)}, {_pts(b.ci.high)}] (hierarchical "
                        "bootstrap, conditional on the pre-trained models): "
                        f"**{stats.superiority(b)}** (held = CI above 0 and the same sign in "
                        "every pre-training seed).", ""]
    return out


def plot_curves(params: Params, metrics: Metrics, path: str | Path) -> None:
    """Both curves of curves.tasks' first task as one PNG (written atomically, empty panels
    without records): left accuracy vs n (log x) per arm with the floor dashed, right
    accuracy vs pre-training step (symlog x); shaded = 95 % run-level bands."""
    task = params.curves.tasks[0]
    labels, compute = label_curve(params, metrics, task), compute_curve(params, metrics, task)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from gpt1 import atomic

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for arm, pts in labels.items():
        xs, ys = [p.x for p in pts], [100 * p.mean for p in pts]
        (line,) = left.plot(xs, ys, marker="o", label=arm,
                            linestyle="--" if arm == FLOOR_ARM else "-")
        banded = [p for p in pts if p.low is not None and p.high is not None]
        if banded:
            left.fill_between([p.x for p in banded], [100 * (p.low or 0) for p in banded],
                              [100 * (p.high or 0) for p in banded], alpha=0.2,
                              color=line.get_color())
    left.set(xscale="log", xlabel="labelled training examples n", ylabel="accuracy (%)",
             title=f"{task.upper()}: accuracy vs labelled data")
    if labels:
        left.legend()
    if compute:
        xs, ys = [p.x for p in compute], [100 * p.mean for p in compute]
        right.plot(xs, ys, marker="o")
        banded = [p for p in compute if p.low is not None and p.high is not None]
        if banded:
            right.fill_between([p.x for p in banded], [100 * (p.low or 0) for p in banded],
                               [100 * (p.high or 0) for p in banded], alpha=0.2)
    right.set(xscale="symlog", xlabel="pre-training updates", ylabel="accuracy (%)",
              title=f"{task.upper()}: fine-tuned from each checkpoint")
    fig.tight_layout()
    with atomic.atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=params.report.figure_dpi)
    plt.close(fig)
