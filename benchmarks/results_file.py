"""Benchmark results as files: benchmarks/results/<topic>_<hardware>_<date>.md.

Every benchmark that prints a measured figure takes `--results` (`add_option`) and runs its main
under `recording(topic)`; with the flag, what the benchmark prints is also written to such a
file, headed by the hardware it ran on (CPU model and widest instruction set, as
gpt1.hardware names it for the stage records; cores, torch and its device), the UTC date and
the exact command, so a figure quoted anywhere names its run.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import io
import os
import re
import shlex
import sys
from collections.abc import Iterator
from pathlib import Path

from gpt1.hardware import describe_cpu

RESULTS_DIR = Path(__file__).resolve().parent / "results"


def add_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--results", action="store_true",
                        help=f"also write what is printed to {RESULTS_DIR.name}/"
                             "<topic>_<hardware>_<date>.md")


def cpu_model() -> str:
    """This machine's CPU and its widest instruction set, as the stage records name it."""
    return describe_cpu().text()


def hardware() -> tuple[str, str]:
    """(a short slug for the file name, a description for its header)."""
    import torch

    cpu = cpu_model()
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    described = f"{cpu}, {cores} cores usable; torch {torch.__version__}, " \
                f"{torch.get_num_threads()} threads"
    if torch.cuda.is_available():
        gpu = torch.cuda.get_device_name(0)
        return slug(gpu), f"{gpu}; {described}"
    return slug(f"{cpu.split(' (')[0]}-{cores}c"), described


def slug(text: str) -> str:
    words = re.sub(r"\((?:R|TM)\)|\bprocessor\b|\b\d+-core\b", "", text, flags=re.I)
    return re.sub(r"[^a-z0-9]+", "-", words.lower()).strip("-")


def write(topic: str, printed: str, command: str) -> Path:
    """Write one results file and return its path (a same-day re-run gets a numbered name)."""
    name, described = hardware()
    date = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d")
    RESULTS_DIR.mkdir(exist_ok=True)
    path, n = RESULTS_DIR / f"{topic}_{name}_{date}.md", 2
    while path.exists():
        path, n = RESULTS_DIR / f"{topic}_{name}_{date}-{n}.md", n + 1
    path.write_text(f"# {topic}\n\n- hardware: {described}\n- date: {date} (UTC)\n"
                    f"- command: `{command}`\n\n```\n{printed.rstrip()}\n```\n", encoding="utf-8")
    return path


class _Tee(io.TextIOBase):
    def __init__(self, *streams: io.TextIOBase) -> None:
        self.streams = streams

    def write(self, text: str) -> int:
        for stream in self.streams:
            stream.write(text)
        return len(text)

    def flush(self) -> None:
        for stream in self.streams:
            stream.flush()


@contextlib.contextmanager
def recording(topic: str) -> Iterator[None]:
    """Print as usual; with `--results` on the command line, also keep what is printed and write
    it as a results file when the benchmark finishes (not when it fails)."""
    if "--results" not in sys.argv[1:]:
        yield
        return
    kept = io.StringIO()
    with contextlib.redirect_stdout(_Tee(sys.stdout, kept)):  # type: ignore[arg-type]
        yield
    command = shlex.join(["python", *sys.argv])
    print(f"results: {os.path.relpath(write(topic, kept.getvalue(), command))}")
