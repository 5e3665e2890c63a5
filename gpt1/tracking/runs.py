"""MLflow run lifecycle: open a stage's run, feed it metrics and artifacts, end it.

Stages wrap their work in `start_run(stage, params, context=context)` and hand the yielded
`on_metrics(step, metrics)` sink to their loops; the stage context (gpt1.records.StageContext)
carries the stage's own run, opened before its work (`stage_scope`), which its first
`start_run` logs into; loops never import mlflow. A run nests under the run open in
this process, the flow's runs ($GPT1_RUN_ID, $GPT1_PARENT_RUN_ID) or the `dvc repro`
invocation's parent. Step metrics go through MLflow's async logging. All of it is a no-op when
params.tracking.enabled is false. The metrics JSON files stay the record; MLflow is a view.

Once a run is open, the store going away never fails the stage: the first failed call prints
one warning, and that call and every later one are kept as pending records (gpt1.tracking.
pending) for `gpt1 relog`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import time
import uuid
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpt1.config import Params
from gpt1.errors import Gpt1Error
from gpt1.progress import MetricsSink
from gpt1.tracking import lineage, store
from gpt1.tracking.create import create_run, flatten, get_run, open_run, run_spec
from gpt1.tracking.pending import RELOG_COMMAND, Pending

if TYPE_CHECKING:
    from mlflow import MlflowClient
    from mlflow.utils.async_logging.run_operations import RunOperations

log = logging.getLogger(__name__)


# MLflow's limit of metrics per log_batch call.
MAX_BATCH_METRICS = 1000


def _discard(step: int, metrics: dict[str, float]) -> None:
    """The sink handed out when tracking is disabled."""


def numeric(metrics: Mapping[str, Any]) -> dict[str, float]:
    """The numeric leaves of a metrics dict, flattened."""
    return {
        k: float(v)
        for k, v in flatten(metrics).items()
        if isinstance(v, int | float) and not isinstance(v, bool)
    }


@dataclass
class Run:
    """One open MLflow run. Step metrics are queued with MLflow's async logging (which batches
    them in a background thread) and waited for when the run closes. Every call goes through
    `attempt`: after the first failure the run is `lost` and calls become pending records."""

    client: MlflowClient
    run_id: str
    stage: str | None = None
    """The dvc.yaml stage whose own run this is (`stage_scope`): runs opened inside it log
    that stage's params sections."""
    queued: list[tuple[RunOperations, list[list[Any]]]] = field(default_factory=list)
    lost: Pending | None = None
    taken: bool = False
    """Whether a `start_run` given it (a stage context's run) logs into it already."""

    def attempt(self, op: dict[str, Any] | Callable[[Pending], dict[str, Any]],
                call: Callable[[], Any]) -> None:
        """Run `call`, or keep `op` as a pending record when the store is (or goes) away; a
        callable `op` builds the record from the pending folder (to keep files in it)."""
        if self.lost is None:
            try:
                call()
                return
            except Exception as err:  # any failure of the store: the stage goes on
                self.lose(err)
        assert self.lost is not None
        self.lost.add(op(self.lost) if callable(op) else op)

    def lose(self, err: Exception) -> None:
        """The store failed: from now on this run's calls are pending records. The first
        run of the process to lose its store says so in one warning."""
        self.lost = Pending.of(self.client.tracking_uri, self.run_id)
        if _WARNED:
            return
        _WARNED.append(self.client.tracking_uri)
        first = next(iter(str(err).strip().splitlines()), type(err).__name__)
        log.warning("tracking store %s lost (%s); the stage goes on and keeps its outputs, "
                    "what it could not log is in %s; re-log it with `%s`",
                    self.client.tracking_uri, first[:200], self.lost.folder, RELOG_COMMAND)

    def on_metrics(self, step: int, metrics: dict[str, float]) -> None:
        stamp = int(time.time() * 1000)
        rows = [[k, float(v), stamp, int(step)] for k, v in metrics.items()]
        for i in range(0, len(rows), MAX_BATCH_METRICS):
            self._queue(rows[i : i + MAX_BATCH_METRICS])

    def _queue(self, rows: list[list[Any]]) -> None:
        from mlflow.entities import Metric

        def submit() -> None:
            op = self.client.log_batch(self.run_id, metrics=[Metric(*r) for r in rows],
                                       synchronous=False)
            if op is not None:
                self.queued.append((op, rows))

        self.attempt({"op": "metrics", "metrics": rows}, submit)

    def flush(self) -> None:
        """Wait for the queued metrics; those that did not land become pending records."""
        queued, self.queued = self.queued, []
        for op, rows in queued:
            self.attempt({"op": "metrics", "metrics": rows}, op.wait)

    def log_artifact(self, path: Path, artifact_path: str | None) -> None:
        def call() -> None:
            if path.is_dir():
                self.client.log_artifacts(self.run_id, str(path), artifact_path or path.name)
            else:
                self.client.log_artifact(self.run_id, str(path), artifact_path)

        def record(lost: Pending) -> dict[str, Any]:
            under = artifact_path or (path.name if path.is_dir() else None)
            return {"op": "artifact", "file": lost.keep(path), "artifact_path": under}

        self.attempt(record, call)

    def set_tags(self, tags: dict[str, str]) -> None:
        from mlflow.entities import RunTag

        if tags:
            self.attempt({"op": "tags", "tags": tags}, lambda: self.client.log_batch(
                self.run_id, tags=[RunTag(k, v) for k, v in tags.items()]))

    def end(self, status: str) -> None:
        self.attempt({"op": "end", "status": status},
                     lambda: self.client.set_terminated(self.run_id, status))


_WARNED: list[str] = []
"""The store whose loss this outermost run warned about (one warning per outermost run)."""
_ACTIVE: list[Run] = []
UNOPENED = "unopened-"
"""Prefix of the local id of a run that could not be created: `gpt1 relog` creates it."""


def active() -> Run | None:
    """The innermost run this process opened with `start_run` / `pipeline_run`, if any."""
    return _ACTIVE[-1] if _ACTIVE else None


def _created(client: MlflowClient, spec: dict[str, Any], within: Run | None) -> Run:
    """The run of `spec`; when the store is away (or the enclosing run `within` lost it), a
    run known only by a local id, whose creation is its first pending record."""
    local = f"{UNOPENED}{uuid.uuid4().hex}"
    if within is not None and within.lost is not None:
        run = Run(client, local, lost=Pending.of(client.tracking_uri, local))
    else:
        try:
            return Run(client, create_run(client, spec))
        except Gpt1Error:
            raise
        except Exception as err:  # the store went away after the stage started
            run = Run(client, local)
            run.lose(err)
    assert run.lost is not None
    run.lost.add({"op": "create", **spec})
    return run


def _active_run_id() -> str | None:
    """The innermost run open in this process: ours, else one opened with mlflow.start_run."""
    if _ACTIVE:
        return _ACTIVE[-1].run_id
    import mlflow

    run = mlflow.active_run()
    return None if run is None else str(run.info.run_id)


@contextlib.contextmanager
def ended(run: Run) -> Iterator[None]:
    """End the run FINISHED, or FAILED / KILLED when the block raises."""
    status = "FAILED"
    try:
        yield
        status = "FINISHED"
    except KeyboardInterrupt:
        status = "KILLED"
        raise
    finally:
        run.end(status)


@contextlib.contextmanager
def open_active(
    params: Params, name: str, parent: str | None, tags: dict[str, str], attach: str | None,
    stage: str | None = None,
) -> Iterator[Run]:
    """Create (or attach to) a run and make it the innermost open one while the block runs.

    A created run is ended by the block; an attached one is left to whoever opened it.
    """
    client = store.client(params)
    if not _ACTIVE:
        _WARNED.clear()  # one warning per outermost run
    if attach:
        get_run(client, attach, lineage.STAGE_RUN_ENV)
        run = Run(client, attach)
        run.set_tags(lineage.context_tags())  # the stage's own process is the run's source
    else:
        run = _created(client, run_spec(params, name, parent, tags, stage), active())
    log.info("MLflow run %s (%s) in %s", run.run_id, name, client.tracking_uri)
    _ACTIVE.append(run)
    try:
        with contextlib.nullcontext() if attach else ended(run):
            try:
                yield run
            finally:
                run.flush()  # the queued metrics land before the run ends
    finally:
        _ACTIVE.remove(run)


def _stage_of_run(where: str | None) -> str | None:
    """The DVC stage whose params sections a run logs: DVC's own $DVC_STAGE (an address such as
    finetune@cola), else `where`, else the stage of the stage run open in this process."""
    enclosing = next((run.stage for run in reversed(_ACTIVE) if run.stage), None)
    return os.environ.get("DVC_STAGE") or where or enclosing


@contextlib.contextmanager
def start_run(stage: str, params: Params, where: str | None = None, *, context: Any = None
              ) -> Iterator[MetricsSink]:
    """Open an MLflow run for one stage and yield its `on_metrics(step, metrics)` sink.

    `context` (gpt1.records.StageContext): its `run`, open since the stage started
    (`stage_scope`) or a candidate's (`child_scope`), is the run the first `start_run` given
    it logs into, instead of opening one.

    Nests under the run open in this process, else logs into $GPT1_RUN_ID (the stage run the
    flow opened), else nests under $GPT1_PARENT_RUN_ID, else is a top-level run. A created run
    gets the flattened params (the sections of dvc.yaml's stage `where`: `_stage_of_run`) and
    ends FINISHED, or FAILED / KILLED when the block raises. Under `dvc repro` with none of
    these, it nests under the invocation's parent run. Step metrics are logged asynchronously
    and waited for on exit.
    """
    if not params.tracking.enabled:
        yield _discard
        return
    own = None if context is None else context.run
    if own is not None and not own.taken and _ACTIVE and _ACTIVE[-1] is own:
        own.taken = True
        yield own.on_metrics  # the stage's own run, open since the stage started
        return
    stage = os.environ.get("DVC_STAGE") or stage  # one run name per stage on every path
    running = _active_run_id()
    where = _stage_of_run(where) or stage  # the DVC stage whose params sections the run logs
    attach = None if running else os.environ.get(lineage.STAGE_RUN_ENV)
    parent = running or os.environ.get(lineage.PARENT_ENV)
    if not (attach or parent) and os.environ.get("DVC_STAGE"):
        with _repro_parent(params) as repro:
            with open_active(params, stage, repro, {"gpt1.stage": stage}, None, where) as run:
                yield run.on_metrics
        return
    with open_active(params, stage, parent, {"gpt1.stage": stage}, attach, where) as run:
        yield run.on_metrics


@contextlib.contextmanager
def stage_scope(name: str, params: Params, stage: str) -> Iterator[Run | None]:
    """The run `name` of dvc.yaml's stage `stage`, opened before its work starts (so the run's
    duration is the stage's) and ended with it; yielded (None with tracking off) for the stage
    context (gpt1.records.StageContext.run), whose first `start_run` logs into it."""
    with start_run(name, params, stage):
        run = _ACTIVE[-1] if params.tracking.enabled and _ACTIVE else None
        if run is not None:
            run.stage = stage
        yield run


@contextlib.contextmanager
def child_scope(name: str, params: Params, tags: Mapping[str, str] | None = None,
                context: Any = None) -> Iterator[Any]:
    """A child run named `name` of the run open now (one candidate of a stage that tries
    several, e.g. `lr=0.00025` of an lr pilot), logging `params` (the candidate's own); yields
    the stage context `context` with the child as its run, so the first `start_run` given it
    logs into the child and the stage's run keeps only what the stage itself logs after the
    block (its choice). `context` as it is without tracking, an open run or a context."""
    if not params.tracking.enabled or not _ACTIVE or context is None:
        yield context
        return
    where = _stage_of_run(None) or name
    with open_active(params, name, _ACTIVE[-1].run_id,
                     {"gpt1.stage": where, "gpt1.candidate": name, **(tags or {})},
                     None, where) as run:
        yield dataclasses.replace(context, run=run)


@contextlib.contextmanager
def _repro_parent(params: Params) -> Iterator[str | None]:
    """The parent run shared by the stages of one `dvc repro` invocation (None without one,
    or when the store is away: the stage's run, kept pending, is then a top-level run). It is
    RUNNING while a stage runs and ends with the last stage's status."""
    key = lineage.repro_invocation()
    if key is None:
        yield None
        return
    client = store.client(params)
    try:
        parent = lineage.repro_parent_id(
            client.tracking_uri, key,
            lambda: open_run(client, params, lineage.repro_command(), None,
                             {"gpt1.pipeline": "dvc repro", "gpt1.repro": key}, None),
            lambda run_id: client.update_run(run_id, status="RUNNING"))
    except Gpt1Error:
        raise
    except Exception:  # the store went away: the stage's own run records it
        yield None
        return
    with ended(Run(client, parent)):
        yield parent


def log_artifact(path: str | Path, artifact_path: str | None = None) -> None:
    """Copy a file or directory into the innermost open run's artifacts (no-op without one)."""
    if not _ACTIVE:
        return
    path = Path(path)
    if not path.exists():
        raise Gpt1Error("artifact to log does not exist", path)
    _ACTIVE[-1].log_artifact(path, artifact_path)


def log_text(text: str, artifact_file: str) -> None:
    """Store `text` as an artifact file of the innermost open run (no-op without one)."""
    if _ACTIVE:
        run = _ACTIVE[-1]
        run.attempt({"op": "text", "text": text, "artifact_file": artifact_file},
                    lambda: run.client.log_text(run.run_id, text, artifact_file))


def log_summary(metrics: Mapping[str, Any]) -> None:
    """Log the numeric leaves of a metrics dict (e.g. the stage's metrics JSON) on the open run.

    Nested keys are joined with "." ({"scores": {"acc": {"mean": .8}}} -> "scores.acc.mean").
    """
    values = numeric(metrics)
    if _ACTIVE and values:
        _ACTIVE[-1].on_metrics(0, values)


def log_datasets(name: str, tables: Mapping[str, tuple[Any, str | Path]]) -> None:
    """Log the stage's data as dataset inputs of the innermost open run (no-op without one):
    `tables` maps the context (train, dev, test, ...) to (DataFrame, its file); each becomes
    MLflow dataset `<name>/<context>` with its digest, schema and row count."""
    if not _ACTIVE:
        return
    from mlflow.data.pandas_dataset import from_pandas

    run = _ACTIVE[-1]
    rows = []
    for context, (frame, source) in tables.items():
        with warnings.catch_warnings():  # MLflow's hints on a local file source (two source
            warnings.simplefilter("ignore", UserWarning)  # classes match) and on integer
            entity = from_pandas(frame, source=str(source),  # columns (about model inputs)
                                 name=f"{name}/{context}")._to_mlflow_entity()
        rows.append({"context": context, **{k: getattr(entity, k) for k in DATASET_FIELDS}})
    run.attempt({"op": "datasets", "datasets": rows},
                lambda: run.client.log_inputs(run.run_id, datasets=dataset_inputs(rows)))


DATASET_FIELDS = ("name", "digest", "source_type", "source", "schema", "profile")


def dataset_inputs(rows: list[dict[str, Any]]) -> list[Any]:
    """MLflow DatasetInputs of `log_datasets` rows (also what `gpt1 relog` logs)."""
    from mlflow.entities import Dataset, DatasetInput, InputTag
    from mlflow.utils.mlflow_tags import MLFLOW_DATASET_CONTEXT

    return [DatasetInput(Dataset(**{k: r[k] for k in DATASET_FIELDS}),
                         [InputTag(MLFLOW_DATASET_CONTEXT, r["context"])]) for r in rows]
