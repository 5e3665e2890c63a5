"""Progress bars that stay bars on a terminal and become plain log lines everywhere else.

Under `dvc repro`, a Prefect worker or CI, stderr is a pipe or a file: tqdm's carriage returns
and the cursor-up codes (`\\x1b[A`) of nested bars end up raw in the logs, and a bar
redrawn every few seconds is most of the log. There, `progress` draws no bar: it logs one plain
INFO line per milestone (each MILESTONES fraction of the total it passes, checked at most every
$TQDM_MININTERVAL seconds, default LOG_INTERVAL, and the end, once), and a nested bar
(`nested=True`, e.g. one eval pass inside a fine-tune) logs nothing: its parent's lines
already say where the run is.
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

LOG_INTERVAL = 1.0  # seconds between two milestone checks when stderr is not a terminal
MILESTONES = 4
"""Log lines per bar when stderr is not a terminal: at 25, 50, 75 and 100 % of its total."""
LINE = "{desc}: {percentage:3.0f}% ({n_fmt}/{total_fmt} {unit}) after {elapsed}, {remaining} left"
DONE = "{desc}: done, {n_fmt} {unit} in {elapsed} ({rate_fmt})"


class _LogLines(tqdm):  # type: ignore[type-arg]
    """A tqdm that logs one plain line per milestone passed (no bar, no \\r, no cursor
    movement) and one at the end, never the same milestone twice."""

    def display(self, msg: str | None = None, pos: int | None = None) -> bool:
        reached = (MILESTONES if self.total is None or self.n >= self.total
                   else int(MILESTONES * self.n / self.total)) if self.total else 0
        closing = self.disable or getattr(self, "_closing", False)
        if closing and self.total is None:
            reached = MILESTONES
        if reached <= getattr(self, "_logged", 0):
            return True
        self._logged = reached
        fmt = DONE if reached == MILESTONES else LINE
        log.info("%s", self.format_meter(**{**self.format_dict, "bar_format": fmt}))
        return True

    def close(self) -> None:
        self._closing = True
        super().close()


def progress(iterable: Any = None, *, nested: bool = False, **kwargs: Any) -> tqdm:  # type: ignore[type-arg]
    """tqdm(iterable, **kwargs) on a terminal; log lines (or nothing, if `nested`) elsewhere."""
    if sys.stderr.isatty():
        return tqdm(iterable, leave=not nested, **kwargs)
    if nested:
        return tqdm(iterable, disable=True, **kwargs)
    kwargs["mininterval"] = float(os.environ.get("TQDM_MININTERVAL", LOG_INTERVAL))
    kwargs.pop("dynamic_ncols", None)
    return _LogLines(iterable, file=io.StringIO(), ascii=True, ncols=100, **kwargs)
