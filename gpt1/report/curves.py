"""Where pre-training can show, in the report: the labelled-data curve
(accuracy vs training examples n, one line per arm of curves.arms and the bag-of-words
floor), the pre-training-compute curve (fine-tuned accuracy vs the step of the mid-run
checkpoint of one schedule the run started from: not a dose-response) and the dose curve
(fine-tuned accuracy vs the pre-training tokens of separately trained runs, from scratch as
dose 0), each point with its 95 % run-level bootstrap band; the compute curve's slope test over
the checkpoints after warm-up and, apart, step 0 vs the final checkpoint; the dose curve's
slope over log10(tokens). Read from the records of the curve_n, curve_floor, curve_step and
curve_dose stages (gpt1/stages/curves.py), Table 5's full and scratch records (the dose curve's
top dose and dose 0) and their per-example prediction files. Every point goes through the
findings' flag rule (`contrasts.arm_flags`: at least half its runs answer one class, or its CI
does not clear the majority baseline): a flagged point is marked in the tables and drawn
hollow, each slope is fitted over unflagged points only, and a contrast with a flagged point
says so."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpt1 import stats
from gpt1.config import SCRATCH_ARM, Params
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


def log_slope(params: Params, task: str,
              points: Sequence[tuple[int, Sequence[Mapping[str, Any]]]]
              ) -> stats.RunBootstrap | None:
    """The hierarchical bootstrap of the least-squares slope of accuracy over log10(x) through
    `points` (x > 0, the records of its runs), over the runs every point has; None with fewer
    than two points or without prediction files."""
    if len(points) < 2:
        return None
    w = stats.slope_weights([slope_x(x) for x, _ in points])
    terms = [_term(task, recs, float(wk)) for (_, recs), wk in zip(points, w, strict=True)]
    if any(t is None for t in terms):
        return None
    return run_contrast([t for t in terms if t is not None], params)


def compute_slope(params: Params, metrics: Metrics, task: str
                  ) -> tuple[stats.RunBootstrap | None, list[int]]:
    """(the hierarchical bootstrap of the least-squares slope of accuracy over log10(step),
    over the runs every checkpoint has; the steps it is fitted over: `slope_steps` less the
    flagged points). None with fewer than two such checkpoints or without prediction files."""
    every = compute_records(params, metrics, task)
    flagged = {p.x for p in compute_curve(params, metrics, task) if p.flags}
    steps = [s for s in slope_steps(params, [s for s, _ in every]) if s not in flagged]
    return log_slope(params, task, [(s, recs) for s, recs in every if s in steps]), steps


def dose_records(params: Params, metrics: Metrics, task: str
                 ) -> list[tuple[int, list[dict[str, Any]]]]:
    """(pre-training tokens, the records of that dose) for every dose of the dose curve with
    records, in dose order: 0 = Table 5's from-scratch row, each budget of curves.dose_tokens
    (stage curve_dose), and pretrain.max_tokens = Table 5's `full` row (the main run). Without
    curves.dose_tokens, none."""
    if not params.curves.dose_tokens or params.pretrain.max_tokens is None:
        return []
    doses = [(0, record_prefix("ablation", task=task, arm=SCRATCH_ARM)),
             *((t, record_prefix("curve_dose", task=task, tokens=t))
               for t in params.curves.dose_tokens),
             (params.pretrain.max_tokens, record_prefix("finetune", task=task))]
    return [(x, recs) for x, prefix in doses if (recs := _stem_records(metrics, prefix))]


def dose_curve(params: Params, metrics: Metrics, task: str) -> list[Point]:
    """The dose curve: one point per dose with records, x = its pre-training tokens."""
    return [p for x, recs in dose_records(params, metrics, task)
            if (p := _point(params, task, x, recs)) is not None]


def dose_slope(params: Params, metrics: Metrics, task: str
               ) -> tuple[stats.RunBootstrap | None, list[int]]:
    """(the hierarchical bootstrap of the least-squares slope of accuracy over
    log10(pre-training tokens) through the unflagged pre-trained doses, over the runs every
    one has; their tokens). Dose 0 is left out: log10(0) is undefined, and pre-trained or not
    is finding (a)'s contrast. None with fewer than two such doses or without prediction
    files."""
    curve = {p.x: p for p in dose_curve(params, metrics, task)}
    points = [(x, recs) for x, recs in dose_records(params, metrics, task)
              if x > 0 and x in curve and not curve[x].flags]
    return log_slope(params, task, points), [x for x, _ in points]


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
    what = ("labelled data and pre-training compute" if not params.curves.dose_tokens else
            "labelled data, pre-training compute and dose" if params.curves.checkpoints else
            "labelled data and pre-training dose")
    head = [f"## Where pre-training can show: {what}", "",
            f"![Curves: {what}]({FIGURE})" if params.curves.dose_tokens
            else f"![Labelled-data and pre-training-compute curves]({FIGURE})", ""]
    for task in params.curves.tasks:
        labels, compute = label_curve(params, metrics, task), compute_curve(params, metrics, task)
        if not labels and not compute:
            continue
        if not out:
            out += head
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
            out += [f"Pre-training-compute curve, {task.upper()}: {MID_RUN} (the `full` recipe "
                    f"on {params.curves.compute_n:,} training examples, fine-tuned from each kept "
                    "checkpoint of one pre-training run, only the last one after its lr decay; "
                    "x 100): "
                    + "; ".join(f"step {p.x:,}: {_band(p)}" for p in compute) + ".", "",
                    *flag_lines("compute curve", [(f"step {p.x:,}", p) for p in compute]), "",
                    *compute_tests(params, metrics, task), ""]
    for task in params.curves.dose_tasks:
        doses = dose_curve(params, metrics, task)
        if doses:
            out += ([] if out else head) + dose_lines(params, metrics, task, doses)
    return out


MID_RUN = "mid-run checkpoints of one schedule (not a dose-response)"
"""What the compute curve's points are, said wherever it is shown."""


def dose_label(params: Params, x: int) -> str:
    """A dose in words: from scratch (0), the main run (pretrain.max_tokens), or a budget."""
    if x == 0:
        return "from scratch (dose 0)"
    return ("main run (`pretrain`)" if x == params.pretrain.max_tokens
            else "own run (`pretrain_dose`)")


def dose_lines(params: Params, metrics: Metrics, task: str, doses: Sequence[Point]
               ) -> list[str]:
    """The dose curve of `task` in the report: its table (each dose's tokens, the (lr,
    warm-up) its runs used, its accuracy and flag), the flags and the slope test."""
    recipe = {x: recs[0] for x, recs in dose_records(params, metrics, task)}
    out = [f"Dose curve, {task.upper()}: fine-tuned accuracy against pre-training tokens, each "
           "budget a complete pre-training run of its own (warm-up of "
           f"{params.pretrain.warmup_steps:,} updates, then its decay to 0 at its own end; not a "
           "checkpoint of another run), fine-tuned as Table 5's "
           "`full` row (its training samples, seeds and scored split) at the (lr, warm-up) its "
           "own pilot chose on the training pool; dose 0 is Table 5's from-scratch row and the "
           "top dose the main run's `full` row, each at its own pilot's choice (x 100, test "
           "split; mean over runs, 95 % run-level bootstrap CI in brackets):", "",
           "| dose | pre-training tokens | lr, warm-up its runs used | accuracy |",
           "|---|---:|---|---|"]
    for p in doses:
        m = recipe[p.x]
        out.append(f"| {dose_label(params, p.x)} | {p.x:,} | lr {m.get('lr', 0):g}, warm-up "
                   f"{m.get('warmup_frac', 0):g} | {_band(p)} |")
    out += ["", *flag_lines("dose curve", [(f"{p.x:,} tokens" if p.x else dose_label(params, 0),
                                            p) for p in doses]), ""]
    b, used = dose_slope(params, metrics, task)
    dropped = [p.x for p in doses if p.x > 0 and p.flags]
    scope = ("over the unflagged pre-trained doses (dose 0 is left out: log10(0) is undefined, "
             "and pre-trained or not is finding (a)'s contrast"
             + (f"; flagged and left out: {', '.join(f'{x:,}' for x in dropped)} tokens"
                if dropped else "") + ")")
    if b is None:
        return out + [f"Dose slope test {scope}: not run ({len(used)} such doses; it needs two "
                      "or more, each with its prediction files); no verdict.", ""]
    return out + [f"Dose slope test {scope}: least-squares slope of accuracy over "
                  f"log10(pre-training tokens), {len(used)} doses "
                  f"({', '.join(f'{x:,}' for x in used)} tokens), {b.runs} runs: "
                  f"{_pts(b.ci.estimate)} points per decade, 95 % CI [{_pts(b.ci.low)}, "
                  f"{_pts(b.ci.high)}] (hierarchical bootstrap, conditional on the pre-trained "
                  f"models): **{stats.superiority(b)}** (held = CI above 0 and the same sign in "
                  "every pre-training seed).", ""]


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
    """The curves of curves.tasks' first task as one PNG (written atomically, empty panels
    without records or without curves.tasks): left accuracy vs n (log x) per arm with the
    floor dashed; then accuracy vs pre-training step (symlog x; the compute curve, where
    curves.checkpoints lists any); then accuracy vs pre-training tokens of curves.dose_tasks'
    first task (symlog x, dose 0 = from scratch; where curves.dose_tokens lists any). Shaded =
    95 % run-level bands, hollow = flagged."""
    task = params.curves.tasks[0] if params.curves.tasks else None
    labels, compute = ({}, []) if task is None else (label_curve(params, metrics, task),
                                                     compute_curve(params, metrics, task))
    name = "no curves.tasks" if task is None else task.upper()
    dose_task = params.curves.dose_tasks[0] if params.curves.dose_tasks else None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from gpt1 import atomic

    panels = 1 + bool(params.curves.checkpoints) + (dose_task is not None)
    fig, axes = plt.subplots(1, panels, figsize=(5 * panels, 4), squeeze=False)
    left, *rest = axes[0]
    for arm, pts in labels.items():
        _draw(left, pts, label=arm, linestyle="--" if arm == FLOOR_ARM else "-")
    left.set(xscale="log", xlabel="labelled training examples n", ylabel="accuracy (%)",
             title=f"{name}: accuracy vs labelled data")
    if labels:
        left.legend()
    if params.curves.checkpoints:
        right = rest.pop(0)
        _draw(right, compute)
        right.set(xscale="symlog", xlabel="pre-training updates", ylabel="accuracy (%)")
        right.set_title(f"{name}: {MID_RUN}", fontsize=9)
    if dose_task is not None:
        ax, doses = rest.pop(0), dose_curve(params, metrics, dose_task)
        _draw(ax, doses)
        ax.set(xlabel="pre-training tokens (0 = from scratch)", ylabel="accuracy (%)")
        ax.set_title(f"{dose_task.upper()}: dose curve, separately trained runs (hollow: "
                     "flagged)", fontsize=9)
        ax.set_xscale("symlog", linthresh=min([p.x for p in doses if p.x > 0] or [1]))
        ax.set_xticks([p.x for p in doses], [_tokens_text(p.x) for p in doses])
    fig.tight_layout()
    with atomic.atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=params.report.figure_dpi)
    plt.close(fig)


def _tokens_text(x: int) -> str:
    """A token count as a tick label: 0, 750k, 2.1M."""
    return f"{x / 1e6:g}M" if x >= 10 ** 6 else f"{x / 1e3:g}k" if x >= 1000 else str(x)


def _draw(ax: Any, pts: Sequence[Point], **line: Any) -> None:
    """One curve: its means as a line, flagged points hollow, its 95 % run-level band."""
    if not pts:
        return
    (drawn,) = ax.plot([p.x for p in pts], [100 * p.mean for p in pts], marker="o", **line)
    _hollow(ax, [p for p in pts if p.flags], drawn.get_color())
    banded = [p for p in pts if p.low is not None and p.high is not None]
    if banded:
        ax.fill_between([p.x for p in banded], [100 * (p.low or 0) for p in banded],
                        [100 * (p.high or 0) for p in banded], alpha=0.2,
                        color=drawn.get_color())
