"""Ctrl-C / SIGTERM in a training loop: finish the step, save, stop with one line.

`stop_on_signals()` turns SIGINT and SIGTERM into a request the loop reads between steps
(a signal never lands inside an optimizer step or a checkpoint write); the loop then saves
what it keeps and raises `StoppedError`, which the CLI prints as one line with exit code
128 + signal (130 for Ctrl-C, 143 for SIGTERM). A second signal interrupts at once.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
from collections.abc import Iterator
from types import FrameType

from gpt1.errors import Gpt1Error

log = logging.getLogger(__name__)

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class StoppedError(Gpt1Error):
    """A run stopped on request after saving its state; `exit_code` = 128 + signal number."""

    def __init__(self, problem: str, signum: int) -> None:
        super().__init__(problem)
        self.exit_code = 128 + signum


class StopRequest:
    """Set by the first SIGINT / SIGTERM received inside `stop_on_signals`."""

    def __init__(self) -> None:
        self.signum: int | None = None

    def __bool__(self) -> bool:
        return self.signum is not None

    def stop(self, what: str) -> StoppedError:
        """The exception to raise once the loop has saved (`what`: e.g. 'stopped at step 8')."""
        assert self.signum is not None
        return StoppedError(what, self.signum)


@contextlib.contextmanager
def stop_on_signals() -> Iterator[StopRequest]:
    """Within the block, SIGINT / SIGTERM set the yielded request instead of raising.

    Signal handlers live in the main thread only; elsewhere (a Prefect worker thread) the
    request is never set and signals keep their usual effect.
    """
    request = StopRequest()
    if threading.current_thread() is not threading.main_thread():
        yield request
        return

    def handle(signum: int, frame: FrameType | None) -> None:
        if request:
            raise KeyboardInterrupt  # second signal: do not wait for the step to end
        request.signum = signum
        log.warning("%s: stopping after this step (again to stop at once)",
                    signal.Signals(signum).name)

    previous = {sig: signal.signal(sig, handle) for sig in SIGNALS}
    try:
        yield request
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
