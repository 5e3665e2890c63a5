"""Our numbers from the records: per-run cells of a paper column, per-example predictions,
their run-level bootstrap contrasts (95 % CIs: examples resampled once per draw for every arm
and run, the fine-tuning-seed error from its t distribution, conditional on the pre-training
seeds) and the degeneracy flags of a cell."""

from __future__ import annotations

import math
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from gpt1 import stats
from gpt1.config import Params
from gpt1.errors import Gpt1Error
from gpt1.report.runs import RunKey, record_runs
from gpt1.scoring import score_features, score_from_sums, score_parts
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

    def delta(self, paper: float | None, flags: Sequence[str] = ()) -> str:
        """ours - paper; none for a flagged (degenerate) cell."""
        if flags:
            return "— (flagged)"
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
    if res.get("init") == "scratch" and len(res.get("runs", ())) == len(per_seed):
        firsts = {f: i for i, (_, f) in reversed(list(enumerate(res["runs"])))}
        per_seed = [per_seed[i] for i in sorted(firsts.values())]  # once per fine-tuning seed
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
    """One run's predictions on one eval split (rows in file order)."""

    ids: np.ndarray
    label: np.ndarray
    prediction: np.ndarray
    group: np.ndarray


RunPreds = dict[RunKey, Preds]
_V = TypeVar("_V")
"""(pretrain_seed, seed) -> that run's predictions."""
RowPreds = dict[str, RunPreds]
"""task -> per-run predictions of one table row (one variant)."""


def read_predictions(m: Mapping[str, Any], split: str) -> RunPreds | None:
    """The per-run prediction files a record names (`predictions[split]`, aligned with its
    runs); None when it names none or one is missing (prediction files are not in git): its
    cells then get no CI."""
    import pandas as pd

    paths = m.get("predictions", {}).get(split)
    runs = record_runs(m)
    if not paths or len(paths) != len(runs) or not all(Path(p).is_file() for p in paths):
        return None
    out = {}
    for run, path in zip(runs, paths, strict=True):
        try:
            df = pd.read_parquet(path)
        except Exception as err:  # pyarrow raises several types on a damaged file
            raise Gpt1Error(f"unreadable parquet ({str(err).splitlines()[0]})", path) from None
        out[run] = Preds(df["id"].to_numpy(), df["label"].to_numpy(),
                         df["prediction"].to_numpy(), df["group"].to_numpy())
    return out


def row_predictions(results: Mapping[str, dict[str, Any]], split: str = "test") -> RowPreds:
    """task -> per-run predictions for every task of a row whose files are readable."""
    return {task: p for task, m in results.items()
            if (p := read_predictions(m, split)) is not None}


@dataclass(frozen=True)
class Term:
    """weight x (metric - offset) of one arm's runs on one task's examples (the rows of a
    group score only, e.g. RACE acc_middle)."""

    task: str
    metric: str
    group: str | None
    runs: RunPreds
    weight: float
    offset: float = 0.0


def component_term(runs: RunPreds, component: str, weight: float) -> Term:
    """The Term of a `task.score` component."""
    task, _, name = component.partition(".")
    metric, group = score_parts(TASKS[task], name)
    return Term(task, metric, group, runs, weight)


def _task_seed(seed: int, task: str) -> int:
    """The example-resample seed of a task: the same for every contrast, arm and run."""
    return seed + zlib.crc32(task.encode()) % 100_000


def run_contrast(terms: Sequence[Term], params: Params, resample_seeds: bool = True
                 ) -> stats.RunBootstrap | None:
    """Hierarchical bootstrap (gpt1.stats) of sum(weight x (metric - offset)) per run, over the
    runs every term has: each task's examples resampled once per draw for every term and run,
    plus the fine-tuning-seed error from its t distribution (gpt1.stats.seed_noise; unless
    `resample_seeds` is False), conditional on the pre-training seeds.
    None without terms, without a common run, or when runs were scored on different examples."""
    if not terms:
        return None
    keys = sorted(set.intersection(*(set(t.runs) for t in terms)))
    if not keys:
        return None
    cfg = params.report
    point, draws = np.zeros(len(keys)), np.zeros((cfg.bootstrap_samples, len(keys)))
    for task in sorted({t.task for t in terms}):
        mine = [t for t in terms if t.task == task]
        ref = mine[0].runs[keys[0]].ids
        if any(len(t.runs[k].ids) != len(ref) or (t.runs[k].ids != ref).any()
               for t in mine for k in keys):
            return None
        blocks = [(t, i, score_features(t.metric, p.label, p.prediction,
                                        None if t.group is None else p.group == t.group))
                  for t in mine for i, p in enumerate(t.runs[k] for k in keys)]
        x = np.concatenate([b for _, _, b in blocks], axis=1)
        sums = stats.draw_sums(x, cfg.bootstrap_samples, _task_seed(cfg.bootstrap_seed, task))
        total, col = x.sum(axis=0), 0
        for t, i, b in blocks:
            width = b.shape[1]
            draws[:, i] += t.weight * (score_from_sums(t.metric, sums[:, col:col + width])
                                       - t.offset)
            point[i] += t.weight * (float(score_from_sums(t.metric, total[col:col + width]))
                                    - t.offset)
            col += width
    return stats.hierarchical(point, draws, [k[0] for k in keys], cfg.bootstrap_seed,
                              resample_seeds=resample_seeds, finetune=[k[1] for k in keys])


def contrast(rows: Sequence[RowPreds], weights: Sequence[float],
             cols: Sequence[Sequence[str]], params: Params, resample_seeds: bool = True
             ) -> stats.RunBootstrap | None:
    """sum(w x row value) over the columns `cols` (a row value = the mean over columns of the
    mean of each column's components): `run_contrast` of it. None when a row lacks
    predictions for a task or two rows were scored on different examples."""
    cols = [c for c in cols if c]
    tasks = sorted({c.split(".")[0] for comps in cols for c in comps})
    if not tasks or any(t not in r for r in rows for t in tasks):
        return None
    terms = [component_term(row[c.split(".")[0]], c, w / len(cols) / len(comps))
             for row, w in zip(rows, weights, strict=True) for comps in cols for c in comps]
    return run_contrast(terms, params, resample_seeds)


def ci_text(b: stats.RunBootstrap | None) -> str:
    return "n/a" if b is None else f"[{100 * b.ci.low:.1f}, {100 * b.ci.high:.1f}]"


def baseline_value(results: Mapping[str, dict[str, Any]], components: Sequence[str],
                   kind: str) -> float | None:
    """Mean over a column's components of their `chance` or `majority` baseline (fraction)."""
    vals = []
    for comp in components:
        task, _, score = comp.partition(".")
        entry = results.get(task, {}).get("baselines", {}).get(score)
        if entry is None:
            return None
        vals.append(float(entry[kind]))
    return float(np.mean(vals)) if vals else None


def cell_flags(results: Mapping[str, dict[str, Any]], components: Sequence[str],
               preds: RowPreds, ci: stats.RunBootstrap | None, params: Params) -> list[str]:
    """Why a cell is degenerate (empty = not flagged): its pooled predictions are at least
    `report.degenerate_frac` one class, or its CI does not clear the majority baseline (without
    predictions: the binomial approximation `approx_low` does not)."""
    out = []
    for comp in components:
        task = comp.split(".")[0]
        if task in preds and not TASKS[task].regression:
            pooled = np.concatenate([p.prediction for p in preds[task].values()])
            _, counts = np.unique(pooled, return_counts=True)
            top = float(counts.max()) / len(pooled)
            if top >= params.report.degenerate_frac:
                out.append(f"{task}: {100 * top:.0f} % one class")
    majority = baseline_value(results, components, "majority")
    if majority is not None:
        if ci is not None and ci.ci.low <= majority:
            out.append(f"CI not above majority {100 * majority:.1f}")
        elif ci is None:
            low = approx_low(results, components)
            if low is not None and low <= majority:
                out.append(f"binomial approx. CI (no predictions) not above majority "
                           f"{100 * majority:.1f}")
    return list(dict.fromkeys(out))


def distinct_runs(record: Mapping[str, Any], runs: Mapping[RunKey, _V]) -> dict[RunKey, _V]:
    """The arm's independent runs (of any per-run value: predictions, scores): a from-scratch
    arm (`init: scratch`) has no pre-training seed, so its records of several pre-training
    seeds repeat one run per fine-tuning seed and count once each (the first pre-training
    seed's)."""
    if record.get("init") != "scratch":
        return dict(runs)
    out: dict[RunKey, _V] = {}
    for (p, f), preds in sorted(runs.items()):
        if all(f != g for _, g in out):
            out[(p, f)] = preds
    return out


def degenerate_runs(runs: RunPreds, params: Params) -> list[RunKey]:
    """The runs whose predictions are at least `report.degenerate_frac` one class."""
    return [key for key, p in sorted(runs.items()) if len(p.prediction) and
            np.unique(p.prediction, return_counts=True)[1].max() / len(p.prediction)
            >= params.report.degenerate_frac]


def arm_flags(results: Mapping[str, dict[str, Any]], component: str, runs: RunPreds | None,
              params: Params) -> list[str]:
    """Why one arm on one task is flagged (empty = not): at least half its runs degenerate (a
    run is degenerate at >= report.degenerate_frac of its predictions one class; a
    from-scratch arm's runs counted once per fine-tuning seed), or its CI does not clear the
    majority baseline (`cell_flags`)."""
    task = component.split(".")[0]
    if runs is None:
        return cell_flags(results, [component], {}, None, params)
    out = []
    if not TASKS[task].regression:
        mine = distinct_runs(results[task], runs)
        n_deg = len(degenerate_runs(mine, params))
        if mine and 2 * n_deg >= len(mine):
            out.append(f"{n_deg} of {len(mine)} runs >= "
                       f"{100 * params.report.degenerate_frac:.0f} % one class")
    ci = contrast([{task: runs}], [1.0], [[component]], params)
    return out + [f for f in cell_flags(results, [component], {}, ci, params)
                  if f.startswith("CI") or f.startswith("binomial")]


def run_text(results: Mapping[str, dict[str, Any]], task: str, runs: RunPreds | None,
             params: Params) -> str:
    """`k of n runs degenerate (p1234 f0, ...)` of one arm on one task, or why unchecked."""
    if runs is None:
        return "runs unchecked (no predictions)"
    if TASKS[task].regression:  # no classes to count, as arm_flags
        return "runs not checked for one class (a regression task)"
    mine = distinct_runs(results[task], runs)
    deg = degenerate_runs(mine, params)
    return (f"{len(deg)} of {len(mine)} runs >= {100 * params.report.degenerate_frac:.0f} % "
            "one class" + (f" ({', '.join(f'p{p} f{f}' for p, f in deg)})" if deg else ""))


def approx_low(results: Mapping[str, dict[str, Any]], components: Sequence[str]
               ) -> float | None:
    """Without prediction files: the lower 95 % bound of a cell from the example variance
    alone, mean - 1.96 x sqrt(m (1 - m) / n_eval) for a bounded score (acc, F1) and
    mean - 1.96 / sqrt(n_eval) for a correlation (MCC, r near 0): the flag's stand-in for the
    bootstrap CI, never a reported CI."""
    cell = column_cell(results, components, {})
    tasks = {c.split(".")[0] for c in components}
    n = min((int(results[t].get("n_eval") or 0) for t in tasks if t in results), default=0)
    if cell.mean is None or n <= 0:
        return None
    bounded = all(TASKS[t].metric in ("acc", "f1") for t in tasks)
    m = min(max(cell.mean, 0.0), 1.0)
    return cell.mean - 1.96 * (math.sqrt(m * (1 - m) / n) if bounded else 1 / math.sqrt(n))


def flag_text(flags: Sequence[str], checked: bool) -> str:
    """A table's flag cell: the reasons, `-` when clean, `unchecked` without predictions."""
    if flags:
        return "FLAG: " + "; ".join(flags)
    return "-" if checked else "unchecked (no predictions)"


def baseline_text(results: Mapping[str, dict[str, Any]], components: Sequence[str],
                  kind: str) -> str:
    """Mean over a column's components of their `chance` or `majority` baseline (x 100)."""
    value = baseline_value(results, components, kind)
    return "n/a" if value is None else f"{100 * value:.1f}"


def present(results: Mapping[str, dict[str, Any]], components: Sequence[str]) -> list[str]:
    """The `task.score` components that the results hold (never the `glue` pseudo-column)."""
    return [c for c in components if c != "glue" and c.split(".")[0] in results
            and c.split(".")[1] in results[c.split(".")[0]]["scores"]]

