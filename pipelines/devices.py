"""Device slots for concurrent stages on one worker (params.orchestrate.devices).

On a worker with declared GPUs, each model stage the flow runs holds devices from one pool
while it runs and sees only them (CUDA_VISIBLE_DEVICES): a pre-training stage takes every
device (its ranks, pretrain.nproc: auto, one per GPU), every other model stage (fine-tunes,
ablations, Figure 2, zero-shot) one, so concurrent fine-tunes x seeds x ablations fan out one
per GPU; data stages and the report take none. No Prefect here, so it is cheap to test.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

from gpt1.__main__ import DEVICE_STAGES, LAUNCHED_STAGES

VISIBLE = "CUDA_VISIBLE_DEVICES"


class DevicePool:
    """The worker's devices; `hold(stage)` waits for the stage's share and gives it back after.
    One pool per flow run (the flow's stage threads share it)."""

    def __init__(self, devices: tuple[int, ...]) -> None:
        self.free = list(devices)
        self.size = len(devices)
        self.changed = threading.Condition()

    def wanted(self, stage: str) -> int:
        """Devices a stage (dvc.yaml name, `finetune` for `finetune@rte`) holds while it runs."""
        if not self.size or stage not in DEVICE_STAGES:
            return 0
        return self.size if stage in LAUNCHED_STAGES else 1

    @contextlib.contextmanager
    def hold(self, stage: str) -> Iterator[dict[str, str]]:
        """The environment a stage runs with: {CUDA_VISIBLE_DEVICES: its devices}, or {} for a
        stage that takes none (or no declared devices); all of a stage's devices are taken at
        once, so two stages never wait on each other's part."""
        n = self.wanted(stage)
        if n == 0:
            yield {}
            return
        with self.changed:
            self.changed.wait_for(lambda: len(self.free) >= n)
            mine, self.free = self.free[:n], self.free[n:]
        try:
            yield {VISIBLE: ",".join(str(d) for d in mine)}
        finally:
            with self.changed:
                self.free = sorted(self.free + mine)
                self.changed.notify_all()
