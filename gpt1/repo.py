"""Where the repository is: the root every relative project path is taken from."""

from __future__ import annotations

from pathlib import Path


def repo_root(start: Path | None = None) -> Path:
    """The nearest directory at or above `start` (default cwd) holding dvc.yaml or .dvc/."""
    here = (start or Path.cwd()).resolve()
    for d in (here, *here.parents):
        if (d / "dvc.yaml").exists() or (d / ".dvc").is_dir():
            return d
    return here
