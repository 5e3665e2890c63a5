"""Checkpoints off the critical path: a host copy of the training state, written in the
background.

`HostCopier.copy` queues the device-to-host copy of every tensor a checkpoint holds into
page-locked buffers it keeps between checkpoints (CUDA: `non_blocking`, on the training
stream, so the next update's kernels run after the copy and cannot change what it reads; the
host does not wait), or clones them (CPU). `BackgroundWriter` then waits for the copy, hashes
and writes the files (gpt1.checkpoint, atomically) on one thread while training goes on: one
write at a time, the next copy waits for the previous write, and an error in the thread is
raised in the training loop at the next write or at the end. Leaving its `with` block (the run's
end, a stop, an exception) waits for the write in flight, so a checkpoint the loop asked for is
complete on disk before the stage exits; a SIGKILL leaves a temp directory, removed on resume.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any

import torch


class HostCopy:
    """Host tensors of one checkpoint, grouped by file, and the event the copy completes at."""

    def __init__(self, groups: dict[str, dict[str, torch.Tensor]], done: Any) -> None:
        self.groups, self._done = groups, done

    def wait(self) -> None:
        """Block until every byte is on the host (CUDA event; nothing to wait for on the CPU)."""
        if self._done is not None:
            self._done.synchronize()


class HostCopier:
    """Copies named device tensors to the host without a host sync; reuses its pinned buffers
    (page-locking 1.4 GB takes longer than copying it), so a copy must not be taken while the
    previous one is still being written (BackgroundWriter.submit waits for that first)."""

    def __init__(self) -> None:
        self._pinned: dict[tuple[str, str], torch.Tensor] = {}

    def copy(self, groups: dict[str, dict[str, torch.Tensor]]) -> HostCopy:
        out: dict[str, dict[str, torch.Tensor]] = {}
        on_cuda = False
        for group, tensors in groups.items():
            out[group] = {}
            for name, value in tensors.items():
                value = value.detach()
                if value.device.type != "cuda":
                    out[group][name] = value.clone()
                    continue
                on_cuda = True
                buf = self._pinned.get((group, name))
                if buf is None or buf.shape != value.shape or buf.dtype != value.dtype:
                    buf = torch.empty(value.shape, dtype=value.dtype, pin_memory=True)
                    self._pinned[group, name] = buf
                buf.copy_(value, non_blocking=True)
                out[group][name] = buf
        done = None
        if on_cuda:
            done = torch.cuda.Event()
            done.record()
        return HostCopy(out, done)


class BackgroundWriter:
    """Runs one write at a time on a thread; `with` waits for the last one on exit. Records
    the seconds the loop spent handing writes over (`blocking_s`) and the threads spent
    writing (`writing_s`)."""

    def __init__(self) -> None:
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self.blocking_s = self.writing_s = 0.0
        self.writes = 0

    def __enter__(self) -> BackgroundWriter:
        return self

    def __exit__(self, kind: type[BaseException] | None, err: BaseException | None,
                 tb: TracebackType | None) -> None:
        if kind is None:
            self.wait()
        else:  # the loop is failing already: finish the write, report the loop's error
            self._join()

    def _join(self) -> None:
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def wait(self) -> None:
        """Wait for the write in flight; raise its error, if it failed."""
        self._join()
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    def submit(self, copy: Callable[[], HostCopy], write: Callable[[HostCopy], Any]) -> None:
        """After the previous write: take `copy()` now (queued on the device), then run
        `write(host_copy)` on the thread once the copy is on the host."""
        t0 = time.perf_counter()
        self.wait()
        host = copy()

        def run() -> None:
            start = time.perf_counter()
            try:
                host.wait()
                write(host)
            except BaseException as err:  # noqa: BLE001 (re-raised in the loop by wait())
                self._error = err
            finally:
                self.writing_s += time.perf_counter() - start

        self._thread = threading.Thread(target=run, name="gpt1-checkpoint", daemon=False)
        self._thread.start()
        self.writes += 1
        self.blocking_s += time.perf_counter() - t0
