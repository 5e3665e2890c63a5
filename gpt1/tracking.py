"""MLflow at the edge: the only module importing mlflow (ruff TID251).

Stages wrap their work in `start_run(stage, params)` and hand the yielded `on_metrics(step,
metrics)` sink to their loops; loops never import mlflow. The Prefect flow opens one parent run
per pipeline run (`pipeline_run`) and passes its id to the stage subprocesses in
$GPT1_PARENT_RUN_ID, so every stage becomes a nested run; under `dvc repro` the stages of one
invocation share a parent run too (`_repro_parent`). A stage run carries only the params
sections its dvc.yaml stage declares (the full config is the `config.json` artifact), the git
commit and the DVC stage as tags. Step metrics go through MLflow's async logging. All of it is a
no-op when params.tracking.enabled is false. The metrics JSON files stay the record; MLflow is
a view.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from gpt1.config import Params
from gpt1.errors import Gpt1Error

if TYPE_CHECKING:
    from mlflow import MlflowClient
    from mlflow.utils.async_logging.run_operations import RunOperations

log = logging.getLogger(__name__)

PARENT_ENV = "GPT1_PARENT_RUN_ID"
"""Environment variable carrying the parent (pipeline) run id to stage subprocesses."""
STAGE_RUN_ENV = "GPT1_RUN_ID"
"""Environment variable carrying the stage's own run, opened by the flow: the stage's outermost
`start_run` logs into it instead of creating one."""

STAGE_ENV = "GPT1_STAGE"
"""The pipeline stage this process runs (set by `python -m gpt1 <stage>`); DVC's own $DVC_STAGE
(e.g. finetune@cola) wins when set."""

MetricsSink = Callable[[int, dict[str, float]], None]

# MLflow limits per log_batch call and per param value.
_MAX_BATCH_METRICS = 1000
_MAX_BATCH_PARAMS = 100
_MAX_PARAM_CHARS = 6000
# Experiment tag read by the MLflow 3 UI: open on the runs table, not the GenAI traces overview.
_EXPERIMENT_KIND = ("mlflow.experimentKind", "custom_model_development")


def _discard(step: int, metrics: dict[str, float]) -> None:
    """The sink handed out when tracking is disabled."""


def repo_root(start: Path | None = None) -> Path:
    """The nearest directory at or above `start` (default cwd) holding dvc.yaml or .dvc/."""
    here = (start or Path.cwd()).resolve()
    for d in (here, *here.parents):
        if (d / "dvc.yaml").exists() or (d / ".dvc").is_dir():
            return d
    return here


def tracking_uri(params: Params) -> str:
    """params.tracking.uri, else $MLFLOW_TRACKING_URI, else sqlite:///<repo>/mlflow.db.

    Always absolute for sqlite: MLflow's own default depends on the cwd and falls back to the
    deprecated file store when ./mlruns exists.
    """
    uri = params.tracking.uri or os.environ.get("MLFLOW_TRACKING_URI")
    if not uri:
        return f"sqlite:///{repo_root() / 'mlflow.db'}"
    prefix = "sqlite:///"
    if uri.startswith(prefix) and not uri.startswith(prefix + "/"):
        return f"{prefix}{repo_root() / uri[len(prefix):]}"
    if "://" not in uri or uri.startswith("file:"):
        raise Gpt1Error(
            f"tracking URI {uri!r} is the deprecated MLflow file store; use sqlite:/// or http://",
            "MLFLOW_TRACKING_URI" if not params.tracking.uri else "tracking.uri",
        )
    return uri


def flatten(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"model": {"n_layer": 12}} -> {"model.n_layer": 12}; lists and None stay leaves."""
    out: dict[str, Any] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            out.update(flatten(value, name + "."))
        else:
            out[name] = value
    return out


@dataclass
class _Run:
    """One open MLflow run; step metrics are queued with MLflow's async logging (which batches
    them in a background thread) and waited for when the run closes."""

    client: MlflowClient
    run_id: str
    pending: list[RunOperations] = field(default_factory=list)

    def on_metrics(self, step: int, metrics: dict[str, float]) -> None:
        from mlflow.entities import Metric

        stamp = int(time.time() * 1000)
        batch = [Metric(k, float(v), stamp, int(step)) for k, v in metrics.items()]
        for i in range(0, len(batch), _MAX_BATCH_METRICS):
            op = self.client.log_batch(self.run_id, metrics=batch[i : i + _MAX_BATCH_METRICS],
                                       synchronous=False)
            if op is not None:
                self.pending.append(op)

    def flush(self) -> None:
        for op in self.pending:
            op.wait()
        self.pending = []


_ACTIVE: list[_Run] = []


def _client(params: Params) -> MlflowClient:
    from mlflow import MlflowClient

    return MlflowClient(tracking_uri=tracking_uri(params))


def _artifact_root(uri: str) -> str | None:
    """Artifacts of a sqlite store go beside the database, not into the cwd's ./mlruns."""
    prefix = "sqlite:///"
    return (Path(uri[len(prefix) :]).parent / "mlruns").as_uri() if uri.startswith(prefix) else None


def _experiment_id(client: MlflowClient, name: str) -> str:
    exp = client.get_experiment_by_name(name)
    if exp is not None:
        if exp.tags.get(_EXPERIMENT_KIND[0]) != _EXPERIMENT_KIND[1]:
            client.set_experiment_tag(exp.experiment_id, *_EXPERIMENT_KIND)
        return str(exp.experiment_id)
    root = _artifact_root(client.tracking_uri)
    try:
        return str(client.create_experiment(name, f"{root}/{name}" if root else None,
                                            tags=dict([_EXPERIMENT_KIND])))
    except Exception:  # created concurrently by another stage: read it back
        exp = client.get_experiment_by_name(name)
        if exp is None:
            raise
        return str(exp.experiment_id)


def stage_name() -> str | None:
    """The DVC stage address this process runs ($DVC_STAGE, else $GPT1_STAGE), if any."""
    return os.environ.get("DVC_STAGE") or os.environ.get(STAGE_ENV)


def stage_sections(stage: str | None) -> list[str] | None:
    """The params sections dvc.yaml declares for `stage` (an address such as finetune@cola),
    None when there is no such stage (the run then logs every section)."""
    dvc_yaml = repo_root() / "dvc.yaml"
    if stage is None or not dvc_yaml.is_file():
        return None
    stages = (yaml.safe_load(dvc_yaml.read_text(encoding="utf-8")) or {}).get("stages", {})
    entry = stages.get(stage.split("@")[0])
    if not isinstance(entry, dict):
        return None
    entry = entry.get("do", entry)  # foreach stages nest their body under `do`
    return [p for p in entry.get("params", []) if isinstance(p, str)]


def git_commit() -> str | None:
    """HEAD of the repo the run comes from (None outside git)."""
    proc = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo_root(), capture_output=True,
                          text=True, check=False)
    return proc.stdout.strip() if proc.returncode == 0 else None


def _source_tags(
    params: Params, stage: str | None, sections: Mapping[str, Any]
) -> dict[str, str]:
    """Git commit (MLflow's Source column), DVC stage address and a hash of its params."""
    from mlflow.utils.mlflow_tags import MLFLOW_GIT_COMMIT

    tags = {"gpt1.config_hash": params.digest()}
    commit = git_commit()
    if commit:
        tags[MLFLOW_GIT_COMMIT] = commit
    if stage:
        blob = json.dumps({"stage": stage, "params": sections}, sort_keys=True).encode()
        tags.update({"dvc.stage": stage, "dvc.stage_hash": hashlib.sha256(blob).hexdigest()[:12]})
    return tags


def _log_params(client: MlflowClient, run_id: str, values: Mapping[str, Any]) -> None:
    from mlflow.entities import Param

    items = [
        Param(k, (v if isinstance(v, str) else json.dumps(v))[:_MAX_PARAM_CHARS])
        for k, v in sorted(flatten(values).items())
    ]
    for i in range(0, len(items), _MAX_BATCH_PARAMS):
        client.log_batch(run_id, params=items[i : i + _MAX_BATCH_PARAMS])


def _get_run(client: MlflowClient, params: Params, run_id: str, source: str) -> Any:
    from mlflow.exceptions import MlflowException

    try:
        return client.get_run(run_id)
    except MlflowException:
        raise Gpt1Error(f"no MLflow run {run_id!r} in {tracking_uri(params)}", source) from None


def _open_run(
    client: MlflowClient, params: Params, name: str, parent: str | None, tags: dict[str, str],
    stage: str | None,
) -> str:
    """Create a run; a stage run gets its stage's params sections as params, a pipeline run
    (stage None) none; both get the full config as the `config.json` artifact."""
    from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID, MLFLOW_RUN_NAME

    if parent:
        experiment_id = _get_run(client, params, parent, PARENT_ENV).info.experiment_id
        tags = {**tags, MLFLOW_PARENT_RUN_ID: parent}
    else:
        experiment_id = _experiment_id(client, params.tracking.experiment)
    config = params.as_dict()
    names = stage_sections(stage) if stage else []
    own = config if names is None else {k: config[k] for k in names if k in config}
    tags = {**tags, **_source_tags(params, stage, own), MLFLOW_RUN_NAME: name}
    run_id = str(client.create_run(experiment_id, run_name=name, tags=tags).info.run_id)
    _log_params(client, run_id, own)
    client.log_dict(run_id, config, "config.json")
    return run_id


def _active_run_id() -> str | None:
    """The innermost run open in this process: ours, else one opened with mlflow.start_run."""
    if _ACTIVE:
        return _ACTIVE[-1].run_id
    import mlflow

    active = mlflow.active_run()
    return None if active is None else str(active.info.run_id)


@contextlib.contextmanager
def _ended(client: MlflowClient, run_id: str) -> Iterator[None]:
    """End the run FINISHED, or FAILED / KILLED when the block raises."""
    status = "FAILED"
    try:
        yield
        status = "FINISHED"
    except KeyboardInterrupt:
        status = "KILLED"
        raise
    finally:
        client.set_terminated(run_id, status)


@contextlib.contextmanager
def _open(
    params: Params, name: str, parent: str | None, tags: dict[str, str], attach: str | None,
    stage: str | None = None,
) -> Iterator[_Run]:
    """Create (or attach to) a run and make it the innermost open one while the block runs.

    A created run is ended by the block; an attached one is left to whoever opened it.
    """
    client = _client(params)
    if attach:
        _get_run(client, params, attach, STAGE_RUN_ENV)
    run_id = attach or _open_run(client, params, name, parent, tags, stage)
    run = _Run(client, run_id)
    log.info("MLflow run %s (%s) in %s", run.run_id, name, tracking_uri(params))
    _ACTIVE.append(run)
    try:
        with contextlib.nullcontext() if attach else _ended(client, run_id):
            try:
                yield run
            finally:
                run.flush()  # the queued metrics land before the run ends
    finally:
        _ACTIVE.remove(run)


@contextlib.contextmanager
def start_run(stage: str, params: Params) -> Iterator[MetricsSink]:
    """Open an MLflow run for one stage and yield its `on_metrics(step, metrics)` sink.

    Nests under the run open in this process, else logs into $GPT1_RUN_ID (the stage run the
    flow opened), else nests under $GPT1_PARENT_RUN_ID, else is a top-level run. A created run
    gets the flattened params and ends FINISHED, or FAILED / KILLED when the block raises.
    Under `dvc repro` with none of these, it nests under the invocation's parent run.
    Step metrics are logged asynchronously and waited for on exit.
    """
    if not params.tracking.enabled:
        yield _discard
        return
    active = _active_run_id()
    where = stage_name() or stage  # the DVC stage whose params sections the run logs
    attach = None if active else os.environ.get(STAGE_RUN_ENV)
    parent = active or os.environ.get(PARENT_ENV)
    if not (attach or parent) and os.environ.get("DVC_STAGE"):
        with _repro_parent(params) as repro:
            with _open(params, stage, repro, {"gpt1.stage": stage}, None, where) as run:
                yield run.on_metrics
        return
    with _open(params, stage, parent, {"gpt1.stage": stage}, attach, where) as run:
        yield run.on_metrics


def _proc_stat(pid: int) -> tuple[int, str] | None:
    """(parent pid, start time in clock ticks) of a process, from /proc (Linux)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8")
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) "
    return int(fields[1]), fields[19]


def repro_invocation() -> str | None:
    """`<pid>-<start time>` of the `dvc` process that runs this stage (the nearest ancestor
    whose command line runs dvc): the same for every stage of one `dvc repro` / `dvc exp run`,
    and never reused. None when there is no such ancestor or no /proc."""
    pid = os.getppid()
    while pid > 1:
        stat = _proc_stat(pid)
        if stat is None:
            return None
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            return None
        if any(Path(a.decode(errors="replace")).name == "dvc" for a in argv[:2]):
            return f"{pid}-{stat[1]}"
        pid = stat[0]
    return None


@contextlib.contextmanager
def _repro_parent(params: Params) -> Iterator[str | None]:
    """The parent run shared by the stages of one `dvc repro` invocation (None without one).

    The first stage creates it; its id lives in a file keyed by the invocation and the tracking
    URI, created under an exclusive lock so stages running at once (`dvc exp run --jobs`,
    parallel `dvc repro --single-item`) find the same parent. The parent is RUNNING while a
    stage runs and ends with the last stage's status.
    """
    key = repro_invocation()
    if key is None:
        yield None
        return
    uri = tracking_uri(params)
    folder = Path(tempfile.gettempdir()) / f"gpt1-repro-{os.getuid()}"
    folder.mkdir(exist_ok=True)
    record = folder / (hashlib.sha256(f"{uri}|{key}".encode()).hexdigest()[:16] + ".json")
    client = _client(params)
    with (folder / "lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        parent = json.loads(record.read_text())["run_id"] if record.is_file() else None
        if parent is None:
            parent = _open_run(client, params, "dvc repro", None,
                               {"gpt1.pipeline": "dvc repro", "gpt1.repro": key}, None)
            record.write_text(json.dumps({"run_id": parent, "tracking_uri": uri}))
        else:
            client.update_run(parent, status="RUNNING")
    with _ended(client, parent):
        yield parent


def log_artifact(path: str | Path, artifact_path: str | None = None) -> None:
    """Copy a file or directory into the innermost open run's artifacts (no-op without one)."""
    if not _ACTIVE:
        return
    run, path = _ACTIVE[-1], Path(path)
    if not path.exists():
        raise Gpt1Error("artifact to log does not exist", path)
    if path.is_dir():
        run.client.log_artifacts(run.run_id, str(path), artifact_path or path.name)
    else:
        run.client.log_artifact(run.run_id, str(path), artifact_path)


def log_text(text: str, artifact_file: str) -> None:
    """Store `text` as an artifact file of the innermost open run (no-op without one)."""
    if _ACTIVE:
        _ACTIVE[-1].client.log_text(_ACTIVE[-1].run_id, text, artifact_file)


def log_summary(metrics: Mapping[str, Any]) -> None:
    """Log the numeric leaves of a metrics dict (e.g. the stage's metrics JSON) on the open run.

    Nested keys are joined with "." ({"scores": {"acc": {"mean": .8}}} -> "scores.acc.mean").
    """
    numeric = _numeric(metrics)
    if _ACTIVE and numeric:
        _ACTIVE[-1].on_metrics(0, numeric)


def _numeric(metrics: Mapping[str, Any]) -> dict[str, float]:
    return {
        k: float(v)
        for k, v in flatten(metrics).items()
        if isinstance(v, int | float) and not isinstance(v, bool)
    }


@contextlib.contextmanager
def pipeline_run(name: str, params: Params, tags: Mapping[str, str]) -> Iterator[str | None]:
    """The parent run of one pipeline run; yields its id (None when tracking is disabled).

    Stage runs opened in this process nest under it; put the id in $GPT1_PARENT_RUN_ID of
    stage subprocesses so they nest too. log_artifact / log_summary inside go to this run.
    """
    if not params.tracking.enabled:
        yield None
        return
    with _open(params, name, None, {"gpt1.pipeline": name, **tags}, None) as run:
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
    client = _client(params)
    run_id = _open_run(client, params, stage, parent, {"gpt1.stage": stage}, stage)
    with _ended(client, run_id):
        yield run_id


def record_stage(
    params: Params, run_id: str, metrics_files: list[Path], tags: Mapping[str, str]
) -> None:
    """Log a finished stage's metrics JSON files (numeric leaves + the files) and tags."""
    from mlflow.entities import Metric, RunTag

    client = _client(params)
    stamp = int(time.time() * 1000)
    metrics: list[Metric] = []
    for path in metrics_files:
        if path.is_file():
            client.log_artifact(run_id, str(path), "metrics")
            values = _numeric(json.loads(path.read_text(encoding="utf-8")))
            metrics += [Metric(k, v, stamp, 0) for k, v in values.items()]
    for i in range(0, max(len(metrics), 1), _MAX_BATCH_METRICS):
        client.log_batch(run_id, metrics=metrics[i : i + _MAX_BATCH_METRICS],
                         tags=[RunTag(k, v) for k, v in tags.items()] if i == 0 else [])


def run_url(params: Params, run_id: str) -> str:
    """Link to a run in the MLflow UI at params.tracking.ui_url."""
    run = _client(params).get_run(run_id)
    base = params.tracking.ui_url.rstrip("/")
    return f"{base}/#/experiments/{run.info.experiment_id}/runs/{run_id}"


def child_runs(params: Params, parent_run_id: str) -> list[dict[str, Any]]:
    """Nested runs of a parent run: [{"run_id", "stage", "status", "metrics"}], oldest first."""
    client = _client(params)
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


_PYFUNC_CODE = (
    "# MLflow models-from-code entry: the model is rebuilt from its files, never unpickled.\n"
    "import mlflow.models\n"
    "from gpt1.tracking import pyfunc_model\n"
    "mlflow.models.set_model(pyfunc_model())\n"
)


def pyfunc_model() -> Any:
    """The mlflow PythonModel serving a model logged by `log_model`: a pre-trained LM scores
    each `text` (its mean next-token loss, nats); a fine-tuned model returns `label` and
    `probabilities` (JSON) for `text` (+ optional `text_b`, `choices` as a JSON list), or a
    `score` for a regression task. Inputs are raw text, standardised as in training."""
    import mlflow.pyfunc
    import pandas as pd

    class Gpt1Model(mlflow.pyfunc.PythonModel):  # type: ignore[misc,name-defined]
        loaded: Any

        def load_context(self, context: Any) -> None:
            from gpt1 import checkpoint, generate, predict

            model_dir, tok_dir = context.artifacts["model"], context.artifacts["tokenizer"]
            self.task = checkpoint.read_model_meta(Path(model_dir)).get("task")
            if self.task:
                self.loaded = predict.load_task_model(model_dir, tok_dir)
            else:
                self.loaded = generate.load_lm(model_dir, tok_dir)

        def predict(self, context: Any, model_input: pd.DataFrame,
                    params: Any = None) -> pd.DataFrame:
            from gpt1 import generate, predict

            frame = pd.DataFrame(model_input)
            texts = [str(t) for t in frame["text"]]
            if not self.task:
                lm, tok = self.loaded
                return pd.DataFrame({"loss": generate.score_texts(lm, tok, texts)})
            model, tok, spec, saved = self.loaded
            rows = [{"text_a": t, "text_b": str(frame.get("text_b", [""] * len(texts))[i] or ""),
                     "choices": json.loads(frame["choices"][i]) if "choices" in frame else []}
                    for i, t in enumerate(texts)]
            preds = predict.classify(model, tok, spec, saved, rows)
            if spec.regression:
                return pd.DataFrame({"score": [p["score"] for p in preds]})
            return pd.DataFrame({"label": [p["label"] for p in preds],
                                 "probabilities": [json.dumps(p["probabilities"]) for p in preds]})

    return Gpt1Model()


def log_model(model_dir: str | Path, tokenizer_dir: str | Path, registered_name: str,
              example: list[str], outputs: dict[str, str]) -> str | None:
    """Log a saved gpt1 model (model.json + model.safetensors of model_dir, and the tokenizer
    files) as an MLflow pyfunc model of the innermost open run, with a signature (input
    `text`; `outputs` column -> type) and an input example, and register it as
    `registered_name`. Returns the model URI (None when no run is open)."""
    if not _ACTIVE:
        return None
    import mlflow
    import pandas as pd
    from mlflow.models import ModelSignature
    from mlflow.types import ColSpec, Schema

    from gpt1 import checkpoint

    run = _ACTIVE[-1]
    signature = ModelSignature(
        inputs=Schema([ColSpec("string", "text")]),
        outputs=Schema([ColSpec(kind, name) for name, kind in outputs.items()]))
    with tempfile.TemporaryDirectory() as tmp:
        files = Path(tmp) / "model"
        files.mkdir()
        for name in (checkpoint.MODEL_META, checkpoint.MODEL_FILE):  # not the checkpoints
            shutil.copy2(Path(model_dir) / name, files / name)
        code = Path(tmp) / "gpt1_pyfunc.py"
        code.write_text(_PYFUNC_CODE, encoding="utf-8")
        mlflow.set_tracking_uri(run.client.tracking_uri)
        with mlflow.start_run(run_id=run.run_id):
            info = mlflow.pyfunc.log_model(
                name="model", python_model=str(code),
                artifacts={"model": str(files), "tokenizer": str(tokenizer_dir)},
                signature=signature, input_example=pd.DataFrame({"text": example}),
                registered_model_name=registered_name)
    log.info("MLflow model %s registered as %s", info.model_uri, registered_name)
    return str(info.model_uri)
