"""The Prefect end-to-end tests' stack: a fresh repository copy, its tiny params, the processes
it started, free ports and commands that must succeed."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import psutil
import yaml

from tests.helpers.params import TINY, deep_merge
from tests.helpers.repo import REPO

TASKS = ["rte", "sst2"]  # two fine-tunes that can overlap
BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def copy_repo(dst: Path) -> None:
    """The working tree's source files (tracked or not, minus ignored ones) into a fresh repo."""
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO,
                           capture_output=True, check=True).stdout.decode().split("\0")
    for rel in filter(None, files):
        src = REPO / rel
        outputs = rel.startswith(("data/", "reports/", "dvc.lock", ".dvc/cache", ".dvc/tmp"))
        if src.is_file() and not outputs:  # no pipeline outputs of the working tree
            (dst / rel).parent.mkdir(parents=True, exist_ok=True)
            (dst / rel).write_bytes(src.read_bytes())
    subprocess.run(["git", "init", "-q"], cwd=dst, check=True)


def tiny_params(repo: Path, mirror: Path) -> dict[str, Any]:
    """TINY (the unit tests' model) with a pre-training long enough to be killed mid-way."""
    raw = deep_merge(yaml.safe_load((repo / "params.yaml").read_text()), TINY)
    raw = deep_merge(raw, {
        "paths": {"mirror_dir": str(mirror)},
        "pretrain": {"max_tokens": 160 * 128, "checkpoint_interval_steps": 8,
                     "log_interval_steps": 4, "eval_interval_steps": 200},
        "finetune": {"tasks": TASKS},
        "layers": {"tasks": ["rte"], "layers_transferred": [0, 2]},  # TINY has 2 blocks
        # every task list names prepared tasks only (params load refuses the others)
        "zeroshot": {"tasks": ["sst2", "dprd"]},
        "ablations": {"tasks": ["sst2"], "pilot": {"dev_examples": 4}},  # a tiny pool
        "report": {"confirmatory_tasks": ["sst2"]},
        "tracking": {"enabled": True, "uri": None},
        "orchestrate": {"max_parallel_stages": 2, "io_retries": 0, "dvc_remote": "local"},
    })
    raw["finetune"]["overrides"] = {}
    return raw


def run(cmd: list[str], cwd: Path, env: dict[str, str], timeout: float) -> str:
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    out = done.stdout + done.stderr
    assert done.returncode == 0, f"{' '.join(cmd)} exited {done.returncode}:\n{out[-3000:]}"
    return out


def state_pids(home: Path) -> dict[str, int]:
    path = home / "gpt1-serve.json"
    if not path.exists():
        return {}
    return {k: v["pid"] for k, v in json.loads(path.read_text())["services"].items()}


def processes_under(root: Path) -> list[psutil.Process]:
    """Processes whose working directory lies in `root` (everything the stack started)."""
    found = []
    for proc in psutil.process_iter():
        try:
            if Path(proc.cwd()).is_relative_to(root) and proc.pid != os.getpid():
                found.append(proc)
        except psutil.Error:
            pass
    return found
