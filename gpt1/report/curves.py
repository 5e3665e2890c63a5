"""Where pre-training can show, in the report: the labelled-data curve
(accuracy vs training examples n, one line per arm of curves.arms and the bag-of-words
floor) and the pre-training-compute curve (fine-tuned accuracy vs the pre-training step the
run started from), each point with its 95 % run-level bootstrap band, the compute curve's
slope test over the checkpoints after warm-up and, apart, step 0 vs the final checkpoint.
Read from the records of the curve_n, curve_floor and curve_step stages (gpt1/stages/curves.py)
and their per-example prediction files. Every point goes through the findings' flag rule
(`contrasts.arm_flags`: at least half its runs answer one class, or its CI does not clear the
majority baseline): a flagged point is marked in the tables and drawn hollow, the slope is
fitted over unflagged points only, and a contrast with a flagged point says so."""

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
    Term,
    arm_flags,
    component_term,
    distinct_runs,
    read_predictions,
    run_contrast,
)
from gpt1.report.estimates import component
from gpt1.report.figure2 import scored_key
from gpt1.report.runs import RunKey, record_runs
from gpt1.stage_table import record_prefix

FLOOR_ARM = "bow"
"""The floor's line of the labelled-data curve (gpt1.floor.VARIANT)."""
FIGURE = "curves.png"
"""The figure's file, beside report.md."""


@dataclass(frozen=True)
class Point:
    """One point of a curve: its x (n, or the pre-training step), the mean over its runs and
    the 95 % run-level bootstrap CI (None: no prediction files), how many runs, and why it
    is flagged (`contrasts.arm_flags`; empty: not flagged)."""

    x: int
    mean: float
    low: float | None
    high: float | None
    runs: int
    flags: tuple[str, ...] = ()


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
    """(mean over the point's distinct runs of the records' per-seed scores, their number): a
    point without predictions; a from-scratch arm's repeats over pre-training seeds count
    once, as with predictions (contrasts.distinct_runs)."""
    score = component(task).partition(".")[2]
    pooled: dict[RunKey, float] = {}
    for m in recs:
        entry = m["scores"][score]
        for run, v in zip(record_runs(m), entry.get("per_seed") or [entry["mean"]],
                          strict=False):
            pooled[run] = float(v)
    vals = list(distinct_runs(recs[0], pooled).values())
    return sum(vals) / len(vals), len(vals)


def _point(params: Params, task: str, x: int, recs: Sequence[Mapping[str, Any]]
           ) -> Point | None:
    if not recs or not all("scores" in m for m in recs):
        return None
    runs = _runs(recs)
    flags = tuple(arm_flags({task: dict(recs[0])}, f"{task}.{scored_key(recs[0])}", runs,
                            params))
    b = (run_contrast([component_term(runs, component(task), 1.0)], params)
         if runs else None)
    if b is None:
        mean, n_runs = _record_mean(recs, task)
        return Point(x, mean, None, None, n_runs, flags)
    return Point(x, b.ci.estimate, b.ci.low, b.ci.high, b.runs, flags)


def label_curve(params: Params, metrics: Metrics, task: str) -> dict[str, list[Point]]:
    """arm -> its points over curves.ns (the arms of curves.arms, then the floor `bow`);
    an n without records is left out."""
    out: dict[str, list[Point]] = {}
    for arm in (*params.curves.arms, FLOOR_ARM):
        for n in params.curves.ns:
            prefix = (record_prefix("curve_floor", task=task, n=n) if arm == FLOOR_ARM
                      else record_prefix("curve_n", task=task, n=n, arm=arm))
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
        recs = _stem_records(metrics, record_prefix("curve_step", task=task, checkpoint=k))
        if recs and all("pretrain_step" in m for m in recs):
            out.append((int(recs[0]["pretrain_step"]), recs))
    return sorted(out, key=lambda p: p[0])


def compute_curve(params: Params, metrics: Metrics, task: str) -> list[Point]:
    """The pre-training-compute curve: one point per kept checkpoint, x = its step."""
    return [p for step, recs in compute_records(params, metrics, task)
            if (p := _point(params, task, step, recs)) is not None]


def slope_x(step: int) -> float:
    """The compute curve's x for its slope: log10(step), over the checkpoints at or after the
    end of warm-up (`slope_steps`; the kept checkpoints are log-spaced)."""
    return math.log10(step)


def slope_steps(params: Params, steps: Sequence[int]) -> list[int]:
    """The steps the slope is fitted over: at or after the end of warm-up
    (pretrain.warmup_steps, and at least 1), as finding (d). Step 0 (the random init) and the
    warm-up checkpoints are left out: near x = 0 they would dominate a least-squares fit, which
    would then mostly measure "pre-trained or not" (`compute_jump` reports that apart)."""
    first = max(params.pretrain.warmup_steps, 1)
    return [s for s in steps if s >= first]


def _term(task: str, recs: Sequence[Mapping[str, Any]], weight: float) -> Term | None:
    runs = _runs(recs)
    return None if runs is None else component_term(runs, component(task), weight)


def compute_slope(params: Params, metrics: Metrics, task: str
                  ) -> tuple[stats.RunBootstrap | None, list[int]]:
    """(the hierarchical bootstrap of the least-squares slope of accuracy over log10(step),
    over the runs every checkpoint has; the steps it is fitted over: `slope_steps` less the
    flagged points). None with fewer than two such checkpoints or without prediction files."""
    every = compute_records(params, metrics, task)
    flagged = {p.x for p in compute_curve(params, metrics, task) if p.flags}
    steps = [s for s in slope_steps(params, [s for s, _ in every]) if s not in flagged]
    points = [(s, recs) for s, recs in every if s in steps]
    if len(points) < 2:
        return None, steps
    w = stats.slope_weights([slope_x(s) for s in steps])
    terms = [_term(task, recs, float(wk)) for (_, recs), wk in zip(points, w, strict=True)]
    if any(t is None for t in terms):
        return None, steps
    return run_contrast([t for t in terms if t is not None], params), steps


def compute_jump(params: Params, metrics: Metrics, task: str
                 ) -> tuple[stats.RunBootstrap | None, int | None]:
    """(the hierarchical bootstrap of the final checkpoint's accuracy minus step 0's (the
    random init), paired by run; the final step). None without a step-0 and a later
    checkpoint, or without prediction files."""
    points = compute_records(params, metrics, task)
    if len(points) < 2 or points[0][0] != 0:
        return None, None
    terms = [_term(task, points[-1][1], 1.0), _term(task, points[0][1], -1.0)]
    if any(t is None for t in terms):
        return None, points[-1][0]
    return run_contrast([t for t in terms if t is not None], params), points[-1][0]


def _pts(v: float | None) -> str:
    return "n/a" if v is None else f"{100 * v:.1f}"


def _band(p: Point) -> str:
    ci = "" if p.low is None else f" [{_pts(p.low)}, {_pts(p.high)}]"
    return f"{_pts(p.mean)}{ci} ({p.runs} runs){FLAG_MARK if p.flags else ''}"


FLAG_MARK = " †"
"""Marks a flagged point in the curve tables."""


def flag_lines(what: str, points: Sequence[tuple[str, Point]]) -> list[str]:
    """One line naming every flagged point of a curve with its reasons, or saying none is."""
    flagged = [f"{label}: {'; '.join(p.flags)}" for label, p in points if p.flags]
    if not flagged:
        return [f"Flags ({what}; the findings' rule: ≥ half the runs one class, or the CI "
                "not above the majority baseline): no point flagged."]
    return [f"Flags ({what}; the findings' rule: ≥ half the runs one class, or the CI not "
            f"above the majority baseline){FLAG_MARK}: " + " · ".join(flagged)
            + ". A flagged point did not learn the task; no contrast rests on it unmarked."]


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
            out += ["", *flag_lines("labelled-data curve",
                                    [(f"{arm} n = {p.x:,}", p) for arm, pts in labels.items()
                                     for p in pts]), ""]
        if compute:
            out += [f"Pre-training-compute curve, {task.upper()} (the `full` recipe on "
                    f"{params.curves.compute_n:,} training examples, fine-tuned from each kept "
                    "checkpoint; x 100): "
                    + "; ".join(f"step {p.x:,}: {_band(p)}" for p in compute) + ".", "",
                    *flag_lines("compute curve", [(f"step {p.x:,}", p) for p in compute]), "",
                    *compute_tests(params, metrics, task), ""]
    return out


def compute_tests(params: Params, metrics: Metrics, task: str) -> list[str]:
    """The compute curve's slope test (after warm-up) and, apart, step 0 vs the final
    checkpoint, in words."""
    b, steps = compute_slope(params, metrics, task)
    first = max(params.pretrain.warmup_steps, 1)
    flagged = {p.x: p for p in compute_curve(params, metrics, task) if p.flags}
    dropped = [s for s in flagged if s >= first]
    scope = (f"over the unflagged checkpoints at or after the end of warm-up (step {first:,}), "
             "as finding (d); step 0 (the random init) and the warm-up checkpoints are left "
             "out, since near x = 0 they would dominate the fit and make it measure "
             "\"pre-trained or not\" (that is the contrast below)"
             + (f"; flagged and left out: step {', '.join(f'{s:,}' for s in dropped)}"
                if dropped else ""))
    if b is None:
        out = [f"Slope test {scope}: not run ({len(steps)} such checkpoints, steps "
               f"{', '.join(f'{s:,}' for s in steps) or 'none'}; it needs two or more, each "
               "with its prediction files)."]
    else:
        out = [f"Slope test {scope}: least-squares slope of accuracy over log10(step), "
               f"{len(steps)} checkpoints (steps {', '.join(f'{s:,}' for s in steps)}), "
               f"{b.runs} runs: {_pts(b.ci.estimate)} points per decade, 95 % CI "
               f"[{_pts(b.ci.low)}, {_pts(b.ci.high)}] (hierarchical bootstrap, conditional on "
               f"the pre-trained models): **{stats.superiority(b)}** (held = CI above 0 and "
               "the same sign in every pre-training seed)."]
    jump, last = compute_jump(params, metrics, task)
    if last is None:
        return out + ["", "Step 0 vs the final checkpoint: not run (no step-0 checkpoint and a "
                      "later one)."]
    if jump is None:
        return out + ["", f"Step 0 vs the final checkpoint (step {last:,}): not run (prediction "
                      "files absent)."]
    ends = [f"step {s:,} is flagged ({'; '.join(flagged[s].flags)})"
            for s in (0, last) if s in flagged]
    caveat = (f" It compares against a flagged point: {' and '.join(ends)}, so it measures "
              "a recipe that did not learn, not pre-training." if ends else "")
    return out + ["", f"Step 0 (the random init) vs the final checkpoint (step {last:,}), a "
                  "separate contrast (final − step 0, paired by run; descriptive, no verdict): "
                  f"{_pts(jump.ci.estimate)} points, 95 % CI [{_pts(jump.ci.low)}, "
                  f"{_pts(jump.ci.high)}], {jump.runs} runs (hierarchical bootstrap, "
                  f"conditional on the pre-trained models).{caveat}"]


def _hollow(ax: Any, points: Sequence[Point], color: Any) -> None:
    """Redraw flagged points as hollow markers (white face) over their line."""
    if points:
        ax.plot([p.x for p in points], [100 * p.mean for p in points], linestyle="none",
                marker="o", markersize=8, markerfacecolor="white", markeredgecolor=color)


def plot_curves(params: Params, metrics: Metrics, path: str | Path) -> None:
    """Both curves of curves.tasks' first task as one PNG (written atomically, empty panels
    without records or without curves.tasks): left accuracy vs n (log x) per arm with the
    floor dashed, right accuracy vs pre-training step (symlog x); shaded = 95 % run-level
    bands."""
    task = params.curves.tasks[0] if params.curves.tasks else None
    labels, compute = ({}, []) if task is None else (label_curve(params, metrics, task),
                                                     compute_curve(params, metrics, task))
    name = "no curves.tasks" if task is None else task.upper()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from gpt1 import atomic

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for arm, pts in labels.items():
        xs, ys = [p.x for p in pts], [100 * p.mean for p in pts]
        (line,) = left.plot(xs, ys, marker="o", label=arm,
                            linestyle="--" if arm == FLOOR_ARM else "-")
        _hollow(left, [p for p in pts if p.flags], line.get_color())
        banded = [p for p in pts if p.low is not None and p.high is not None]
        if banded:
            left.fill_between([p.x for p in banded], [100 * (p.low or 0) for p in banded],
                              [100 * (p.high or 0) for p in banded], alpha=0.2,
                              color=line.get_color())
    left.set(xscale="log", xlabel="labelled training examples n", ylabel="accuracy (%)",
             title=f"{name}: accuracy vs labelled data")
    if labels:
        left.legend()
    if compute:
        xs, ys = [p.x for p in compute], [100 * p.mean for p in compute]
        (line,) = right.plot(xs, ys, marker="o")
        _hollow(right, [p for p in compute if p.flags], line.get_color())
        banded = [p for p in compute if p.low is not None and p.high is not None]
        if banded:
            right.fill_between([p.x for p in banded], [100 * (p.low or 0) for p in banded],
                               [100 * (p.high or 0) for p in banded], alpha=0.2)
    right.set(xscale="symlog", xlabel="pre-training updates", ylabel="accuracy (%)",
              title=f"{name}: fine-tuned from each checkpoint (hollow: flagged)")
    fig.tight_layout()
    with atomic.atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=params.report.figure_dpi)
    plt.close(fig)
