"""Faults of the workspace rather than of the input: a disk that fills mid-write (one line
naming the path, the free space and the space needed; nothing partial stays) and two runs of
one stage in one workspace (the second stops in one line; nothing is corrupted)."""

from __future__ import annotations

import builtins
import errno
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpt1 import stage_lock
from gpt1.config import load_params
from tests.helpers.cli import file_tree, refused
from tests.helpers.hf_checkpoint import write_tiny_openai_gpt
from tests.helpers.params import make_params_dict
from tests.helpers.repo import REPO


def _fill_disk_at(monkeypatch, name: str) -> list[int]:
    """Writes of a file called `name`, through Path.write_bytes (gpt1.atomic's write) or a file
    opened "wb" and written in pieces (the checkpoint's streamed tensors), put half their
    bytes on disk, then fail with ENOSPC as a full filesystem does; returns the sizes that
    were asked for (a streamed file: the piece that did not fit)."""
    real = Path.write_bytes
    real_open = builtins.open
    asked: list[int] = []

    class Filling:
        def __init__(self, fh: Any) -> None:
            self.fh = fh

        def write(self, data: Any) -> int:
            asked.append(len(memoryview(data).cast("B")))
            self.fh.write(memoryview(data).cast("B")[: asked[-1] // 2])
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        def __enter__(self) -> Filling:
            return self

        def __exit__(self, *exc: Any) -> None:
            self.fh.close()

    def filling_open(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        fh = real_open(file, mode, *args, **kwargs)
        return Filling(fh) if mode == "wb" and Path(str(file)).name == name else fh

    monkeypatch.setattr(builtins, "open", filling_open)

    def write_bytes(self: Path, data: bytes) -> int:
        if self.name != name:
            return real(self, data)
        asked.append(len(data))
        with open(self, "wb") as fh:
            fh.write(data[: len(data) // 2])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(Path, "write_bytes", write_bytes)
    return asked


def _needed_bytes(line: str) -> float:
    number, unit = re.search(r"needs at least ([\d.]+) (B|KiB|MiB|GiB)", line).groups()
    return float(number) * 1024 ** ["B", "KiB", "MiB", "GiB"].index(unit)


def test_a_full_disk_mid_import_is_one_line_and_leaves_nothing(make_params, tmp_path, capsys,
                                                               monkeypatch):
    """ENOSPC while import-hf writes the weights, inside the folder it fills: the line names
    OUT (not a temp path), what is free and at least what the write needed; no OUT, no temp."""
    src = tmp_path / "openai-gpt"
    write_tiny_openai_gpt(src)
    params = tmp_path / "params.yaml"
    params.write_text(json.dumps(make_params().as_dict()))
    before = file_tree(tmp_path)
    asked = _fill_disk_at(monkeypatch, "model.safetensors")
    out = tmp_path / "imported"
    line = refused(capsys, ["--params", str(params), "import-hf", str(src), str(out)],
                    f"{out}: no space left on the device", "free there", "re-run")
    # the weights at least: the whole file the write needed, not the part that fitted
    assert asked and _needed_bytes(line) >= 0.99 * (src / "model.safetensors").stat().st_size
    assert file_tree(tmp_path) == before  # no OUT, no .imported.* temp, nothing beside


def test_a_full_disk_over_an_existing_file_keeps_it(tmp_path, capsys, monkeypatch):
    """ENOSPC while replacing a file: one line naming it, the old file untouched."""
    metrics = tmp_path / "metrics"
    shutil.copytree(REPO / "reports" / "metrics", metrics)
    raw = yaml.safe_load((REPO / "params.yaml").read_text())
    raw["paths"].update(metrics=str(metrics), reports=str(tmp_path / "reports"))
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(raw))
    out = tmp_path / "verdicts.md"
    out.write_text("the previous table\n")
    before = file_tree(tmp_path)
    monkeypatch.setattr(Path, "write_bytes", _fail_write)
    refused(capsys, ["verdicts", "--run", f"demo={tmp_path / 'params.yaml'}", "--out", str(out)],
             f"{out}: no space left on the device", "needs at least")
    assert file_tree(tmp_path) == before


def _fail_write(self: Path, data: bytes) -> int:
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def _hold_lock(params_file: Path, run: str) -> subprocess.Popen:
    """Another process holding the lock of `run`, as a running stage does."""
    code = ("import time; from gpt1 import stage_lock; from gpt1.config import load_params\n"
            f"with stage_lock.held({run!r}, load_params({str(params_file)!r})):\n"
            "    print('held', flush=True); time.sleep(120)\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


@pytest.mark.parametrize("stage,run", [
    (["train-bpe"], "gpt1 train-bpe"),
    (["finetune", "--task", "rte"], "gpt1 finetune --task rte --pretrain-seed 1234")])
def test_a_second_run_of_a_running_stage_stops_in_one_line(tmp_path, capsys, monkeypatch,
                                                           stage, run):
    """A stage started while the same one runs in this workspace (by hand beside `dvc repro`
    or a flow) stops before any work, naming the running one's pid, and writes nothing in the
    workspace; a killed holder leaves no stale lock. The same stage writing elsewhere (other
    output paths) is not blocked."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # the lock folder
    workspace = tmp_path / "ws"
    workspace.mkdir()
    params_file = workspace / "params.yaml"
    params_file.write_text(yaml.safe_dump(make_params_dict(workspace)))
    monkeypatch.chdir(workspace)
    params = load_params(params_file)
    holder = _hold_lock(params_file, run)
    try:
        before = file_tree(workspace)
        line = refused(capsys, ["--params", str(params_file), *stage],
                        f"{run} is already running in this workspace (pid {holder.pid}",
                        f"in {workspace}", stage_lock.lock_name(run, params))
        assert "wait for it to finish" in line and file_tree(workspace) == before
        other = tmp_path / "other"
        other.mkdir()
        (other / "params.yaml").write_text(yaml.safe_dump(make_params_dict(other)))
        with stage_lock.held(run, load_params(other / "params.yaml")):
            pass  # the same stage writing elsewhere runs
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    with stage_lock.held(run, params):
        pass  # the kernel released the killed holder's lock


def test_two_dvc_repro_in_one_workspace_the_second_stops_at_dvcs_lock(tmp_path):
    """DVC's rwlock stops a second `dvc repro` while the first runs the stage: it names the
    output it would write and the first one's pid, exits non-zero and writes nothing; the
    first finishes, and its dvc.lock and output are whole (a third run has nothing to do)."""
    dvc = str(Path(sys.executable).parent / "dvc")
    env = {**os.environ, "DVC_NO_ANALYTICS": "1"}
    subprocess.run([dvc, "init", "--no-scm", "-q"], cwd=tmp_path, check=True, env=env)
    stage = tmp_path / "stage.py"  # runs until the test lets it finish (at most 2 min)
    stage.write_text("import os, time\nfor _ in range(1200):\n    if os.path.exists('go'):\n"
                     "        break\n    time.sleep(0.1)\nopen('out.txt', 'w').write('whole')\n")
    (tmp_path / "dvc.yaml").write_text(yaml.safe_dump({"stages": {"slow": {
        "cmd": f"{sys.executable} stage.py", "deps": ["stage.py"], "outs": ["out.txt"]}}}))
    first = subprocess.Popen([dvc, "repro"], cwd=tmp_path, env=env, text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert first.stdout is not None
    for line in first.stdout:  # the stage's command has started
        if line.startswith("> "):
            break
    second = subprocess.run([dvc, "repro"], cwd=tmp_path, env=env, capture_output=True,
                            text=True)
    (tmp_path / "go").touch()
    rest = first.communicate()[0]
    assert first.returncode == 0, rest
    assert second.returncode != 0
    stop = second.stderr.strip().splitlines()[0]
    assert "out.txt' is busy" in stop and "ERROR" in stop, second.stderr
    assert f"(PID {first.pid})" in second.stderr
    assert (tmp_path / "out.txt").read_text() == "whole"
    lock = yaml.safe_load((tmp_path / "dvc.lock").read_text())
    assert lock["stages"]["slow"]["outs"][0]["path"] == "out.txt"
    third = subprocess.run([dvc, "repro"], cwd=tmp_path, env=env, capture_output=True,
                           text=True, check=True)
    assert "didn't change, skipping" in third.stdout


def test_a_full_disk_while_updating_a_users_folder_names_it_and_keeps_it(tmp_path):
    """`--overwrite` into a folder holding other files stages the new files beside it; a full
    disk then names the user's folder (not the staging one), which stays as it was."""
    from gpt1 import atomic
    from gpt1.errors import Gpt1Error

    dest = tmp_path / "hf"
    dest.mkdir()
    (dest / "mine.txt").write_text("mine")
    (dest / "config.json").write_text("old")
    before = file_tree(tmp_path)
    with pytest.raises(Gpt1Error) as info:
        with atomic.user_folder(dest, True, ["config.json", "model.safetensors"]) as tmp:
            (tmp / "config.json").write_text("new")
            (tmp / "model.safetensors").write_bytes(b"x" * 5000)
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    assert str(info.value).startswith(f"{dest}: no space left on the device")
    assert _needed_bytes(str(info.value)) >= 5000 and file_tree(tmp_path) == before
