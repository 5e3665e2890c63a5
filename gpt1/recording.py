"""The one path every stage's record takes: written through gpt1.records, logged to MLflow,
stamped from the stage context (gpt1.records.StageContext) the stage process runs in."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpt1 import records, tracking
from gpt1.config import Params
from gpt1.records import StageContext


def record(params: Params, stem: str, metrics: Mapping[str, Any], scores: tuple[str, ...],
           summary: Mapping[str, Any] | None = None, *,
           context: StageContext | None = None) -> None:
    """Write the stage's record `stem` (gpt1.records; stamped by `context`, when the stage runs
    in one) and log it on the open MLflow run: `summary` (default: the scores) and both files
    of the record."""
    paths = records.write_metrics(params, stem, metrics, scores,
                                  None if context is None else context.stamp())
    tracking.log_summary({k: metrics[k] for k in scores} if summary is None else summary)
    for path in paths:
        tracking.log_artifact(path)


def record_in_own_run(params: Params, stem: str, metrics: Mapping[str, Any],
                      scores: tuple[str, ...], *, context: StageContext | None = None) -> None:
    """`record` for a stage that logs nothing while it works, in its own MLflow run."""
    with tracking.start_run(stem, params, context=context):
        record(params, stem, metrics, scores, context=context)
