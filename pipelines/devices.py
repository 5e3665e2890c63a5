"""Device slots for concurrent stages on one worker (params.orchestrate.devices).

On a worker with declared GPUs, each model stage the flow runs holds devices from one pool
while it runs and sees only them (CUDA_VISIBLE_DEVICES): a pre-training stage takes every
device (its ranks, pretrain.nproc: auto, one per GPU), every other model stage (fine-tunes,
ablations, Figure 2, zero-shot) one, so concurrent fine-tunes x seeds x ablations fan out one
per GPU; data stages and the report take none. `devices: auto` hands out every GPU the worker
sees and `max_parallel_stages: auto` runs one stage per device. The pool serves the stage that
needs the most devices first (then first come, first served), so pre-training is never starved
by a stream of single-device stages. No Prefect here, so it is cheap to test.
"""

from __future__ import annotations

import bisect
import contextlib
import itertools
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Literal

from gpt1.config import OrchestrateCfg
from gpt1.stage_table import STAGES

VISIBLE = "CUDA_VISIBLE_DEVICES"
# Present where an NVIDIA GPU can be: the kernel driver's /proc entry, its control device, or
# WSL2's GPU device (which has neither of the first two).
NVIDIA_MARKS = (Path("/proc/driver/nvidia"), Path("/dev/nvidiactl"), Path("/dev/dxg"))


def gpu_count(marks: tuple[Path, ...] = NVIDIA_MARKS) -> int:
    """GPUs torch counts; 0 without a trace of the NVIDIA driver, without importing torch (the
    flow needs torch only for this)."""
    if not any(mark.exists() for mark in marks):
        return 0
    import torch

    return torch.cuda.device_count()


def visible_gpus(env: Mapping[str, str], count: Callable[[], int] = gpu_count) -> tuple[str, ...]:
    """The GPUs this worker sees, as CUDA_VISIBLE_DEVICES entries: the worker's own
    CUDA_VISIBLE_DEVICES when set (up to the first empty or negative entry, as CUDA reads it:
    indices, GPU-/MIG- UUIDs), else every GPU `count` finds."""
    declared = env.get(VISIBLE)
    if declared is not None:
        entries = [e.strip() for e in declared.split(",")]
        cut = next((i for i, e in enumerate(entries) if not e or e.startswith("-")),
                   len(entries))
        return tuple(entries[:cut])
    return tuple(str(i) for i in range(count()))


def worker_devices(
    orch: OrchestrateCfg, device: Literal["auto", "cpu", "cuda"], env: Mapping[str, str]
) -> tuple[str, ...]:
    """The devices the flow hands out: the listed indices, or for `auto` every GPU the worker
    sees (none when the model stages run on the CPU, `device: cpu`)."""
    if orch.devices != "auto":
        return tuple(str(d) for d in orch.devices)
    return () if device == "cpu" else visible_gpus(env)


def stage_slots(orch: OrchestrateCfg, devices: Sequence[str]) -> int:
    """Stages at once: the number given, or for `auto` one per device handed out (1 without)."""
    if orch.max_parallel_stages != "auto":
        return orch.max_parallel_stages
    return max(1, len(devices))


def sharing_warning(
    devices: Sequence[str], slots: int, device: Literal["auto", "cpu", "cuda"],
    env: Mapping[str, str],
) -> str | None:
    """One line when concurrent model stages would share a GPU: no devices handed out, more
    than one stage at once, and a worker that sees GPUs (every stage then trains on its first);
    None otherwise (handed-out devices are never shared: the pool gives each its own)."""
    if devices or slots == 1 or device == "cpu":
        return None
    gpus = visible_gpus(env)
    if not gpus:
        return None
    return (f"orchestrate.devices: [] with max_parallel_stages {slots} puts up to {slots} model "
            f"stages at once on GPU {gpus[0]} of this worker's {len(gpus)}; set "
            "orchestrate.devices: auto to give each stage its own")


class DevicePool:
    """The worker's devices; `hold(stage)` waits for the stage's share and gives it back after.
    One pool per flow run (the flow's stage threads share it). Waiting stages are served in
    order: most devices wanted first, then first come; a stage waits while one ahead of it
    does, so the devices a pre-training stage waits for are not taken by later fine-tunes."""

    def __init__(self, devices: Sequence[str | int]) -> None:
        self.devices = tuple(str(d) for d in devices)
        self.free = list(self.devices)
        self.size = len(self.devices)
        self.changed = threading.Condition()
        self.waiting: list[tuple[int, int]] = []  # (-devices wanted, arrival): served in order
        self._arrivals = itertools.count()

    def wanted(self, stage: str) -> int:
        """Devices a stage (dvc.yaml name, `finetune` for `finetune@rte`) holds while it runs."""
        row = STAGES.get(stage)  # gpt1/stage_table.py: device and launched stages
        if not self.size or row is None or not row.device:
            return 0
        return self.size if row.launched else 1

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
            me = (-n, next(self._arrivals))
            bisect.insort(self.waiting, me)
            try:
                self.changed.wait_for(lambda: self.waiting[0] == me and len(self.free) >= n)
            finally:  # served or interrupted: either way no longer waiting
                self.waiting.remove(me)
                self.changed.notify_all()  # the next in line may fit in what is left
            mine, self.free = self.free[:n], self.free[n:]
        try:
            yield {VISIBLE: ",".join(mine)}
        finally:
            with self.changed:
                back = set(self.free) | set(mine)
                self.free = [d for d in self.devices if d in back]
                self.changed.notify_all()
