"""Our numbers from the records: per-seed cells of a paper column, per-example predictions
and their bootstrap contrasts (95 % CIs over eval examples, paired across rows and seeds)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gpt1 import stats
from gpt1.config import Params
from gpt1.errors import Gpt1Error
from gpt1.scoring import score, score_parts
from gpt1.tasks.registry import TASKS


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


def seed_mean(vals: Sequence[np.ndarray]) -> np.ndarray:
    """Seed-wise mean of several per-seed vectors (cut to the shortest)."""
    n = min(len(v) for v in vals)
    return np.mean([v[:n] for v in vals], axis=0)


def cell_of(vals: Sequence[np.ndarray], missing: Sequence[str]) -> Cell:
    """Average components seed by seed, then mean and sample sd over seeds (no sd for one)."""
    if not vals:
        return Cell(None, None, 0, tuple(missing))
    summary = stats.seed_summary(seed_mean(vals))  # sd only with >= 2 seeds
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
                per_task.append(seed_mean(vals))
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
    return cell_of(*column_values(results, components, glue))


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
    return score(metric, y, pred)


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


def ci_text(ci: stats.Interval | None) -> str:
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



def present(results: Mapping[str, dict[str, Any]], components: Sequence[str]) -> list[str]:
    """The `task.score` components that the results hold (never the `glue` pseudo-column)."""
    return [c for c in components if c != "glue" and c.split(".")[0] in results
            and c.split(".")[1] in results[c.split(".")[0]]["scores"]]

