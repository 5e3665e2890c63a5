"""Progress bars that stay bars on a terminal and become plain log lines everywhere else.

Under `dvc repro`, a Prefect worker or CI, stderr is a pipe or a file: tqdm's carriage returns
and the cursor-up codes (`\\x1b[A`) of nested bars end up raw in the logs. There, `progress`
logs the bar's text as one INFO line at most every $TQDM_MININTERVAL seconds (default
LOG_INTERVAL) and at the end, and a nested bar (`nested=True`, e.g. one eval pass inside a
fine-tune) logs nothing: its parent's lines already say where the run is.
"""

from __future__ import annotations

import io
import logging
import os
import sys
from collections.abc import Callable
from typing import Any

from tqdm import tqdm

log = logging.getLogger(__name__)

MetricsSink = Callable[[int, dict[str, float]], None]
"""Where a training loop reports its metrics: (step, {name: value}); gpt1.tracking gives one
that logs to MLflow, tests give a list's append."""

LOG_INTERVAL = 10.0  # seconds between two progress log lines when stderr is not a terminal


class _LogLines(tqdm):  # type: ignore[type-arg]
    """A tqdm whose every refresh is one log line (no \\r, no cursor movement)."""

    def display(self, msg: str | None = None, pos: int | None = None) -> bool:
        log.info("%s", self.format_meter(**self.format_dict))
        return True


def progress(iterable: Any = None, *, nested: bool = False, **kwargs: Any) -> tqdm:  # type: ignore[type-arg]
    """tqdm(iterable, **kwargs) on a terminal; log lines (or nothing, if `nested`) elsewhere."""
    if sys.stderr.isatty():
        return tqdm(iterable, leave=not nested, **kwargs)
    if nested:
        return tqdm(iterable, disable=True, **kwargs)
    kwargs["mininterval"] = float(os.environ.get("TQDM_MININTERVAL", LOG_INTERVAL))
    kwargs.pop("dynamic_ncols", None)
    return _LogLines(iterable, file=io.StringIO(), ascii=True, ncols=100, **kwargs)
