"""How much a checkpoint write in the background takes from a host-bound training loop: the
checkpoint writer (gpt1.checkpoint.write_checkpoint, streaming each tensor to its file) against
the writer before it (safetensors.torch.save building the whole file as one bytes object, then
its sha256 and the write), in the same run.

    .venv/bin/python benchmarks/checkpoint_stall.py [--mb 512] [--rounds 5] [--results]

The loop stands in for a GPU loop's host, which spends its time enqueuing kernels: small torch
ops on one thread, counted per second while a writer thread writes a checkpoint of --mb MB of
fp32 tensors (as gpt1.snapshot's thread does), and without one. Each round times the loop
alone, then beside each writer (the order alternates); the figure is the median over rounds of
(ops/s during a write) / (ops/s alone). On a GPU host with cores to spare, what is left is the
interpreter lock; on a busy CPU the writers also share the cores with the loop.
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

import torch  # noqa: E402
from results_file import add_option, recording  # noqa: E402
from safetensors.torch import save  # noqa: E402

from gpt1 import atomic, checkpoint  # noqa: E402


def write_as_before(run_dir: Path, tensors: dict[str, dict[str, torch.Tensor]]) -> None:
    """The writer before this one: each file's bytes built whole (safetensors.torch.save),
    hashed, then written atomically."""
    dest = run_dir / "before"
    blobs = {name: save(group) for name, group in tensors.items()}
    with atomic.atomic_path(dest) as tmp:
        tmp.mkdir()
        for name, blob in blobs.items():
            (tmp / name).write_bytes(blob)
        (tmp / "files.txt").write_text(
            "\n".join(hashlib.sha256(blob).hexdigest() for blob in blobs.values()))


def write_streamed(run_dir: Path, tensors: dict[str, dict[str, torch.Tensor]]) -> None:
    checkpoint.write_checkpoint(run_dir, 1, tensors, [], {})


def loop_rate(seconds: float, during: Callable[[], None] | None = None) -> tuple[float, float]:
    """(ops/s of the host loop, seconds the write took) over `seconds`, or over the write
    when it takes longer; the write runs on a thread started with the loop."""
    a, b = torch.ones(8), torch.ones(8)
    thread, took = None, [0.0]
    if during is not None:
        def run() -> None:
            t = time.perf_counter()
            during()
            took[0] = time.perf_counter() - t

        thread = threading.Thread(target=run)
    ops, start = 0, time.perf_counter()
    if thread is not None:
        thread.start()
    while (elapsed := time.perf_counter() - start) < seconds or (
            thread is not None and thread.is_alive()):
        for _ in range(100):
            torch.add(a, b, out=a)
        ops += 100
    if thread is not None:
        thread.join()
    return ops / elapsed, took[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=512, help="checkpoint size, MB of fp32")
    parser.add_argument("--rounds", type=int, default=5)
    add_option(parser)
    args = parser.parse_args()
    torch.set_num_threads(1)
    per = 4 * 1024 * 1024  # 4 MB tensors, as a model's matrices
    tensors = {"model.safetensors": {f"w{i}": torch.randn(per // 4)
                                     for i in range(args.mb // 4)}}
    ratios: dict[str, list[float]] = {"before": [], "streamed": []}
    took: dict[str, list[float]] = {"before": [], "streamed": []}
    writers = {"before": write_as_before, "streamed": write_streamed}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            alone, _ = loop_rate(1.0)
            for name in (("before", "streamed") if r % 2 == 0 else ("streamed", "before")):
                writer = writers[name]
                rate, seconds = loop_rate(1.0, lambda: writer(Path(tmp), tensors))  # noqa: B023
                ratios[name].append(rate / alone)
                took[name].append(seconds)
    print(f"host loop (small torch ops, one thread) beside a {args.mb} MB checkpoint write on "
          f"another thread, {args.rounds} rounds, torch {torch.__version__}:")
    for name, label in (("before", "safetensors.torch.save whole, then sha256 and write"),
                        ("streamed", "gpt1.checkpoint.write_checkpoint (streamed)")):
        print(f"  {label}: the loop kept {statistics.median(ratios[name]):.0%} of its rate "
              f"(rounds: {', '.join(f'{x:.0%}' for x in ratios[name])}); the write took "
              f"{statistics.median(took[name]):.2f} s")
    kept = statistics.median(ratios["streamed"]) / statistics.median(ratios["before"])
    print(f"streamed / before: {kept:.2f}x the loop's rate during a write")


if __name__ == "__main__":
    with recording("checkpoint-stall"):
        main()
