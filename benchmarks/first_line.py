"""Seconds from `python -m gpt1 <stage>` to the stage's first line of output.

The peer, measured in the same run: the same stage started through a parser that imports every
tool first (what `build_parser()` without argv does, as the CLI did before it read argv), so
the ratio is what the lazy parser and the early "started" line save. The stage is `finetune`
on a copy of params.yaml in a temp folder (its relative paths, the MLflow store and any output
land there): its first line is "started" (or, in the peer, the first line the stage itself
logs); the run is stopped once that line is read.

    nice .venv/bin/python benchmarks/first_line.py [--rounds 3] [--results]
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from results_file import add_option, recording

REPO = Path(__file__).resolve().parents[1]
ARGV = ["finetune", "--task", "sst2"]
EAGER = ("import sys; import gpt1.__main__ as m; m.build_parser(); "
         f"sys.exit(m.main({ARGV!r}))")
"""The peer: every tool module (and torch with it) imported before the stage starts."""


def first_line(cmd: list[str], cwd: Path) -> tuple[float, str]:
    """Seconds until the child's first line (stdout or stderr), and that line; the child is
    then stopped."""
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    start = time.perf_counter()
    child = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True, env=env, start_new_session=True)
    assert child.stdout is not None
    line = child.stdout.readline()
    took = time.perf_counter() - start
    os.killpg(child.pid, signal.SIGKILL)
    child.wait()
    return took, line.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds")
    add_option(parser)
    args = parser.parse_args()
    runs: dict[str, list[float]] = {"lazy": [], "eager": []}
    lines: dict[str, str] = {}
    cmds = {"lazy": [sys.executable, "-m", "gpt1", *ARGV], "eager": [sys.executable, "-c", EAGER]}
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copy(REPO / "params.yaml", tmp)
        for r in range(args.rounds):
            for name in (["lazy", "eager"] if r % 2 == 0 else ["eager", "lazy"]):
                took, lines[name] = first_line(cmds[name], Path(tmp))
                runs[name].append(took)
    lazy, eager = statistics.median(runs["lazy"]), statistics.median(runs["eager"])
    print(f"`gpt1 {' '.join(ARGV)}`: first line of output, median of {args.rounds} rounds")
    print(f"lazy parser (the CLI):  {lazy:5.2f} s  {lines['lazy'][:90]}")
    print(f"eager parser (peer):    {eager:5.2f} s  {lines['eager'][:90]}")
    print(f"ratio eager / lazy: {eager / lazy:4.1f}x")


if __name__ == "__main__":
    with recording("first-line"):
        main()
