"""MLflow at the edge: the only package importing mlflow (ruff TID251).

- store:   which tracking URI, whether the store answers (checked before a stage starts), a
           client with bounded HTTP retries
- lineage: where a run comes from: DVC stage and params sections, git commit, the parent run
           of a `dvc repro` invocation
- create:  creating a run: experiment, lineage tags, the stage's params sections, config
- runs:    a stage's run: open, metrics sink, artifacts, end; a store lost mid-stage becomes
           pending records instead of a failed stage
- pending: the pending records of runs whose store went away
- relog:   `gpt1 relog`, which logs the pending records later
- flow:    the Prefect flow's side: pipeline and stage runs, the read-back of their children
- pyfunc:  a saved model as an MLflow pyfunc model, logged and registered

Callers use the names below (`from gpt1 import tracking; tracking.start_run(...)`).
"""

from gpt1.tracking.create import flatten
from gpt1.tracking.flow import (
    child_runs,
    discard_run,
    experiment_url,
    pipeline_run,
    record_stage,
    run_url,
    stage_run,
)
from gpt1.tracking.lineage import (
    PARENT_ENV,
    STAGE_RUN_ENV,
    git_commit,
    repro_invocation,
    stage_sections,
)
from gpt1.tracking.pyfunc import download_model, log_model, pyfunc_model
from gpt1.tracking.runs import (
    MetricsSink,
    child_scope,
    log_artifact,
    log_datasets,
    log_summary,
    log_text,
    stage_scope,
    start_run,
)
from gpt1.tracking.store import check_store, tracking_uri

__all__ = [
    "PARENT_ENV", "STAGE_RUN_ENV", "MetricsSink", "check_store", "child_runs",
    "child_scope",
    "discard_run", "download_model", "experiment_url",
    "flatten", "git_commit", "log_artifact", "log_datasets", "log_model", "log_summary", "log_text",
    "pipeline_run", "pyfunc_model", "record_stage", "repro_invocation", "run_url",
    "stage_run", "stage_scope", "stage_sections", "start_run", "tracking_uri",
]
