"""Creating a run: its experiment, tags (lineage), the params sections of its stage, and the
full config as the `config.json` artifact. Used when a stage opens its run and when
`gpt1 relog` creates a run the store was away for."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpt1.config import Params
from gpt1.errors import Gpt1Error
from gpt1.tracking import lineage

if TYPE_CHECKING:
    from mlflow import MlflowClient

# MLflow limits per log_batch call and per param value.
_MAX_BATCH_PARAMS = 100
_MAX_PARAM_CHARS = 6000
# Experiment tag read by the MLflow 3 UI: open on the runs table, not the GenAI traces overview.
_EXPERIMENT_KIND = ("mlflow.experimentKind", "custom_model_development")


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


def _log_params(client: MlflowClient, run_id: str, values: Mapping[str, Any]) -> None:
    from mlflow.entities import Param

    items = [
        Param(k, (v if isinstance(v, str) else json.dumps(v))[:_MAX_PARAM_CHARS])
        for k, v in sorted(flatten(values).items())
    ]
    for i in range(0, len(items), _MAX_BATCH_PARAMS):
        client.log_batch(run_id, params=items[i : i + _MAX_BATCH_PARAMS])


def get_run(client: MlflowClient, run_id: str, source: str) -> Any:
    """The run `run_id` (Gpt1Error naming `source`, where the id came from, when absent)."""
    from mlflow.exceptions import MlflowException

    try:
        return client.get_run(run_id)
    except MlflowException:
        raise Gpt1Error(f"no MLflow run {run_id!r} in {client.tracking_uri}", source) from None


def run_spec(params: Params, name: str, parent: str | None, tags: dict[str, str],
             stage: str | None) -> dict[str, Any]:
    """What creating a run logs: a stage run gets its stage's params sections as params, a
    pipeline run (stage None) none; both get the full config as the `config.json` artifact."""
    from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID, MLFLOW_RUN_NAME

    config = params.as_dict()
    names = lineage.stage_sections(stage) if stage else []
    own = config if names is None else {k: config[k] for k in names if k in config}
    tags = {**tags, **lineage.source_tags(params.digest(), stage, own), MLFLOW_RUN_NAME: name}
    if parent:
        tags[MLFLOW_PARENT_RUN_ID] = parent
    return {"experiment": params.tracking.experiment, "parent": parent, "name": name,
            "tags": tags, "params": own, "config": config}


def create_run(client: MlflowClient, spec: dict[str, Any]) -> str:
    """Create the run `spec` (from run_spec) describes; returns its id."""
    if spec["parent"]:
        experiment_id = get_run(client, spec["parent"], lineage.PARENT_ENV).info.experiment_id
    else:
        experiment_id = _experiment_id(client, spec["experiment"])
    run_id = str(client.create_run(experiment_id, run_name=spec["name"],
                                   tags=spec["tags"]).info.run_id)
    _log_params(client, run_id, spec["params"])
    client.log_dict(run_id, spec["config"], "config.json")
    return run_id


def open_run(
    client: MlflowClient, params: Params, name: str, parent: str | None, tags: dict[str, str],
    stage: str | None,
) -> str:
    """Create a run (see run_spec) and return its id."""
    return create_run(client, run_spec(params, name, parent, tags, stage))
