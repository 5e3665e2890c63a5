"""The flow side of tracking (pipelines/): a parent run per pipeline run, one nested run per
stage around its subprocess, the stage's metrics files logged when it finishes, and the
read-back of a pipeline run's children and its link in the MLflow UI."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from gpt1 import records
from gpt1.config import Params
from gpt1.errors import Gpt1Error
from gpt1.tracking import store
from gpt1.tracking.create import open_run
from gpt1.tracking.runs import Run, ended, numeric, open_active

log = logging.getLogger(__name__)


@contextlib.contextmanager
def pipeline_run(name: str, params: Params, tags: Mapping[str, str]) -> Iterator[str | None]:
    """The parent run of one pipeline run; yields its id (None when tracking is disabled).

    Stage runs opened in this process nest under it; put the id in $GPT1_PARENT_RUN_ID of
    stage subprocesses so they nest too. log_artifact / log_summary inside go to this run.
    """
    if not params.tracking.enabled:
        yield None
        return
    with open_active(params, name, None, {"gpt1.pipeline": name, **tags}, None) as run:
        yield run.run_id


@contextlib.contextmanager
def stage_run(stage: str, params: Params, parent: str | None) -> Iterator[str | None]:
    """Flow side: the nested run of one stage around its subprocess; yields its id.

    Give the id to the subprocess in $GPT1_RUN_ID so its `start_run` logs into this run. Not
    made the active run here, so several stages can be open at once from threads. None (and
    nothing logged) when tracking is disabled or there is no parent run.
    """
    if not params.tracking.enabled or parent is None:
        yield None
        return
    client = store.client(params)
    try:
        run_id = open_run(client, params, stage, parent, {"gpt1.stage": stage}, stage)
    except Gpt1Error:
        raise
    except Exception as err:  # the store is away: the stage checks it and opens its own run
        log.warning("stage %s: no flow-side run (%s)", stage, str(err).strip()[:200])
        yield None
        return
    with ended(Run(client, run_id)):
        yield run_id


def record_stage(
    params: Params, run_id: str, metrics_files: list[Path], tags: Mapping[str, str]
) -> None:
    """Log a finished stage's metrics JSON files (numeric leaves + the files) and tags; what
    the store does not take becomes pending records for `gpt1 relog`."""
    run = Run(store.client(params), run_id)
    values: dict[str, float] = {}
    for path in metrics_files:
        if path.is_file():
            run.log_artifact(path, "metrics")
            values.update(numeric(records.read_scores_file(path) or {}))
    run.set_tags(dict(tags))
    run.on_metrics(0, values)
    run.flush()


def discard_run(params: Params, run_id: str) -> None:
    """Delete a finished stage run in which nothing ran (DVC found the stage up to date): a
    re-run of cached stages leaves no new runs. A store that is away keeps it (logged)."""
    try:
        store.client(params).delete_run(run_id)
    except Exception as err:  # the store went away: an extra run is better than a failed flow
        log.warning("could not delete the run %s of an unchanged stage (%s)", run_id,
                    str(err).strip()[:200])


def run_url(params: Params, run_id: str) -> str:
    """Link to a run in the MLflow UI at params.tracking.ui_url."""
    run = store.client(params).get_run(run_id)
    base = params.tracking.ui_url.rstrip("/")
    return f"{base}/#/experiments/{run.info.experiment_id}/runs/{run_id}"


def experiment_url(params: Params) -> str:
    """Link to the runs table of experiment params.tracking.experiment in the MLflow UI (the
    UI's own home page is its getting-started page); the experiments list until that
    experiment exists, or when the store does not answer."""
    base = params.tracking.ui_url.rstrip("/")
    try:
        experiment = store.client(params).get_experiment_by_name(params.tracking.experiment)
    except Exception:  # the store is away: the list is still a page of runs' experiments
        experiment = None
    if experiment is None:
        return f"{base}/#/experiments"
    return f"{base}/#/experiments/{experiment.experiment_id}/runs"


def child_runs(params: Params, parent_run_id: str) -> list[dict[str, Any]]:
    """Nested runs of a parent run: [{"run_id", "stage", "status", "metrics"}], oldest first."""
    client = store.client(params)
    parent = client.get_run(parent_run_id)
    runs = client.search_runs(
        [parent.info.experiment_id],
        filter_string=f"tags.mlflow.parentRunId = '{parent_run_id}'",
        order_by=["attributes.start_time ASC"],
    )
    return [
        {
            "run_id": r.info.run_id,
            "stage": r.data.tags.get("gpt1.stage", r.info.run_name),
            "status": r.info.status,
            "metrics": dict(r.data.metrics),
        }
        for r in runs
    ]
