"""A task's canonical train / dev / test tables, from the local mirror or the hub.

One generic reader serves every task: the registry entry says which files make which table in
which format (registry.MirrorSource; the formats are gpt1/tasks/mirror_formats.py) and which
splits are carved out with a seeded rule; the hub path maps hub columns the same way
(registry.HubSource). Then the tables are written, read back and validated here.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from gpt1 import atomic
from gpt1.config import Params, TasksCfg
from gpt1.data import read_parquet_artifact
from gpt1.errors import Gpt1Error
from gpt1.tasks.custom import read_custom
from gpt1.tasks.gate import check_task_tables
from gpt1.tasks.mirror_formats import Row, read_rows, row
from gpt1.tasks.registry import CANONICAL_COLUMNS, FRESH, SPLITS, TASKS, TaskSpec

log = logging.getLogger(__name__)

Tables = dict[str, pd.DataFrame]
"""Canonical split name (train / dev / test, and `fresh` where carved) -> canonical table
(registry.CANONICAL_COLUMNS)."""
HubLoader = Callable[..., Any]
"""datasets.load_dataset or a fake with the same (path, name, split=) signature."""


def to_table(rows: list[Row], spec: TaskSpec) -> pd.DataFrame:
    """Rows -> canonical DataFrame with fixed column order and dtypes."""
    df = pd.DataFrame(rows, columns=list(CANONICAL_COLUMNS))
    for col in ("id", "text_a", "text_b", "group", "source"):
        df[col] = df[col].astype(object)
    df["label"] = df["label"].astype("float64" if spec.regression else "int64")
    return df


def cap_table(df: pd.DataFrame, limit: int | None, seed: int) -> pd.DataFrame:
    """A seeded random subset of `limit` rows (kept in file order); all rows if limit is None.
    Applied before encoding, so a capped run never tokenises the whole split."""
    if limit is None or limit >= len(df):
        return df
    rows = np.sort(np.random.default_rng(seed).choice(len(df), size=limit, replace=False))
    return df.iloc[rows].reset_index(drop=True)


def without_ids(df: pd.DataFrame, ids: Collection[str]) -> pd.DataFrame:
    """`df` less the rows whose id is in `ids`, in file order (`df` itself when `ids` is
    empty, so a seeded sample of it is the one drawn without held-out rows)."""
    if not ids:
        return df
    return df[~df["id"].isin(list(ids))].reset_index(drop=True)


# ---------------------------------------------------------------- carving missing splits


def carve(df: pd.DataFrame, n_held: int, seed: int, by: str | None = None
          ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Deterministically split off about n_held rows (seeded permutation); (rest, held).

    by: a column whose equal values stay on one side (SciTail: premises are shared by several
    hypotheses, so they are carved whole to keep train and test text apart).
    """
    if not 0 < n_held < len(df):
        raise Gpt1Error(f"cannot carve {n_held} of {len(df)} rows (check tasks.dev_frac / "
                        "test_frac / dev_examples)")
    rng = np.random.default_rng(seed)
    keys = df[by] if by is not None else pd.Series(np.arange(len(df)), index=df.index)
    uniq = keys.drop_duplicates().to_numpy()
    order = uniq[rng.permutation(len(uniq))]
    sizes = keys.value_counts().reindex(order).to_numpy()
    take = set(order[: int(np.searchsorted(np.cumsum(sizes), n_held)) + 1])
    mask = keys.isin(take).to_numpy()
    return df[~mask].reset_index(drop=True), df[mask].reset_index(drop=True)


def read_scored_ids(path: str | Path) -> frozenset[str]:
    """The row ids of a tasks.scored_ids file: one id a line; blank lines and `#` comments
    (the file's account of how it was made) skipped. A missing file is a Gpt1Error naming it."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as err:
        raise Gpt1Error(f"cannot read the scored ids (tasks.scored_ids): {err.strerror}",
                        path) from None
    lines = (line.split("#", 1)[0].strip() for line in text.splitlines())
    return frozenset(line for line in lines if line)


def carve_fresh(tables: Tables, n_rows: int | None, seed: int,
                scored: Collection[str] = ()) -> Tables:
    """`tables` with about `n_rows` rows of train moved to the `fresh` split (tasks.fresh_examples,
    seed tasks.carve_seed): `carve` of train by whole groups of rows sharing text_a (a QNLI
    question, an SST-2 sentence), so no text of the fresh split is trained on; every training
    sample and pilot split is later drawn from the train that is left. A group holding a row
    whose id is in `scored` (tasks.scored_ids: rows an earlier run scored) stays in train, so
    the fresh split is never scored before. Unchanged for None."""
    if n_rows is None:
        return tables
    train = tables["train"]
    seen = train["text_a"].isin(train.loc[train["id"].isin(list(scored)), "text_a"])
    eligible = train[~seen.to_numpy()].reset_index(drop=True)
    if n_rows >= len(eligible) // 2:
        outside = (f" ({len(train) - len(eligible)} rows sharing text with scored ids "
                   "left out)" if len(eligible) < len(train) else "")
        raise Gpt1Error(f"tasks.fresh_examples: {n_rows} is not below half of the "
                        f"{len(eligible)}-row training pool it is carved from{outside}")
    fresh = carve(eligible, n_rows, seed, by="text_a")[1]
    return {**tables, "train": without_ids(train, set(fresh["id"])), FRESH: fresh}


def fresh_source(spec: TaskSpec, n_rows: int, seed: int, n_scored: int = 0) -> str:
    """The fresh split in words: where its rows come from and how they were chosen."""
    outside = (f", outside the {n_scored:,} rows earlier runs scored (tasks.scored_ids) and "
               "their text_a groups" if n_scored else "")
    return (f"{n_rows:,} rows carved (seed {seed}, whole text_a groups{outside}) from "
            f"{spec.sources['train']}: the fresh split, scored by every arm, outside every "
            "training sample and pilot split")


def _n_dev(spec: TaskSpec, cfg: TasksCfg, n_rows: int) -> int:
    return cfg.dev_examples.get(spec.name, round(cfg.dev_frac * n_rows))


def _carve_dev(spec: TaskSpec, cfg: TasksCfg, train: pd.DataFrame) -> tuple[pd.DataFrame, ...]:
    return carve(train, _n_dev(spec, cfg, len(train)), cfg.carve_seed)


# ---------------------------------------------------------------- per-task assembly (mirror)


def _mirror_tables(spec: TaskSpec, root: Path, cfg: TasksCfg) -> Tables:
    """The task's train / dev / test from its registry.MirrorSource: read each table from its
    files, then apply the carves in order."""
    src = spec.mirror
    assert src is not None, spec.name  # a paper task
    tables = {name: to_table([r for path, tag in files.files
                              for r in read_rows(root, files.reader, path, tag, src.labels)],
                             spec)
              for name, files in src.tables.items()}
    for cut in src.carves:
        whole = tables.pop(cut.source)
        n_held = (_n_dev(spec, cfg, len(whole)) if cut.size == "dev"
                  else round(cfg.test_frac * len(whole)))
        tables[cut.rest], tables[cut.held] = carve(whole, n_held, cfg.carve_seed, by=cut.by)
    return {split: tables[split] for split in SPLITS}


# ---------------------------------------------------------------- hub


def _hub_rows(spec: TaskSpec, records: Any, split: str) -> list[Row]:
    hub, rows = spec.hub, []
    assert hub is not None, spec.name  # a paper task
    values = {v: i for i, v in enumerate(hub.labels)} if hub.labels is not None else None
    tag = f"hub:{hub.path}/{hub.name or ''}/{split}"

    def col(rec: dict[str, Any], key: str, i: int) -> Any:
        names = hub.fields[key]
        cols = (names,) if isinstance(names, str) else names
        missing = [c for c in cols if c not in rec]
        if missing:
            raise Gpt1Error(f"row {i}: missing column {missing[0]!r}", tag)
        vals = [rec[c] for c in cols]
        if key == "choices":
            return list(vals[0]) if isinstance(names, str) else vals
        return " ".join(str(v) for v in vals) if key == "text_a" else vals[0]

    dropped = 0
    for i, rec in enumerate(records):
        raw = col(rec, "label", i)
        if values is not None:
            if raw not in values:
                raise Gpt1Error(f"row {i}: label {raw!r} not in {list(values)}", tag)
            label: float = values[raw]
        elif not spec.regression and int(raw) < 0:
            dropped += 1  # hub marks unlabelled / no-gold rows with -1
            continue
        else:
            label = float(raw) if spec.regression else int(raw)
            if not spec.regression and not 0 <= label < len(spec.labels):
                raise Gpt1Error(f"row {i}: label {raw!r} not in 0..{len(spec.labels) - 1}", tag)
        ident = str(col(rec, "id", i)) if "id" in hub.fields else f"{split}-{i}"
        rows.append(row(ident, str(col(rec, "text_a", i)),
                         str(col(rec, "text_b", i)) if "text_b" in hub.fields else "",
                         label, f"{tag}:{i}",
                         choices=col(rec, "choices", i) if "choices" in hub.fields else ()))
    if dropped:
        log.info("%s: dropped %d unlabelled rows (label -1)", tag, dropped)
    return rows


def _hub_tables(spec: TaskSpec, cfg: TasksCfg, loader: HubLoader) -> Tables:
    tables: Tables = {}
    hub = spec.hub
    assert hub is not None, spec.name  # a paper task
    for split, hub_split in hub.splits.items():
        records = loader(hub.path, hub.name, split=hub_split)
        tables[split] = to_table(_hub_rows(spec, records, hub_split), spec)
    if "dev" not in tables:
        tables["train"], tables["dev"] = _carve_dev(spec, cfg, tables["train"])
    return tables


def _custom_tables(spec: TaskSpec, cfg: TasksCfg) -> Tables:
    """A custom task's splits: by its split column, else test (tasks.test_frac) and then dev
    (tasks.dev_frac or dev_examples) carved, seeded, from the whole file."""
    rows, splits = read_custom(spec)
    if splits[0] is not None:
        return {s: to_table([r for r, t in zip(rows, splits, strict=True) if t == s], spec)
                for s in SPLITS}
    whole = to_table(rows, spec)
    rest, test = carve(whole, round(cfg.test_frac * len(whole)), cfg.carve_seed)
    train, dev = _carve_dev(spec, cfg, rest)
    return {"train": train, "dev": dev, "test": test}


# ---------------------------------------------------------------- public API


def load_task(spec: TaskSpec, cfg: TasksCfg, mirror_dir: str | Path | None,
              hub_loader: HubLoader | None = None) -> Tables:
    """Canonical train/dev/test tables of one task: a custom task from its own file, a
    paper task from <mirror_dir>/tasks, else the hub."""
    if spec.custom is not None:
        tables = _custom_tables(spec, cfg)
    elif mirror_dir is not None:
        root = Path(mirror_dir) / "tasks"
        if not root.is_dir():
            raise Gpt1Error("mirror has no tasks/ folder (paths.mirror_dir)", root)
        tables = _mirror_tables(spec, root, cfg)
    else:
        if hub_loader is None:
            from datasets import load_dataset

            hub_loader = load_dataset
        tables = _hub_tables(spec, cfg, hub_loader)
    for split in SPLITS:
        log.info("%s/%s: %d rows", spec.name, split, len(tables[split]))
    return tables


def write_tables(tables: Tables, out_dir: str | Path,
                 reports: dict[str, Any] | None = None) -> None:
    """<out_dir>/{train,dev,test}.parquet (and fresh.parquet where `tables` has the split),
    + <name>.json per report, as one directory, atomically."""
    with atomic.atomic_path(out_dir) as tmp:
        tmp.mkdir(parents=True)
        for split in (*SPLITS, *(s for s in tables if s == FRESH)):
            tables[split].to_parquet(tmp / f"{split}.parquet", index=False)
        for name, report in (reports or {}).items():
            atomic.write_json(tmp / f"{name}.json", report)


def read_tables(task_dir: str | Path) -> Tables:
    """Inverse of write_tables for train / dev / test; a missing split file is a Gpt1Error
    naming it (the fresh split: `read_fresh`)."""
    return {split: _read_table(Path(task_dir) / f"{split}.parquet") for split in SPLITS}


def read_fresh(task_dir: str | Path) -> tuple[pd.DataFrame, str] | None:
    """The task's fresh split (tasks.fresh_examples) and its origin in words (`fresh_source`,
    written beside it by prepare_task); None where prepare_task carved none."""
    path = Path(task_dir) / f"{FRESH}.parquet"
    if not path.is_file():
        return None
    about = Path(task_dir) / f"{FRESH}.json"
    try:
        source = str(json.loads(about.read_text(encoding="utf-8"))["source"])
    except (OSError, ValueError, KeyError, TypeError):
        raise Gpt1Error("missing or damaged (it names the fresh split's origin); re-run the "
                        "prepare_task stage", about) from None
    return _read_table(path), source


def _read_table(path: Path) -> pd.DataFrame:
    """One canonical table written by prepare_task (Gpt1Error naming a missing, damaged,
    non-canonical or empty file)."""
    df = read_parquet_artifact(path, "prepare_task")
    missing = [c for c in CANONICAL_COLUMNS if c not in df.columns]
    if missing:
        raise Gpt1Error(f"not a canonical task table (no column {missing[0]!r}); re-run "
                        "the prepare_task stage", path)
    if df.empty:
        raise Gpt1Error("no rows; re-run the prepare_task stage", path)
    df["choices"] = df["choices"].map(list)
    return df


def validate_tables(tables: Tables, spec: TaskSpec, base: str | Path,
                    docs_dir: str | Path | None = None) -> dict[str, Any]:
    """Run the task's great-expectations suite on every split (one Data Docs site over the
    splits in docs_dir when given); the first violation raises a Gpt1Error naming the file and
    line it came from (base = the mirror's tasks/ folder). The fresh split, where carved, is
    checked like the others."""
    splits = [s for s in (*SPLITS, FRESH) if s in tables or s in SPLITS]
    for split in splits:
        if tables[split].empty:  # every check of an empty table passes; the next stage fails
            origin = spec.sources.get(split, f"carved from {spec.sources['train']}")
            raise Gpt1Error(f"{spec.name}/{split}: no rows (from {origin}); every split needs "
                            "examples")
    report = check_task_tables({s: tables[s] for s in splits}, spec, docs_dir)
    for split in splits:
        rep = report[split]
        if rep["success"]:
            continue
        fail = next(c for c in rep["checks"] if not c["success"])
        problem = f"{fail['label']} ({fail.get('unexpected_count') or 'all'} rows in {split})"
        if "data_docs" in rep:
            problem += f"; Data Docs {rep['data_docs']}"
        if fail.get("source") is None:
            raise Gpt1Error(f"{spec.name}/{split}: {problem}")
        if fail["column"] == "label":
            problem += f"; got {tables[split]['label'].iloc[fail['first_row']]!r}"
        file, _, line = str(fail["source"]).rpartition(":")
        where = file if file.startswith("hub:") else Path(base) / file
        raise Gpt1Error(f"line {line}: {problem}", where)
    return report


def task_spec(params: Params, task: str) -> TaskSpec:
    """The registry row of `task`, one of finetune.tasks (else a Gpt1Error naming them)."""
    if task not in params.finetune.tasks or task not in TASKS:
        raise Gpt1Error(f"unknown task {task!r}; finetune.tasks = {list(params.finetune.tasks)}")
    return TASKS[task]
