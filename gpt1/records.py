"""Stage records: the files every stage writes under paths.metrics and the report reads.

A record is two JSON files per stage: `<stage>.json` holds the scores only (the DVC metric, so
`dvc metrics show/diff` carry nothing that changes on a re-run with the same outputs) and the
sidecar `<stage>.info.json` the rest (splits, counts, throughput) plus `config_hash` and what
the stage process stamps on it (`wall_seconds`, and `stage_hash`: the hash of the params the
stage declares in dvc.yaml, gpt1.freshness), from the stage process's `StageContext`.
`read_metrics` merges the two back into one dict per stage. A pre-training stage also writes
its validation curve, `<stage>.curve.json` (a list of points, a DVC plot; `<stage>_val.json`
before, still read). Nothing else reads or writes these files.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpt1 import atomic, freshness
from gpt1.config import Params
from gpt1.errors import Gpt1Error
from gpt1.hardware import describe_cpu

Metrics = dict[str, dict[str, Any]]
"""Record stem (e.g. finetune_cola) -> the record, scores and sidecar merged."""

INFO_SUFFIX = ".info.json"
"""The sidecar beside a stage's scores file: what is not a score."""

CURVE_SUFFIX = ".curve.json"
"""A pre-training stage's validation curve beside its record: a list of points, not a record."""
OLD_CURVE_SUFFIX = "_val.json"
"""The curve's name before CURVE_SUFFIX (committed runs), still read."""


@dataclass(frozen=True)
class StageContext:
    """One stage process's context, made once by gpt1.stage_run and passed to the stage
    function (its `context` argument; gpt1.recording stamps its records from it):
    every record the stage writes carries `wall_seconds` since `started` and the stage's
    `stage_hash`, and only a process that is no launched rank, or rank 0, records."""

    stage: str
    """dvc.yaml's stage name (finetune)."""
    address: str
    """The stage run's name, its DVC address (finetune@cola-1234): its MLflow run's name."""
    params: Params
    """The params file's, before any override of an arm."""
    started: float
    """When the stage's process started (a time.perf_counter value)."""
    stage_hash: str | None
    """The hash of the params the stage declares in dvc.yaml (gpt1.freshness); None outside a
    DVC repository (no dvc.yaml)."""
    rank: int | None
    """This process's rank in a launched group (gpt1.launcher.rank); None when not launched."""
    run: Any = None
    """The stage's own MLflow run (gpt1.tracking.stage_scope; None untracked): the stage's
    first `tracking.start_run(..., context=)` logs into it."""

    @classmethod
    def of(cls, stage: str, address: str, params: Params, started: float,
           rank: int | None) -> StageContext:
        """The context of stage `stage` run as `address` on `params`, its stage hash computed."""
        declared = freshness.dvc_yaml().is_file()
        return cls(stage, address, params, started,
                   freshness.stage_hash(params, stage) if declared else None, rank)

    @property
    def records(self) -> bool:
        """Whether this process writes the stage's records and logs its run (rank 0 of a
        launched group, or the one process)."""
        return self.rank in (None, 0)

    def stamp(self) -> dict[str, Any]:
        """What a record written now carries of its process: its wall time, stage hash and
        the CPU it ran on (`hardware`: model name and widest instruction set,
        gpt1.hardware), which the report names."""
        return {"wall_seconds": round(time.perf_counter() - self.started, 1),
                **({} if self.stage_hash is None else {"stage_hash": self.stage_hash}),
                "hardware": describe_cpu().as_record()}


def record_paths(metrics_dir: str | Path, stage: str) -> tuple[Path, Path]:
    """(scores file, sidecar) of a stage's record."""
    path = Path(metrics_dir) / f"{stage}.json"
    return path, path.with_name(stage + INFO_SUFFIX)


def write_metrics(params: Params, stage: str, metrics: Mapping[str, Any],
                  scores: tuple[str, ...], stamp: Mapping[str, Any] | None = None
                  ) -> tuple[Path, Path]:
    """Write the stage's record: the `scores` keys to `<stage>.json`, the rest with the stage
    process's `stamp` (wall_seconds, stage_hash) and the params' config hash to the sidecar;
    returns both paths."""
    path, info_path = record_paths(params.paths.metrics, stage)
    info = {k: v for k, v in metrics.items() if k not in scores}
    atomic.write_json(info_path, {**info, **(stamp or {}), "config_hash": params.digest()})
    atomic.write_json(path, {k: metrics[k] for k in scores})
    return path, info_path


def is_curve(path: str | Path) -> bool:
    """Whether a file under paths.metrics is a curve (new or old name), not a record."""
    return Path(path).name.endswith((CURVE_SUFFIX, OLD_CURVE_SUFFIX))


def write_curve(params: Params, stage: str, points: list[dict[str, Any]]) -> Path:
    """Write stage `stage`'s validation curve (points: step, val_loss, val_ppl, ...)."""
    path = Path(params.paths.metrics) / f"{stage}{CURVE_SUFFIX}"
    atomic.write_json(path, points)
    return path


def read_curve(metrics_dir: str | Path, stage: str) -> list[dict[str, Any]] | None:
    """Stage `stage`'s validation curve (its old name too); None when it has none."""
    for suffix in (CURVE_SUFFIX, OLD_CURVE_SUFFIX):
        path = Path(metrics_dir) / f"{stage}{suffix}"
        if path.is_file():
            points = _read_json(path)
            if not isinstance(points, list):
                raise Gpt1Error("not a JSON list (a validation curve)", path)
            return points
    return None


def read_scores_file(path: str | Path) -> dict[str, Any] | None:
    """One scores file (a record's `<stem>.json`, or a DVC metric such as the headline) as a
    dict; None for a curve file or a file not there; a Gpt1Error naming a damaged one."""
    path = Path(path)
    if is_curve(path) or not path.is_file():
        return None
    data = _read_json(path)
    if not isinstance(data, dict):
        raise Gpt1Error("not a JSON object (a stage record or metric)", path)
    return data


def read_record(metrics_dir: str | Path, stem: str) -> dict[str, Any] | None:
    """The record `stem` (scores and sidecar merged, checked as `read_metrics` does); None
    when it was not written."""
    path, info = record_paths(metrics_dir, stem)
    data = read_scores_file(path)
    if data is None:
        return None
    info_data = _read_json(info) if info.is_file() else {}
    if not isinstance(info_data, dict):
        raise Gpt1Error("not a JSON object (a stage record's sidecar)", info)
    merged = {**info_data, **data}
    check_record(stem, merged, (path, info))
    return merged


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise Gpt1Error(f"not valid JSON ({err})", path) from None


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_score(value: Any) -> bool:
    """{"mean": number, "sd": number or null, "per_seed": [number] or null} (sd, per_seed
    optional)."""
    return (isinstance(value, dict) and _is_number(value.get("mean"))
            and (value.get("sd") is None or _is_number(value["sd"]))
            and (value.get("per_seed") is None or (isinstance(value["per_seed"], list)
                                                   and all(map(_is_number, value["per_seed"])))))


RECORD_FIELDS: dict[str, tuple[str, Any]] = {
    "task": ("a string", lambda v: isinstance(v, str)),
    "variant": ("a string", lambda v: isinstance(v, str)),
    "metric": ("a string", lambda v: isinstance(v, str)),
    "pretrain_seed": ("an integer", _is_int),
    "layers_transferred": ("an integer or null", lambda v: v is None or _is_int(v)),
    "seeds": ("a list of integers", lambda v: isinstance(v, list) and all(map(_is_int, v))),
    "runs": ("a list of [pre-training seed, seed] integer pairs",
             lambda v: isinstance(v, list) and all(isinstance(r, list) and len(r) == 2
                                                   and all(map(_is_int, r)) for r in v)),
    "hardware": ('{"model": a string, "isa": a string}',
                 lambda v: isinstance(v, dict) and set(v) == {"model", "isa"}
                 and all(isinstance(x, str) for x in v.values())),
}
"""Fields the report reads from a record -> (what they must be, check)."""
SCORED_STEMS = ("finetune_", "layers_", "curve_n_", "curve_floor_", "curve_step_",
                "curve_dose_")
"""Records whose `scores` are {metric: {"mean", "sd", "per_seed"}} (fine-tuning, Figure 2 left,
the curves' points: gpt1/report/curves.py reads their mean and per_seed)."""


def check_record(stem: str, record: dict[str, Any], files: tuple[Path, Path]) -> None:
    """Gpt1Error naming the file and field when a field the report reads has the wrong type."""
    def fail(field: str, what: str) -> None:
        where = files[0] if field in json.loads(files[0].read_text(encoding="utf-8")) else files[1]
        shown = repr(record[field])
        shown = shown if len(shown) <= 120 else shown[:117] + "..."
        raise Gpt1Error(f"field {field!r} is {shown}, expected {what}; restore the "
                        "file (git checkout, or re-run its stage)", where)

    for field, (what, ok) in RECORD_FIELDS.items():
        if field in record and not ok(record[field]):
            fail(field, what)
    for field in ("scores", "fresh_scores"):  # fresh: the fresh split's (tasks.fresh_examples)
        if stem.startswith(SCORED_STEMS) and field in record:
            scores = record[field]
            if not isinstance(scores, dict) or not all(map(_is_score, scores.values())):
                fail(field, 'a mapping of metric -> {"mean": number, "sd": number, '
                            '"per_seed": [number]}')


def read_metrics(metrics_dir: str | Path) -> Metrics:
    """Every stage record under metrics_dir by stem: `<stem>.json` (the scores) merged with its
    sidecar `<stem>.info.json` when there is one; a damaged file, or a field the report reads
    of the wrong type (`check_record`), is a Gpt1Error naming it."""
    out: Metrics = {}
    for path in sorted(Path(metrics_dir).glob("*.json")):
        if path.name.endswith(INFO_SUFFIX) or is_curve(path):
            continue
        record = read_record(metrics_dir, path.stem)
        if record is not None:
            out[path.stem] = record
    return out
