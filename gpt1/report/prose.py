"""What the Figure 2 curves show, in words, and whether they go the paper's way."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

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
    trends = {m: t for m, per_task in right.items() if (t := trend(per_task)) is not None}
    if "transformer" not in trends:
        return "No comparison with the paper possible."
    rho, rough, net = trends["transformer"]
    rises = rho > 0 and net > rough
    parts = [(f"as in the paper, the Transformer's zero-shot score trends upward with "
              f"pre-training (rho {rho:+.2f}; finding (d) tests the rise against its CI)"
              if rises else "unlike the paper, the Transformer's zero-shot score does not "
              "rise with pre-training")]
    if "lstm" in trends:
        lstm_rough = trends["lstm"][1]
        parts.append("the LSTM's curve is the more variable one, as in the paper"
                     if lstm_rough > rough else
                     "the LSTM's curve is not more variable than the Transformer's")
    return "Compared with the paper: " + "; ".join(parts) + "."


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

