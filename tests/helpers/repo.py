"""Where the repository and the real data mirror beside it are."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SHARED_DATA = REPO.parent / "shared" / "data"
