"""Which stage records are current: DVC's view of freshness, not a hash of the whole params.

A stage re-runs when the params it declares in dvc.yaml change (and only then, for params), so
each record carries `stage_hash`, a hash of exactly those params keys (`stage_hash`); a record
is current when it is the record of a stage the params define (`current_stems`: the stems
dvc.yaml's foreach / matrix stages expand to) and its stage hash equals the one the params give
now. So a change to, say, `zeroshot.max_examples` leaves every fine-tuning record current, as DVC
leaves those stages up to date. A record hashed under other declarations (dvc.yaml's `params:`
lists changed since it ran) is current when its stage's dvc.lock entry recorded its files as
they are and the params the stage declares as they are now, as DVC judges the stage; one written
before stage hashes (no `stage_hash`) by that entry's params, else by its whole-params
`config_hash`, as before.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from gpt1 import names
from gpt1.config import Params, parse_params, read_yaml
from gpt1.errors import Gpt1Error
from gpt1.repo import repo_root
from gpt1.stage_table import runs_of

Records = Mapping[str, Mapping[str, Any]]
"""Record stem -> record (gpt1.records.Metrics)."""


@functools.cache
def _declared(dvc_yaml: Path, _mtime: int) -> dict[str, tuple[str, ...]]:
    try:
        stages = yaml.safe_load(dvc_yaml.read_text(encoding="utf-8"))["stages"]
    except (OSError, yaml.YAMLError, KeyError, TypeError) as err:
        raise Gpt1Error(f"cannot read the stages' params ({err})", dvc_yaml) from None
    out = {}
    for name, body in stages.items():
        body = body.get("do", body)  # foreach stages declare inside `do:`
        out[name] = tuple(p for p in body.get("params", []) if isinstance(p, str))
    return out


def dvc_yaml(root: Path | None = None) -> Path:
    """The pipeline file of the repository at `root` (default: the one around the cwd)."""
    return (root or repo_root()) / "dvc.yaml"


def declared_params(stage: str, root: Path | None = None) -> tuple[str, ...]:
    """The params keys (`finetune`, `model.backend`) dvc.yaml's stage `stage` declares."""
    path = dvc_yaml(root)
    declared = _declared(path, path.stat().st_mtime_ns if path.exists() else 0)
    if stage not in declared:
        raise Gpt1Error(f"no stage {stage!r} in dvc.yaml", dvc_yaml(root))
    return declared[stage]


def stage_hash(params: Params, stage: str, root: Path | None = None) -> str:
    """sha256 (first 12 hex digits) of the values of the params `stage` declares in dvc.yaml:
    what DVC compares to decide that the stage's params changed."""
    raw = params.as_dict()
    values = {}
    for key in declared_params(stage, root):
        value: Any = raw
        for part in key.split("."):
            value = value[part]
        values[key] = value
    blob = json.dumps({"stage": stage, "params": values}, sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:12]


def stage_addresses(params: Params) -> dict[str, str]:
    """Record stem -> DVC stage address (`finetune@sst2-1234`), for every stage run the params
    define that writes a record (gpt1.stage_table.runs_of)."""
    return {run.stem: run.address for run in runs_of(params) if run.stage.stem is not None}


def current_stems(params: Params) -> dict[str, str]:
    """Record stem -> dvc.yaml stage (`finetune`), for every stage the params define."""
    return {stem: address.split("@")[0] for stem, address in stage_addresses(params).items()}


@functools.cache
def _repo_state(root: Path, _mtimes: tuple[int, int]) -> tuple[Any, str, dict[str, Any]]:
    """(raw params.yaml, its params' digest, stage address -> its dvc.lock entry) of the
    repository at `root`."""
    raw = read_yaml(root / "params.yaml")
    lock = read_yaml(root / "dvc.lock") or {}
    return raw, parse_params(raw, root / "params.yaml").digest(), dict(lock.get("stages") or {})


def _lookup(raw: Any, key: str) -> Any:
    """The value of dotted `key` in a params mapping, or in dvc.lock's record of a stage's params
    (`finetune.lr` as one key where the stage declares it, `finetune` holding `lr` where it
    declared the section)."""
    if key in raw:
        return raw[key]
    head, _, rest = key.partition(".")
    if not rest:
        raise KeyError(key)
    return _lookup(raw[head], rest)


def _md5(path: Path) -> str | None:
    try:
        return hashlib.md5(path.read_bytes(), usedforsecurity=False).hexdigest()
    except OSError:
        return None


def _records_as_locked(root: Path, entry: Mapping[str, Any], params: Params, stem: str) -> bool:
    """Whether the files of record `stem` (under paths.metrics, named `<stem>.*`) that dvc.lock's
    `entry` recorded are on disk as it recorded them (DVC's own test of an output)."""
    metrics = (root / params.paths.metrics).resolve()
    outs = [o for o in entry.get("outs") or []
            if (root / o["path"]).resolve().parent == metrics
            and Path(o["path"]).name.startswith(f"{stem}.")]
    return bool(outs) and all(_md5(root / o["path"]) == o.get("md5") for o in outs)


def lock_current(params: Params, stem: str, as_locked: bool = False) -> bool | None:
    """Whether dvc.lock's entry for the stage of record `stem` recorded the params that stage
    declares as params.yaml holds them now (DVC's own test of a stage's params), and with
    `as_locked` also the record's files as they are on disk; None when dvc.lock cannot tell:
    no lock or no entry, or `params` are not the repository's params.yaml (a stage run with
    --params)."""
    root = repo_root()
    files = root / "params.yaml", root / "dvc.lock"
    address = stage_addresses(params).get(stem)
    if address is None or not all(f.is_file() for f in files):
        return None
    raw, digest, entries = _repo_state(root, tuple(f.stat().st_mtime_ns for f in files))
    if digest != params.digest() or address not in entries:
        return None
    recorded = (entries[address].get("params") or {}).get("params.yaml", {})
    try:
        same = all(_lookup(recorded, k) == _lookup(raw, k)
                   for k in declared_params(address.split("@")[0], root))
    except (KeyError, TypeError):
        return False
    return same and (not as_locked or _records_as_locked(root, entries[address], params, stem))


def is_current(params: Params, stem: str, record: Mapping[str, Any],
               old_hash: str | None = None) -> bool:
    """Whether `record` (stem `stem`) is its stage's record under `params`: its `stage_hash`
    equals the stage's now; else, as DVC judges its stage, when dvc.lock recorded this record
    and the params its stage declares as they are now (a record hashed under other `params:`
    lists of dvc.yaml, or written before stage hashes); else a record without a stage hash by
    its `config_hash` against `old_hash` (default the params' digest)."""
    stage = current_stems(params).get(stem)
    if "stage_hash" in record:
        if stage is not None and record["stage_hash"] == stage_hash(params, stage):
            return True
        return bool(lock_current(params, stem, as_locked=True))
    by_lock = lock_current(params, stem)  # written before stage hashes: dvc.lock, else the digest
    if by_lock is not None:
        return by_lock
    return record.get("config_hash") == (old_hash or params.digest())


def current_records(params: Params, metrics: Records) -> dict[str, dict[str, Any]]:
    """The records of the stages the params define (other configs' leftovers dropped), stale
    ones included: the report lists those as stale, the headline leaves them out. A record
    written before stage hashes may have the one-run layout's stem (`finetune_cola`)."""
    stems = current_stems(params)
    first = params.pretrain.seeds[0]  # a record of the one-run layout has no `_p<seed>` suffix
    return {s: dict(m) for s, m in metrics.items()
            if s in stems or ("stage_hash" not in m and names.record_stem(s, first) in stems)}
