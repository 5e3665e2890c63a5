"""What every finding's verdict line is built from: the Finding record, point estimates of a
contrast from the records' per-run scores (available without prediction files), the design
(pre-training x fine-tuning seeds) and the number formats."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np

from gpt1 import stats
from gpt1.errors import Gpt1Error
from gpt1.records import Metrics
from gpt1.report.runs import record_runs, records_digest
from gpt1.tasks.registry import TASKS

NO_CI = "no CI: predictions not available"
UNTESTABLE = "untestable at this budget"
NOT_EVALUABLE = "gate not evaluable: the pilot records predate the gate"
"""A finding whose piloted arm's pilot record lacks what the gate needs (gpt1.report.pilots):
no estimate, and not "untestable" (that would be a claim about the budget nobody measured)."""
FLAGGED = "inconclusive (flagged arm)"
METHOD = ("v3.1: t seed term by fine-tuning seed, gate in pilot accuracy, per-arm MDE seed "
          "term, per-arm flags")
"""The analysis a findings.json was computed with: a file of another (older) one is not
reused by `gpt1 verdicts`, its CIs and verdicts being those of the older statistic."""


def final_verdict(test: str, flagged: str) -> str:
    """The verdict a finding prints: its test's, except that a test against a flagged
    (non-learning) arm is inconclusive, whatever its CI says (no "held vs a non-learning
    baseline": such a contrast measures the baseline's failure, not the claim)."""
    if flagged and test not in (UNTESTABLE, NOT_EVALUABLE, NO_CI):
        return FLAGGED
    return test


def conditional(ci: str, n_pretrain: int) -> str:
    """A CI's label: it holds the pre-training seeds fixed, so it is conditional on them."""
    return (f"{ci} (conditional on the {n_pretrain} pre-trained model"
            f"{'s' if n_pretrain != 1 else ''})")


@dataclass(frozen=True)
class Finding:
    """One finding's outcome: the verdict word, the statistic and CI, the design's MDE, the
    flagged arm it was tested against (empty if none) and the report line."""

    tag: str
    claim: str
    verdict: str
    statistic: str
    ci: str
    mde: str
    flagged: str
    line: str
    gate: str = ""
    """The gate of the plan in words (pilot records; empty where the finding has none)."""

    @property
    def reproduces(self) -> bool:
        """Counts as reproducing the paper: held, with no arm flagged."""
        return self.verdict == "held" and not self.flagged


def findings_json(found: Sequence[Finding], metrics: Metrics, config_hash: str
                  ) -> dict[str, Any]:
    """The report's findings as data (reports/findings.json): the CIs need the per-example
    prediction files, which are not in git, so `gpt1 verdicts` reads them from here."""
    return {"records_digest": records_digest(metrics), "config_hash": config_hash,
            "method": METHOD, "findings": [asdict(f) for f in found]}


def saved_findings(path: Path, metrics: Metrics) -> list[Finding] | None:
    """The findings a report saved at `path`, if it was built from exactly these records
    (same records digest) by this analysis (`METHOD`); None when there is no such file, or it
    belongs to other records or to an older analysis."""
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
        if data["records_digest"] != records_digest(metrics) or data.get("method") != METHOD:
            return None
        names = {f.name for f in fields(Finding)}
        return [Finding(**{k: v for k, v in d.items() if k in names}) for d in data["findings"]]
    except (ValueError, KeyError, TypeError) as err:
        raise Gpt1Error(f"not a findings file ({type(err).__name__}: {err})", path) from None


def pts(x: float) -> str:
    return f"{100 * x:+.1f}"


def ci_pts(ci: stats.Interval) -> str:
    return f"[{100 * ci.low:+.1f}, {100 * ci.high:+.1f}]"


def component(task: str) -> str:
    """A task's main score as `task.score` (its metric under its JSON name)."""
    spec = TASKS[task]
    return f"{task}.{spec.score_names.get(spec.metric, spec.metric)}"


def run_points(recs: Sequence[Mapping[str, Any]], weights: Sequence[float],
               comps: Sequence[str]) -> dict[tuple[int, int], float]:
    """Per run (pretrain_seed, seed): sum over records of weight x mean over `comps` of the
    record's per-seed scores (the contrast without predictions), on the runs all records have."""
    per: list[dict[tuple[int, int], float]] = []
    for m, w in zip(recs, weights, strict=True):
        vals: dict[tuple[int, int], float] = {}
        for comp in comps:
            task, _, name = comp.partition(".")
            if m.get("task") != task or name not in m["scores"]:
                continue
            entry = m["scores"][name]
            for run, v in zip(record_runs(m), entry.get("per_seed") or [entry["mean"]],
                              strict=False):
                vals[run] = vals.get(run, 0.0) + w * float(v)
        per.append(vals)
    keys = set.intersection(*(set(p) for p in per)) if per else set()
    return {k: sum(p[k] for p in per) for k in sorted(keys)}


def hierarchical_mean(points: Mapping[tuple[int, int], float]) -> tuple[float, dict[int, float]]:
    """Mean over pre-training seeds of the mean over fine-tuning seeds, and each p's mean."""
    per = {p: float(np.mean([v for (q, _), v in points.items() if q == p]))
           for p in sorted({p for p, _ in points})}
    return float(np.mean(list(per.values()))), per


def design(points: Mapping[tuple[int, int], Any]) -> tuple[int, int]:
    """(pre-training seeds, fine-tuning seeds per pre-training seed) of a set of runs."""
    pre = sorted({p for p, _ in points})
    return len(pre), min(sum(1 for q, _ in points if q == p) for p in pre) if pre else 0


def pretrain_text(per: Mapping[int, float], b: stats.RunBootstrap | None) -> str:
    """Each pre-training seed's estimate and, with two, their difference with its CI."""
    text = "per pre-training seed: " + ", ".join(f"p{p} {pts(v)}" for p, v in per.items())
    if b is not None and b.between is not None:
        text += (f"; between pre-training seeds {pts(b.between.estimate)}, 95 % CI "
                 f"{ci_pts(b.between)}")
    return text
