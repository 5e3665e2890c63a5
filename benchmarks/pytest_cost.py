"""A pytest plugin: what each test costs in wall time and CPU time, its subprocesses included.

Wall time on a shared machine is noisy; CPU seconds are not (much). For every test (set-up,
call and tear-down together) it records the wall seconds, the CPU seconds of the test process
itself and of the subprocesses it waited for (RUSAGE_CHILDREN: `dvc repro`, `python -m gpt1`,
the Prefect and MLflow servers once stopped), and `idle`: wall minus all that CPU, the time the
test spent waiting (polls, sleeps, leases; or waiting for a core on a loaded machine). One JSON
line per test goes to $GPT1_TEST_COST (one file per xdist worker: `<path>.<worker>`).

    GPT1_TEST_COST=/tmp/cost.jsonl PYTHONPATH=benchmarks .venv/bin/python -m pytest -p pytest_cost \
        -n 2 --dist loadgroup tests/e2e
    .venv/bin/python benchmarks/pytest_cost.py /tmp/cost.jsonl*   # the table, slowest first
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest


def _cpu() -> tuple[float, float]:
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, kids.ru_utime + kids.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: Any) -> Iterator[None]:
    target = os.environ.get("GPT1_TEST_COST")
    began, (own0, kids0) = time.monotonic(), _cpu()
    yield
    if not target:
        return
    wall, (own1, kids1) = time.monotonic() - began, _cpu()
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    row = {"test": item.nodeid, "worker": worker, "wall": round(wall, 1),
           "cpu_self": round(own1 - own0, 1), "cpu_children": round(kids1 - kids0, 1),
           "idle": round(wall - (own1 - own0) - (kids1 - kids0), 1)}
    with open(f"{target}.{worker}", "a", encoding="utf-8") as out:
        out.write(json.dumps(row) + "\n")


def main(paths: list[str]) -> None:
    rows = [json.loads(line) for p in paths for line in Path(p).read_text().splitlines()]
    rows.sort(key=lambda r: -r["wall"])
    print("| test | worker | wall s | CPU s (self + subprocesses) | idle s |")
    print("|---|---|---|---|---|")
    for r in rows:
        if r["wall"] >= 5:
            cpu = r["cpu_self"] + r["cpu_children"]
            print(f"| {r['test']} | {r['worker']} | {r['wall']:.0f} | {cpu:.0f} "
                  f"({r['cpu_self']:.0f} + {r['cpu_children']:.0f}) | {r['idle']:.0f} |")
    for worker in sorted({r["worker"] for r in rows}):
        mine = [r for r in rows if r["worker"] == worker]
        print(f"{worker}: {len(mine)} tests, {sum(r['wall'] for r in mine):.0f} s wall, "
              f"{sum(r['cpu_self'] + r['cpu_children'] for r in mine):.0f} s CPU")


if __name__ == "__main__":
    main(sys.argv[1:])
