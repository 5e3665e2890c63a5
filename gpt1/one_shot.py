"""The one-shot run: every model stage of a preset in one process, on a machine that has torch
but no DVC, MLflow, Prefect or package registry (a lent GPU host), from the carry folder
`gpt1 one-shot prepare` made on the CPU (gpt1/gpu_carry.py); its records and prediction files
packed into one archive, which `gpt1 one-shot unpack` puts back into the preset's records.

The runs are `runs_of(params)` in the stage table's order (upstream first), less the data
stages (made on the CPU: their outputs are what the carry holds) and the report (rendered on
the CPU from the archive). Each runs as the CLI runs it (gpt1.stage_run: its lock, device,
ranks and stage context) with the carry's params, where tracking is off. A stage that fails is
one line in the manifest and the next starts. No stage starts within `reserve_s` of the
deadline, and a watchdog packs what finished when the deadline passes during a stage, so an
archive comes back either way. The manifest (`one_shot.json`, in the archive and beside it)
names every run finished, failed, cut or not started with its wall time, and the device, the
torch version and each pre-training run's model FLOPs utilisation.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import sys
import tarfile
import threading
import time
import traceback
from collections.abc import Callable
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import gpt1
from gpt1 import gpu_carry, records, stage_run
from gpt1.config import Params
from gpt1.errors import Gpt1Error
from gpt1.gpu_carry import MANIFEST
from gpt1.interrupt import StoppedError
from gpt1.stage_table import StageRun, runs_of

log = logging.getLogger(__name__)

ARCHIVE = "one_shot.tar.xz"
"""The archive's name in the output folder."""
ARCHIVE_LIMIT_BYTES = 16 * 2**20
"""The most one file may weigh to come back from a lent machine (docs/gpu.md): a larger
archive is cut into parts of at most this (`<archive>.0`, `.1`, ...), joined by unpack."""
CARRIED_MODULE = "gpt1.stages.data"
"""The data stages: run on the CPU; the one-shot run reads what they wrote from the carry."""
RENDERED = "report"
"""Rendered on the CPU from the unpacked archive."""
CUT_EXIT = 3
"""The exit status when the watchdog packed at the deadline while a stage ran."""

FINISHED, FAILED, CUT, NOT_STARTED = "finished", "failed", "cut at the deadline", "not started"

HOST_NEEDS = ("numpy", "pandas", "pyarrow", "yaml", "pydantic", "tokenizers", "safetensors",
              "sklearn", "tqdm", "ftfy")
"""What the model stages import besides torch: the host's own, or carried as wheels
(gpt1.gpu_carry.WHEELS)."""


def one_shot_runs(params: Params) -> list[StageRun]:
    """The runs a one-shot run makes: every run the params define, upstream first, but the
    data stages and the report."""
    return [r for r in runs_of(params)
            if r.stage.module != CARRIED_MODULE and r.stage.name != RENDERED]


def device_facts() -> dict[str, Any]:
    """What the archive says it ran on: the device, torch, CUDA and Python versions."""
    import torch

    cuda = torch.cuda.is_available()
    return {"device": torch.cuda.get_device_name(0) if cuda else f"cpu ({platform.machine()})",
            "gpus": torch.cuda.device_count() if cuda else 0, "torch": torch.__version__,
            "cuda": torch.version.cuda, "python": platform.python_version()}


def mfu(record: dict[str, Any], device: str) -> float | None:
    """A pre-training record's model FLOPs utilisation on `device` (its last log window's
    FLOP/s over the device's dense bf16 peak); None off a GPU of known peak."""
    from gpt1.runtime import bf16_peak

    peak = bf16_peak(device)
    rate = record.get("flops_per_s")
    return None if peak is None or not rate else round(float(rate) / peak, 4)


def record_files(params: Params, run: StageRun, record: dict[str, Any]) -> list[Path]:
    """The files a finished run leaves for the report: its record (scores, sidecar, curve) and
    every file under paths.finetuned the record names (prediction and training-id files)."""
    scores, info = records.record_paths(params.paths.metrics, run.stem)
    curve = Path(params.paths.metrics) / f"{run.stem}{records.CURVE_SUFFIX}"
    outputs = Path(params.paths.finetuned)
    named: list[Path] = []

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            for v in value.values():
                walk(v)
        elif isinstance(value, list):
            for v in value:
                walk(v)
        elif (isinstance(value, str) and Path(value).is_relative_to(outputs)
              and Path(value).is_file()):
            named.append(Path(value))

    walk(record)
    return [p for p in (scores, info, curve, *named) if p.is_file()]


class OneShot:
    """The runs of a one-shot run, their outcomes and the archive: written once, by the end
    of the runs or by the watchdog at the deadline, whichever comes first."""

    def __init__(self, params: Params, params_path: str, out: Path, deadline_s: float,
                 reserve_s: float, started: float,
                 on_cut: Callable[[int], Any] = os._exit) -> None:
        self.params, self.params_path, self.out = params, params_path, out
        self.deadline_s, self.reserve_s, self.started = deadline_s, reserve_s, started
        self.runs = one_shot_runs(params)
        self.outcomes: dict[str, dict[str, Any]] = {}
        self.current: tuple[StageRun, float] | None = None
        self.archive: Path | None = None
        self.lock = threading.Lock()
        self.on_cut = on_cut
        self.watchdog = threading.Timer(max(0.0, deadline_s - self.elapsed()), self.time_up)
        self.watchdog.daemon = True

    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    def run(self) -> Path:
        """Run every run in order while time is left, then pack."""
        self.watchdog.start()
        try:
            for run in self.runs:
                if self.archive is not None:  # the watchdog packed: the deadline has passed
                    break
                if self.deadline_s - self.elapsed() < self.reserve_s:
                    log.warning("one-shot: %.0f s left of %.0f s, under the %.0f s reserve: "
                                "%s and the later runs are not started",
                                self.deadline_s - self.elapsed(), self.deadline_s,
                                self.reserve_s, run.address)
                    break
                self.current = run, time.perf_counter()
                outcome = self.run_one(run)
                with self.lock:
                    self.current = None
                    if self.archive is None:
                        self.outcomes[run.address] = outcome
        finally:  # a stop (Ctrl-C, SIGTERM) still packs what finished
            self.watchdog.cancel()
            self.pack()
        return self.pack()

    def run_one(self, run: StageRun) -> dict[str, Any]:
        """One stage run as the CLI runs it; a failure is its outcome, not the end."""
        t0 = time.perf_counter()
        try:
            stage_run.run_stage(run.stage.name, self.params_path, t0, run.kwargs)
        except StoppedError:
            raise
        except Exception as err:  # noqa: BLE001 (one failing stage must not lose the others)
            first = (str(err).strip().splitlines() or [""])[0][:300]
            log.error("one-shot: %s failed: %s: %s", run.address, type(err).__name__, first)
            return {"status": FAILED, "wall_s": round(time.perf_counter() - t0, 1),
                    "error": f"{type(err).__name__}: {first}",
                    "traceback": traceback.format_exc().splitlines()[-12:]}
        return {"status": FINISHED, "wall_s": round(time.perf_counter() - t0, 1)}

    def time_up(self) -> None:
        """The watchdog: the deadline passed during a stage; pack what finished and stop."""
        with self.lock:
            current = self.current
            if current is not None:
                run, t0 = current
                self.outcomes[run.address] = {"status": CUT,
                                              "wall_s": round(time.perf_counter() - t0, 1)}
        log.error("one-shot: deadline of %.0f s passed during %s: packing what finished",
                  self.deadline_s, current[0].address if current else "no stage")
        self.pack()
        self.on_cut(CUT_EXIT)

    def manifest(self) -> dict[str, Any]:
        """Every run's outcome (in order), the device, the wall time and the MFU."""
        facts = device_facts()
        metrics = {}
        stages = []
        for run in self.runs:
            outcome = self.outcomes.get(run.address, {"status": NOT_STARTED})
            stages.append({"address": run.address, "stem": run.stem, **outcome})
            if outcome["status"] == FINISHED and run.stage.name in ("pretrain", "pretrain_lstm"):
                record = records.read_record(self.params.paths.metrics, run.stem) or {}
                metrics[run.address] = {"tokens_per_s": record.get("tokens_per_s"),
                                        "flops_per_s": record.get("flops_per_s"),
                                        "mfu": mfu(record, facts["device"])}
        return {"preset": self.params.report.preset, "params_digest": self.params.digest(),
                **facts, "deadline_s": self.deadline_s, "reserve_s": self.reserve_s,
                "wall_s": round(self.elapsed(), 1), "pretraining": metrics, "stages": stages,
                "finished": sum(s["status"] == FINISHED for s in stages), "runs": len(stages)}

    def pack(self) -> Path:
        """Write the archive (once): the manifest and every finished run's files."""
        with self.lock:
            if self.archive is not None:
                return self.archive
            manifest = self.manifest()
            files: list[Path] = []
            for run in self.runs:
                if self.outcomes.get(run.address, {}).get("status") == FINISHED:
                    record = records.read_record(self.params.paths.metrics, run.stem) or {}
                    files += [f for f in record_files(self.params, run, record)
                              if f not in files]
            self.out.mkdir(parents=True, exist_ok=True)
            text = json.dumps(manifest, indent=2, sort_keys=True) + "\n"
            (self.out / MANIFEST).write_text(text, encoding="utf-8")
            path = self.out / ARCHIVE
            with tarfile.open(path, "w:xz") as tar:
                tar.add(self.out / MANIFEST, arcname=MANIFEST)
                for f in files:
                    tar.add(f, arcname=f.as_posix())
            self.archive = path
            size = path.stat().st_size
            parts = gpu_carry.split_file(path, ARCHIVE_LIMIT_BYTES)
            print(f"one-shot: {manifest['finished']} of {manifest['runs']} runs finished in "
                  f"{manifest['wall_s']:.0f} s on {manifest['device']}; {path} "
                  f"({size / 2**20:.2f} MiB, {len(files)} files"
                  + (f"; over {ARCHIVE_LIMIT_BYTES / 2**20:.0f} MiB, in {len(parts)} parts "
                     f"{parts[0].name}..." if len(parts) > 1 else "") + ")", flush=True)
            return path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=("prepare", "run", "unpack"),
                        help="prepare: the carry folder (on the CPU, after the data stages); "
                             "run: every model stage from inside it (on the GPU host); "
                             "unpack: the returned archive into the preset's records")
    parser.add_argument("archive", nargs="?", help="unpack: the archive a run returned")
    parser.add_argument("--carry", default=".gpu_carry",
                        help="prepare: the carry folder (git-ignored; default .gpu_carry)")
    parser.add_argument("--wheels", choices=("download", "none"), default="download",
                        help="prepare: fetch the pure-Python wheels the GPU host lacks with "
                             "pip (download), or carry none (a host with the project's "
                             "dependencies, a CPU test)")
    parser.add_argument("--deadline-s", type=float,
                        help="run: seconds from the process start at which the watchdog packs "
                             "what finished and stops (required for run)")
    parser.add_argument("--reserve-s", type=float, default=30.0,
                        help="run: no stage starts with fewer seconds than this left before "
                             "the deadline (default 30)")
    parser.add_argument("--out", help="run: the folder the archive and manifest go to")


def run(args: argparse.Namespace, params: Params) -> Any:
    """The one-shot run on a GPU host with only torch: prepare its carry on the CPU, run
    every model stage there, unpack what it returns into the preset's records."""
    if args.action == "prepare":
        return gpu_carry.prepare(params, args.params, Path(args.carry), args.wheels)
    if args.action == "unpack":
        if not args.archive:
            raise Gpt1Error("unpack: name the archive a one-shot run returned")
        return gpu_carry.unpack(Path(args.archive), params)
    if args.deadline_s is None or not args.out:
        raise Gpt1Error("run: --deadline-s and --out are required")
    missing = [name for name in HOST_NEEDS if find_spec(name) is None]
    if missing:
        raise Gpt1Error(f"{sys.executable} lacks {', '.join(missing)}: install the carry's "
                        "wheels first (docs/gpu.md, \"The one-shot run\")")
    if params.tracking.enabled:
        raise Gpt1Error("tracking.enabled is true: run from inside the carry folder "
                        "(`gpt1 one-shot prepare` writes its params with tracking off)",
                        args.params)
    shot = OneShot(params, args.params, Path(args.out), args.deadline_s, args.reserve_s,
                   gpt1.STARTED)
    shot.run()
    done = sum(o["status"] == FINISHED for o in shot.outcomes.values())
    if done < len(shot.runs):
        raise Gpt1Error(f"{len(shot.runs) - done} of {len(shot.runs)} runs did not finish "
                        f"(see {Path(args.out) / MANIFEST})")
    return None
