"""The one error type the CLI turns into a single line and a non-zero exit."""

from __future__ import annotations

from pathlib import Path


class Gpt1Error(Exception):
    """A user-facing failure: bad input file, mismatched artifacts, missing source.

    str() is one line: `<file>: <problem>` when a file is involved.
    """

    def __init__(self, problem: str, path: str | Path | None = None) -> None:
        self.path = None if path is None else str(path)
        self.problem = problem
        super().__init__(problem if path is None else f"{path}: {problem}")
