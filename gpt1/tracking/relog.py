"""`gpt1 relog`: log what stage runs kept while their tracking store was away.

Replays each run's pending records (gpt1.tracking.pending) into the store and run they were
meant for, in the order they were made, and removes a run's records once all of them landed.
"""

from __future__ import annotations

import argparse
import logging
import shutil
from pathlib import Path
from typing import Any

from gpt1.config import Params
from gpt1.errors import Gpt1Error
from gpt1.tracking import store
from gpt1.tracking.create import create_run
from gpt1.tracking.pending import Pending, all_pending, pending_root

log = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """No options: every run under the pending folder is re-logged."""


def _replay(client: Any, pending: Pending, run_id: str, op: dict[str, Any]) -> None:
    """One pending record into run `run_id`."""
    from mlflow.entities import Metric, RunTag

    kind = op["op"]
    if kind == "metrics":
        client.log_batch(run_id, metrics=[Metric(*row) for row in op["metrics"]])
    elif kind == "artifact":
        path = pending.folder / op["file"]
        if path.is_dir():
            client.log_artifacts(run_id, str(path), op["artifact_path"])
        else:
            client.log_artifact(run_id, str(path), op["artifact_path"])
    elif kind == "tags":
        client.log_batch(run_id, tags=[RunTag(k, v) for k, v in op["tags"].items()])
    elif kind == "text":
        client.log_text(run_id, op["text"], op["artifact_file"])
    elif kind == "model":
        from gpt1.tracking.pyfunc import log_model_files

        log_model_files(client.tracking_uri, run_id, pending.folder / op["model"],
                        pending.folder / op["tokenizer"], op["registered_name"],
                        [e if isinstance(e, dict) else {"text": e} for e in op["example"]],
                        op.get("description", ""))  # records kept before per-task examples
    elif kind == "datasets":
        from gpt1.tracking.runs import dataset_inputs

        client.log_inputs(run_id, datasets=dataset_inputs(op["datasets"]))
    elif kind == "end":
        client.set_terminated(run_id, op["status"])
    else:
        raise Gpt1Error(f"unknown pending record {kind!r}", pending.folder / "ops.jsonl")


def _create(client: Any, spec: dict[str, Any], created: dict[str, str]) -> str:
    """Create a run that was never opened; its parent may be one created earlier here."""
    from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID

    parent = created.get(spec["parent"], spec["parent"])
    tags = {**spec["tags"], **({MLFLOW_PARENT_RUN_ID: parent} if parent else {})}
    return create_run(client, {**spec, "parent": parent, "tags": tags})


def relog_run(pending: Pending, created: dict[str, str]) -> int:
    """Log one run's pending records; returns how many. A run created here is added to
    `created` (local id -> run id). Gpt1Error when the store refuses a record."""
    meta = pending.meta()
    uri, run_id = meta["tracking_uri"], meta["run_id"]
    client = store.client_for(uri)
    ops = pending.ops()
    for done, op in enumerate(ops):
        try:
            if op["op"] == "create":
                created[run_id] = run_id = _create(client, op, created)
                pending.set_meta({**meta, "run_id": run_id})
            else:
                _replay(client, pending, run_id, op)
        except Gpt1Error:
            raise
        except Exception as err:
            pending.set_ops(ops[done:])  # so a second relog logs nothing twice
            check_store(uri, f"run {run_id} from its record {done + 1} on")  # store gone?
            first = next(iter(str(err).strip().splitlines()), type(err).__name__)
            raise Gpt1Error(f"tracking store {uri} refused record {done + 1} of run {run_id} "
                            f"({first[:200]}); run `gpt1 relog` again when it is back",
                            pending.folder) from None
        if op["op"] == "create":
            pending.set_ops(ops[done + 1:])
    shutil.rmtree(pending.folder)
    return len(ops)


def check_store(uri: str, left: str) -> None:
    """One Gpt1Error line, before any request, when the store at `uri` does not answer: no
    client retries (and their warnings) against a server that is down; `left`: what stays
    pending."""
    store.check_uri(uri, uri, remedy=f"{left} kept in "
                    f"{pending_root()}; run `gpt1 relog` again when it is up")


def run(args: argparse.Namespace, params: Params) -> None:
    runs = all_pending()
    if not runs:
        print(f"nothing to re-log ({pending_root()} holds no pending records)")
        return
    for pending in runs:  # every record checked before the first is logged
        pending.ops()
    for uri in sorted({pending.meta()["tracking_uri"] for pending in runs}):
        check_store(uri, "nothing re-logged, every record")
    quiet = logging.getLogger("urllib3")  # a store lost mid-way: one line, not its retries
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    created: dict[str, str] = {}
    try:
        for pending in runs:
            count = relog_run(pending, created)
            print(f"re-logged {count} records of run {pending.folder.name} "
                  f"({Path(pending.folder)})")
    finally:
        quiet.setLevel(level)
