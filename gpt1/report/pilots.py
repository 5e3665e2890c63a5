"""The pilot records in the report: every arm's pilot table, the lr each Table 5 row ran with,
and the gate fixed in the plan (docs/study.md, Build 6).

The gate: a piloted arm whose best pilot configuration does not score at least its carved
pilot split's majority share + `report.gate_margins[task]` cannot show a difference at this
budget, so a finding that needs it is printed "untestable at this budget", with no estimate.
It is decided from the pilot records alone (they score a split carved from the training pool,
never a scored split), so it is fixed before any confirmatory score exists.

Pilot record fields read (gpt1.stages.lr_pilot writes them): `variant`, `task`, `grid`,
`dev_scores` (configuration -> score on the carved split), `chosen_lr` (its best
configuration), `chosen_score` (optional: that configuration's score, else
`dev_scores[chosen_lr]`), `dev_majority` (the majority-class share of the carved split; a
record without it leaves the gate undecided), `dev_split`, or `not_piloted` for an arm that
runs at the recipe's lr.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpt1.config import Params
from gpt1.records import Metrics, variant_results

CLEARS, FAILS, UNDECIDED, NOT_GATED = "clears", "fails", "undecided", "not gated"
UNTESTABLE = "untestable at this budget"


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


def best_score(m: Mapping[str, Any]) -> float | None:
    """The best pilot configuration's score on the carved split (`chosen_score`, else the
    dev score of `chosen_lr`)."""
    if "chosen_score" in m:
        return float(m["chosen_score"])
    score = m.get("dev_scores", {}).get(f"{float(m['chosen_lr']):g}")
    return None if score is None else float(score)


def gate(params: Params, metrics: Metrics, variant: str, task: str) -> Gate:
    """Whether one arm's best pilot configuration clears majority + margin on `task`."""
    label = params.report.row_labels.get(variant, variant)
    m = pilot_record(metrics, variant, task)
    margin = params.report.gate_margins.get(task)
    if m is None or "not_piloted" in m or margin is None:
        why = ("no pilot record" if m is None else "not piloted (the recipe's lr)"
               if "not_piloted" in m else f"no gate margin for {task}")
        return Gate(variant, task, NOT_GATED, f"{label} on {task.upper()}: {why}, not gated")
    score, majority = best_score(m), m.get("dev_majority")
    if score is None or majority is None:
        missing = "dev_majority" if majority is None else "the chosen configuration's score"
        return Gate(variant, task, UNDECIDED,
                    f"{label} on {task.upper()}: gate undecided (the pilot record has no "
                    f"{missing})")
    need = float(majority) + margin
    status = CLEARS if score >= need - 1e-12 else FAILS
    return Gate(variant, task, status,
                f"{label} on {task.upper()}: best pilot configuration (lr {m['chosen_lr']:g}) "
                f"{100 * score:.1f} on the carved pilot split, needs majority "
                f"{100 * float(majority):.1f} + {100 * margin:.1f} = {100 * need:.1f}: {status}")


def finding_gate(params: Params, metrics: Metrics, variants: Sequence[str],
                 tasks: Sequence[str]) -> tuple[bool, str]:
    """(testable, the gate in words) of a finding comparing `variants` on `tasks`: untestable
    when a piloted arm fails the gate or its gate is undecided on any of the tasks."""
    gates = [gate(params, metrics, v, t) for v in variants for t in tasks]
    blocked = [g for g in gates if g.status in (FAILS, UNDECIDED)]
    return not blocked, "; ".join(g.text for g in gates)


def pilot_section(params: Params, metrics: Metrics) -> list[str]:
    """Every arm's pilot table (configurations, carved-split scores, the chosen one, the
    split's majority and the gate) and the lr and warm-up steps each Table 5 row ran with."""
    lines = []
    pilots = [m for stem, m in sorted(metrics.items()) if stem.startswith("lr_pilot")
              and ("chosen_lr" in m or "not_piloted" in m)]
    if pilots:
        lines += ["| row | task | lr grid | pilot-split score per lr (x 100) | chosen lr | "
                  "pilot-split majority | gate | pilot split |",
                  "|---|---|---|---|---:|---:|---|---|"]
        for m in pilots:
            label = params.report.row_labels.get(m["variant"], m["variant"])
            if "not_piloted" in m:
                lines.append(f"| {label} | {m['task']} | not piloted: the recipe's lr | | | | "
                             f"{NOT_GATED} | |")
                continue
            scores = ", ".join(f"{lr}: {100 * float(v):.1f}"
                               for lr, v in m.get("dev_scores", {}).items())
            majority = m.get("dev_majority")
            status = gate(params, metrics, m["variant"], m["task"]).status
            lines.append(f"| {label} | {m['task']} | {', '.join(map(str, m.get('grid', [])))} | "
                         f"{scores} | {m['chosen_lr']} | "
                         f"{'n/a' if majority is None else f'{100 * float(majority):.1f}'} | "
                         f"{status} | {m.get('dev_split', '')} |")
        margins = ", ".join(f"{t.upper()} +{100 * g:.1f}"
                            for t, g in params.report.gate_margins.items())
        lines += ["", f"Gate (fixed in the plan): a piloted arm's best configuration must score "
                  f"at least its pilot split's majority + the margin ({margins} points), or "
                  f"each finding that needs the arm is {UNTESTABLE}; decided from these "
                  "records only.", ""]
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
