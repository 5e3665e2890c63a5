"""The pilot records in the report: every arm's pilot table, the lr each Table 5 row ran with,
and the gate fixed in the plan (docs/study.md, Build 6).

The gate: a piloted arm whose best pilot configuration does not reach, in accuracy, at least
its carved pilot split's majority share + `report.gate_margins[task]` cannot show a difference
at this budget, so a finding that needs it is printed "untestable at this budget", with no
estimate. It is decided from the pilot records alone (they score a split carved from the
training pool, never a scored split), so it is fixed before any confirmatory score exists.
It takes the best of the grid on the very split the grid was chosen on, so it is biased
towards clearing (a known, stated bias: an arm that fails it fails even so).
A pilot record that predates the gate (no majority share of its split, or no accuracy of
its chosen configuration where its score is not an accuracy) leaves the gate not evaluable:
the finding is printed "gate not evaluable: the pilot records predate the gate", with no
estimate either, never as untestable (nobody measured that).

Pilot record fields read (gpt1.arms.pilot writes them): `variant`, `task`, `metric`,
`grid` (lrs), `warmup_grid`, `dev_scores` (configuration -> score on the carved split),
`chosen_lr` and `chosen_warmup` (its best configuration), `chosen_accuracy` (that
configuration's accuracy on the carved split; older records: `chosen_score`, else
`dev_scores[chosen_lr]`, taken only when the task's metric is an accuracy),
`dev_majority` (the majority-class share of the carved split), `paper_recipe` (the recipe's
own row, never chosen), `dev_split`, `lr_at_edge` and `warmup_at_edge` (older records: computed
from the grids), or `not_piloted` for an arm that runs at the recipe's lr.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpt1.config import Params, at_grid_edge
from gpt1.records import Metrics
from gpt1.report.estimates import NOT_EVALUABLE, UNTESTABLE
from gpt1.report.runs import variant_results
from gpt1.tasks.registry import TASKS

CLEARS, FAILS, UNDECIDED, NOT_GATED = "clears", "fails", "not evaluable", "not gated"
EDGE = "⚑"
"""The pilot table's mark on a choice at an edge of its grid."""


@dataclass(frozen=True)
class Gate:
    """One arm on one task against the gate: its status and why, in words."""

    variant: str
    task: str
    status: str
    text: str


def pilot_record(metrics: Metrics, variant: str, task: str) -> Mapping[str, Any] | None:
    """The lr-pilot record of one arm on one task (by its fields), None if there is none."""
    for stem, m in sorted(metrics.items()):
        if (stem.startswith("lr_pilot") and m.get("variant") == variant
                and m.get("task") == task and ("chosen_lr" in m or "not_piloted" in m)):
            return m
    return None


def is_accuracy(metric: str) -> bool:
    """Whether a task metric is an accuracy share (acc, or a split's acc_matched ...)."""
    return metric == "acc" or metric.startswith("acc_")


def gate_accuracy(m: Mapping[str, Any]) -> tuple[float | None, str]:
    """(the best pilot configuration's accuracy on the carved split, or None; why not): the
    gate compares it with the split's majority share, itself an accuracy. `chosen_accuracy`;
    an older record without it gives its chosen score only when that score is an accuracy."""
    if m.get("chosen_accuracy") is not None:
        return float(m["chosen_accuracy"]), ""
    spec = TASKS.get(str(m.get("task")))
    metric = str(m.get("metric") or (spec.metric if spec else "an unknown metric"))
    if not is_accuracy(metric):
        return None, f"no chosen_accuracy, and its chosen score is {metric}, not an accuracy"
    if "chosen_score" in m:
        return float(m["chosen_score"]), ""
    score = m.get("dev_scores", {}).get(f"{float(m['chosen_lr']):g}")
    return (None, "no chosen_accuracy or chosen score") if score is None else (float(score), "")


def grid_edges(m: Mapping[str, Any]) -> list[str]:
    """The grids (`lr`, `warm-up`) at whose edge a pilot record's choice lies: its
    `lr_at_edge` / `warmup_at_edge`, or from its grids where an older record lacks them."""
    out = []
    for name, flag, value, grid in (("lr", "lr_at_edge", "chosen_lr", "grid"),
                                    ("warm-up", "warmup_at_edge", "chosen_warmup",
                                     "warmup_grid")):
        if flag in m:
            edge = bool(m[flag])
        else:
            edge = (m.get(value) is not None and bool(m.get(grid))
                    and at_grid_edge(float(m[value]), [float(g) for g in m[grid]]))
        if edge:
            out.append(name)
    return out


def chosen_text(m: Mapping[str, Any]) -> str:
    """The chosen configuration in words: `lr X` and, where recorded, `, warm-up W`."""
    warm = m.get("chosen_warmup")
    return f"lr {float(m['chosen_lr']):g}" + ("" if warm is None else f", warm-up {warm:g}")


def gate(params: Params, metrics: Metrics, variant: str, task: str) -> Gate:
    """Whether one arm's best pilot configuration clears majority + margin on `task`, in
    accuracy; not evaluable when its record predates the gate."""
    label = params.report.row_labels.get(variant, variant)
    m = pilot_record(metrics, variant, task)
    margin = params.report.gate_margins.get(task)
    if m is None or "not_piloted" in m or margin is None:
        why = ("no pilot record" if m is None else "not piloted (the recipe's lr)"
               if "not_piloted" in m else f"no gate margin for {task}")
        return Gate(variant, task, NOT_GATED, f"{label} on {task.upper()}: {why}, not gated")
    (accuracy, why), majority = gate_accuracy(m), m.get("dev_majority")
    if accuracy is None or majority is None:
        missing = "no dev_majority" if majority is None else why
        return Gate(variant, task, UNDECIDED,
                    f"{label} on {task.upper()}: gate not evaluable (the pilot record "
                    f"predates the gate: {missing})")
    need = float(majority) + margin
    status = CLEARS if accuracy >= need - 1e-12 else FAILS
    return Gate(variant, task, status,
                f"{label} on {task.upper()}: best pilot configuration ({chosen_text(m)}) "
                f"accuracy {100 * accuracy:.1f} on the carved pilot split, needs majority "
                f"{100 * float(majority):.1f} + {100 * margin:.1f} = {100 * need:.1f}: {status}")


def finding_gate(params: Params, metrics: Metrics, variants: Sequence[str],
                 tasks: Sequence[str]) -> tuple[str | None, str]:
    """(None when testable, else the finding's verdict; the gate in words) of a finding
    comparing `variants` on `tasks`: untestable at this budget when a piloted arm fails the
    gate on any of the tasks, else gate not evaluable when one's record predates the gate."""
    gates = [gate(params, metrics, v, t) for v in variants for t in tasks]
    status = {g.status for g in gates}
    blocked = UNTESTABLE if FAILS in status else NOT_EVALUABLE if UNDECIDED in status else None
    return blocked, "; ".join(g.text for g in gates)


def _paper_cell(m: Mapping[str, Any]) -> str:
    """The recorded paper-recipe row (`paper_recipe`): its configuration and pilot-split score."""
    paper = m.get("paper_recipe")
    if not isinstance(paper, Mapping) or "score" not in paper:
        return "not recorded"
    return (f"lr {float(paper['lr']):g}, warm-up {float(paper['warmup_frac']):g}: "
            f"{100 * float(paper['score']):.1f}")


def pilot_section(params: Params, metrics: Metrics) -> list[str]:
    """Every arm's pilot table (the lr x warm-up grid, each configuration's carved-split score,
    the chosen configuration and its accuracy, the paper recipe's row beside them, the split's
    majority and the gate) and the lr and warm-up steps each Table 5 row ran with."""
    lines = []
    pilots = [m for stem, m in sorted(metrics.items()) if stem.startswith("lr_pilot")
              and ("chosen_lr" in m or ("not_piloted" in m  # full on its other tasks: no row
                                        and m.get("task") in params.ablations.tasks))]
    if pilots:
        lines += ["| row | task | lr grid | warm-up grid | pilot-split score per configuration "
                  "(x 100) | chosen | its pilot-split accuracy | paper recipe (never chosen) | "
                  "pilot-split majority | gate | pilot split |",
                  "|---|---|---|---|---|---|---:|---|---:|---|---|"]
        for m in pilots:
            label = params.report.row_labels.get(m["variant"], m["variant"])
            if "not_piloted" in m:
                lines.append(f"| {label} | {m['task']} | not piloted: the recipe's lr | | | | | "
                             f"| | {NOT_GATED} | |")
                continue
            scores = ", ".join(f"{cfg}: {100 * float(v):.1f}"
                               for cfg, v in m.get("dev_scores", {}).items())
            majority, (accuracy, _) = m.get("dev_majority"), gate_accuracy(m)
            status = gate(params, metrics, m["variant"], m["task"]).status
            edges = grid_edges(m)
            mark = f" {EDGE} {' and '.join(edges)} at grid edge" if edges else ""
            lines.append(f"| {label} | {m['task']} | {', '.join(map(str, m.get('grid', [])))} | "
                         f"{', '.join(map(str, m.get('warmup_grid', []))) or 'n/a'} | "
                         f"{scores} | {chosen_text(m)}{mark} | "
                         f"{'n/a' if accuracy is None else f'{100 * accuracy:.1f}'} | "
                         f"{_paper_cell(m)} | "
                         f"{'n/a' if majority is None else f'{100 * float(majority):.1f}'} | "
                         f"{status} | {m.get('dev_split', '')} |")
        margins = ", ".join(f"{t.upper()} +{100 * g:.1f}"
                            for t, g in params.report.gate_margins.items())
        lines += ["", f"{EDGE}: the choice is the smallest or largest value of its grid (lr or "
                  "warm-up; a one-value grid always), so the grid may not contain the optimum.",
                  "", f"Gate (fixed in the plan): a piloted arm's best configuration must reach, "
                  f"in accuracy, at least its pilot split's majority + the margin ({margins} "
                  f"points), or each finding that needs the arm is {UNTESTABLE}; decided from "
                  "these records only. The best of the grid is scored on the split it was "
                  "chosen on, so the gate is biased towards clearing (a known, stated bias). "
                  "A record that predates the gate (no majority share, or no accuracy where "
                  f"its score is another metric) leaves it {UNDECIDED}: the finding prints "
                  f"\"{NOT_EVALUABLE}\", with no estimate.", ""]
    used = []
    for variant, label in params.report.row_labels.items():
        res = variant_results(metrics, variant)
        lrs = sorted({str(m["lr"]) for m in res.values() if "lr" in m})
        warm = sorted({int(m["warmup_steps"]) for m in res.values() if "warmup_steps" in m})
        if lrs:
            used.append(f"{label}: lr {', '.join(lrs)}"
                        + (f", warm-up {min(warm)}-{max(warm)} steps" if warm else ""))
    if used:
        lines.append("Learning rates used (records' `lr`): " + "; ".join(used) + ".")
    return lines
