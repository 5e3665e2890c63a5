"""The headline: each fine-tuned task's primary score from its current records, as the one
small DVC metrics file (reports/headline.json)."""

from __future__ import annotations

from typing import Any

from gpt1.config import Params
from gpt1.freshness import is_current
from gpt1.records import Metrics
from gpt1.report.runs import variant_results
from gpt1.stage_table import record_prefix
from gpt1.tasks.registry import TASKS

HEADLINE_FILE = "headline.json"
"""The scores a user compares across experiments, as one small DVC metrics file (short,
unique keys, so `dvc exp show --drop '.*' --keep 'Experiment|ft'` and `dvc metrics show` fit a
terminal): each fine-tuned task's primary score (mean over seeds, %) as ft.<task>."""


def headline(params: Params, metrics: Metrics) -> dict[str, Any]:
    """{"ft": {task: primary score %}} for the tasks of params.finetune.tasks whose fine-tuning
    records are current (gpt1.freshness: their stage's declared params unchanged; a record of
    another config, or stale, is left out)."""
    current = {s: m for s, m in metrics.items() if is_current(params, s, m)}
    full = variant_results(current, "full")  # pooled over pre-training seeds
    scores = {}
    for task in params.finetune.tasks:
        record = full.get(task) or current.get(record_prefix("finetune", task=task))
        if record is None:
            continue
        value = record["scores"].get(TASKS[task].metric, {}).get("mean")
        if value is not None:
            scores[task] = round(100 * float(value), 1)
    return {"ft": scores}
