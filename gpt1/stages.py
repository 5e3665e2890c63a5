"""One function per DVC stage: (params) -> metrics dict. Paths in, paths + metrics JSON out.

Each stage loads its inputs, calls the library, writes its outputs atomically plus
`<paths.metrics>/<stage>.json`, and logs. Stage names match dvc.yaml, gpt1.__main__.STAGES
and the Prefect flow.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from gpt1 import atomic
from gpt1.config import Params

log = logging.getLogger(__name__)


def write_metrics(params: Params, stage: str, metrics: dict[str, Any]) -> Path:
    """Write the stage's metrics JSON (what DVC and MLflow read), with params provenance."""
    path = Path(params.paths.metrics) / f"{stage}.json"
    atomic.write_json(path, {**metrics, "config_hash": params.digest()})
    return path
