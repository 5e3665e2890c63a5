"""The great-expectations gate of one canonical task table: the task's rules as data.

The rules come from the task's row in the registry; `gpt1.data.checks` runs them (the one
place that knows great-expectations). Dependencies point one way: tasks -> data.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from gpt1.data.checks import Rule, validate_frames
from gpt1.tasks.registry import CANONICAL_COLUMNS, TaskSpec


def task_rules(spec: TaskSpec) -> list[Rule]:
    """Suite over the view of a canonical task table made by `check_task_table`."""
    rules: list[Rule] = [
        {"kind": "not_null", "column": "id", "label": "id present"},
        {"kind": "unique", "column": "id", "label": "duplicate id"},
        {"kind": "between", "column": "text_a_chars", "min": 1, "max": None,
         "label": "empty text (text_a)"},
        {"kind": "not_null", "column": "label", "label": "label present"},
    ]
    if spec.fmt in ("entail", "similarity"):
        rules.append({"kind": "between", "column": "text_b_chars", "min": 1, "max": None,
                      "label": "empty text (text_b)"})
    if spec.fmt == "choice":
        rules += [
            {"kind": "in_set", "column": "n_choices", "values": [spec.n_choices],
             "label": f"wrong number of choices (expected {spec.n_choices})"},
            {"kind": "between", "column": "min_choice_chars", "min": 1, "max": None,
             "label": "empty answer choice"},
        ]
    else:
        rules.append({"kind": "in_set", "column": "n_choices", "values": [0],
                      "label": "choices given for a task without choices"})
    if spec.regression:
        low, high = spec.score_range if spec.score_range is not None else (None, None)
        rules.append({"kind": "between", "column": "label", "min": low, "max": high,
                      "label": f"label outside the score range {low}-{high}"})
    else:
        values = list(range(spec.n_choices if spec.fmt == "choice" else len(spec.labels)))
        rules.append({"kind": "in_set", "column": "label", "values": values,
                      "label": f"label outside the task's set {values}"})
    return rules


def check_task_table(df: pd.DataFrame, spec: TaskSpec, docs_dir: str | Path | None = None,
                     split: str = "table") -> dict[str, Any]:
    """Validate one canonical task table (gpt1/tasks/registry.py); see `check_task_tables`."""
    return check_task_tables({split: df}, spec, docs_dir)[split]


def check_task_tables(tables: dict[str, pd.DataFrame], spec: TaskSpec,
                      docs_dir: str | Path | None = None) -> dict[str, dict[str, Any]]:
    """Validate a task's canonical tables (split -> table; gpt1/tasks/registry.py): labels in
    the task's set (or score range), non-empty texts, unique ids, the right number of
    non-empty choices.

    Returns split -> validate_frame report (ONE Data Docs site in docs_dir over the splits when
    given, each split the asset <task>_<split>, the run prepare_task@<task>); each failed check
    also gets `first_row` (GX's first offending row) and `source` (the file:line it came
    from), so the caller can name it.
    """
    reports: dict[str, dict[str, Any]] = {}
    for split, df in tables.items():
        missing = [c for c in CANONICAL_COLUMNS if c not in df.columns]
        if missing:
            reports[split] = {
                "name": f"task_{spec.name}", "success": False, "n_rows": len(df),
                "evaluated": 1, "failed": 1, "checks": [{
                    "label": f"missing column {missing[0]}", "kind": "column_exists",
                    "column": missing[0], "success": False, "first_row": None,
                    "source": None}]}
    views = {f"{spec.name}_{split}": _view(df) for split, df in tables.items()
             if split not in reports}
    if views:
        done = validate_frames(views, f"task_{spec.name}", task_rules(spec), docs_dir,
                               run_name=f"prepare_task@{spec.name}")
        for split, df in tables.items():
            if split in reports:
                continue
            report = reports[split] = done[f"{spec.name}_{split}"]
            for check in report["checks"]:
                if not check["success"]:
                    first = check["rows"][0] if check["rows"] else None
                    check["first_row"] = first
                    check["source"] = None if first is None else str(df["source"].iloc[first])
    return {split: reports[split] for split in tables}


def _view(df: pd.DataFrame) -> pd.DataFrame:
    """Derived columns that keep every rule a plain column check (list cells included)."""

    def chars(s: Any) -> int:
        return len(s.strip()) if isinstance(s, str) else 0

    return pd.DataFrame({
        "id": df["id"].to_numpy(),
        "text_a_chars": df["text_a"].map(chars).to_numpy(),
        "text_b_chars": df["text_b"].map(chars).to_numpy(),
        "n_choices": df["choices"].map(len).to_numpy(),
        "min_choice_chars": df["choices"].map(
            lambda cs: min((chars(c) for c in cs), default=1)).to_numpy(),
        "label": df["label"].to_numpy(),
    })
