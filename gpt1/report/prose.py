"""What the Figure 2 curves show, in words, and whether they go the paper's way: only as
far as findings (c) and (d) say (no "as in the paper" unless the test held)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from gpt1.report.estimates import Finding
from gpt1.report.figure2 import MODEL_LABELS


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
            f"{task.upper()} scored-split accuracy goes from {100 * a0:.1f} with {k0} blocks to "
            f"{100 * a1:.1f} with {k1} ({100 * (a1 - a0):+.1f} points; it rises in {ups} of "
            f"{len(pts) - 1} steps).")
    return " ".join(parts) if parts else "No layer-transfer results at this preset."


def compare(finding: Finding | None, paper_claim: str) -> str:
    """The sentence comparing a Figure 2 panel with the paper, from its finding's verdict only:
    "as in the paper" only when the test held, with no arm flagged."""
    if finding is None or finding.verdict == "inconclusive" and finding.statistic == "n/a":
        return "No comparison with the paper possible."
    if finding.reproduces:
        return (f"Compared with the paper: as in the paper, {paper_claim} (finding "
                f"({finding.tag}) held).")
    verdict = (f"could not be tested ({finding.verdict})" if finding.verdict.startswith("no CI")
               else f"is {finding.verdict}")
    return (f"Compared with the paper: finding ({finding.tag}) {verdict}, so this run does not "
            f"show that {paper_claim}.")


def compare_left(finding: Finding | None) -> str:
    """Does our layer-transfer curve go the paper's way? Only finding (c)'s test says."""
    return compare(finding, "accuracy rises with the number of blocks transferred")


def compare_right(finding: Finding | None) -> str:
    """Does the Transformer's zero-shot score rise with pre-training? Only finding (d)'s test
    says; whether the LSTM's curve is more variable is exploratory (no verdict)."""
    return (compare(finding, "the Transformer's zero-shot score rises with pre-training")
            + " Whether the LSTM's curve is more variable is exploratory: no verdict.")


def trend(
    per_task: Mapping[str, Sequence[tuple[int, float]]],
) -> tuple[float, float, float] | None:
    """(Spearman rho of the task-mean against the step, sd of its step-to-step change, last
    minus first task-mean)."""
    from scipy.stats import spearmanr

    steps = sorted({s for pts in per_task.values() for s, _ in pts})
    if len(steps) < 2:
        return None
    mean = [float(np.mean([v for pts in per_task.values() for s, v in pts if s == st]))
            for st in steps]
    rho = float(spearmanr(steps, mean)[0]) if np.ptp(mean) > 0 else 0.0
    return rho, float(np.std(np.diff(mean))), mean[-1] - mean[0]


def describe_right(right: Mapping[str, Mapping[str, Sequence[tuple[int, float]]]]) -> str:
    """Trend (Spearman rho of the task-mean against the step) and roughness per model."""
    parts = []
    for model, per_task in right.items():
        name = MODEL_LABELS.get(model, model)
        tr = trend(per_task)
        if tr is None:
            parts.append(f"{name}: fewer than two checkpoints.")
            continue
        steps = sorted({s for pts in per_task.values() for s, _ in pts})
        mean = [float(np.mean([v for pts in per_task.values() for s, v in pts if s == st]))
                for st in (steps[0], steps[-1])]
        parts.append(
            f"{name}: mean normalised score {mean[0]:.2f} at step {steps[0]} -> {mean[1]:.2f} "
            f"at step {steps[-1]} (Spearman rho with updates {tr[0]:+.2f}; sd of "
            f"step-to-step change {tr[1]:.2f}).")
    return " ".join(parts) if parts else "No zero-shot results at this preset."

