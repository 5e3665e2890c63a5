"""Data stages of the pipeline: sources (download), clean, checks, shards (spec §1, 5)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gpt1.errors import Gpt1Error


def read_json_artifact(path: str | Path, made_by: str) -> dict[str, Any]:
    """A JSON object written by stage `made_by`; Gpt1Error naming the file when absent or bad."""
    path = Path(path)
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise Gpt1Error(f"missing; run the {made_by} stage first", path) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise Gpt1Error(f"not valid JSON ({err})", path) from None
    if not isinstance(obj, dict):
        raise Gpt1Error("not a JSON object", path)
    return obj


def read_parquet_artifact(path: str | Path, made_by: str) -> Any:
    """A parquet table written by stage `made_by` (a DataFrame); Gpt1Error naming the file when
    absent or damaged."""
    import pandas as pd

    path = Path(path)
    if not path.is_file():
        raise Gpt1Error(f"missing; run the {made_by} stage first", path)
    try:
        return pd.read_parquet(path)
    except Exception as err:  # pyarrow raises several types on a damaged file
        raise Gpt1Error(f"unreadable parquet ({str(err).splitlines()[0]}); re-run the "
                        f"{made_by} stage", path) from None
