"""Faults: Ctrl-C / SIGTERM in the training loops, a full disk, writers killed
mid-write. Each ends in one line and a non-zero exit, and leaves nothing half-written."""

from __future__ import annotations

import errno
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from gpt1 import atomic, checkpoint
from gpt1.errors import Gpt1Error
from gpt1.finetune import body_factory, finetune_task, resolve_hparams
from gpt1.interrupt import StoppedError
from gpt1.model import GPT
from gpt1.stages import pretrain as pretrain_stages
from gpt1.tasks.formats import Encoded
from gpt1.tasks.registry import TASKS
from tests.helpers.repo import REPO
from tests.helpers.runs import prepare_run
from tests.helpers.streams import pretrain_tiny

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: one thread (tests/conftest.py)

SHORT = {"pretrain": {"max_tokens": 32 * 4 * 32, "checkpoint_interval_steps": 8,
                      "eval_interval_steps": 16}}


def _cli(params_file: Path, *args: str) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    return subprocess.Popen([sys.executable, "-m", "gpt1", "--params", str(params_file), *args],
                            cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)


def _gpt1_lines(stderr: str) -> list[str]:
    """The CLI's own lines on stderr (logging and progress bars aside)."""
    assert "Traceback" not in stderr, stderr
    return [line for line in stderr.splitlines() if line.startswith("gpt1 ")]


@pytest.mark.slow
def test_sigint_mid_pretraining_then_rerun_equals_uninterrupted(tmp_path):
    """Ctrl-C in a running `gpt1 pretrain` saves, says so in one line, exits 130; the
    re-run resumes to the same final weights as a run never stopped."""
    _, ref = prepare_run(tmp_path, "ref", SHORT)
    pretrain_stages.pretrain(ref)
    params_file, run = prepare_run(tmp_path, "stopped", SHORT)
    run_dir = checkpoint.pretrain_dir(run, "transformer")
    proc = _cli(params_file, "pretrain")
    first = run_dir / checkpoint.ZEROSHOT_DIR / "step_00000004.safetensors"  # end of warm-up
    deadline = time.monotonic() + 120
    while not first.exists():  # a few steps done
        assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()
        time.sleep(0.01)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr
    (line,) = _gpt1_lines(stderr)
    step = int(line.split("stopped at step ")[1].split(";")[0])
    assert line == f"gpt1 pretrain: stopped at step {step}; re-run to resume"
    assert 1 <= step < 32 and not (run_dir / checkpoint.MODEL_FILE).exists()
    assert checkpoint.latest_checkpoint(run_dir).name == f"step_{step:08d}"
    rerun = _cli(params_file, "pretrain")
    assert rerun.wait(timeout=180) == 0, rerun.stderr.read()
    ref_dir = checkpoint.pretrain_dir(ref, "transformer")
    for name in (checkpoint.MODEL_FILE, "zeroshot/step_00000032.safetensors"):
        assert (run_dir / name).read_bytes() == (ref_dir / name).read_bytes()


def test_sigterm_at_an_off_interval_step_checkpoints_there(make_params, tmp_path):
    """SIGTERM at step 12 (checkpoints every 8): a checkpoint at 12, StoppedError with exit
    code 143, and the resumed run's weights equal an uninterrupted run's."""
    params = make_params({"pretrain": {"precision": "fp32"}})
    pretrain_tiny(params, tmp_path / "a")

    def term_at_12(step, metrics):
        if step == 12 and "loss" in metrics:
            os.kill(os.getpid(), signal.SIGTERM)

    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(StoppedError, match="stopped at step 12; re-run to resume") as info:
        pretrain_tiny(params, tmp_path / "b", term_at_12)
    assert info.value.exit_code == 143
    assert signal.getsignal(signal.SIGTERM) is before  # handlers restored
    assert checkpoint.latest_checkpoint(tmp_path / "b").name == "step_00000012"
    pretrain_tiny(params, tmp_path / "b")
    assert ((tmp_path / "a" / checkpoint.MODEL_FILE).read_bytes()
            == (tmp_path / "b" / checkpoint.MODEL_FILE).read_bytes())


def test_disk_full_mid_write_is_one_line_and_leaves_no_temp(tmp_path):
    """ENOSPC while a writer fills its temp path: a Gpt1Error naming the destination; the temp
    file and the directories the write created are gone, an existing dest is untouched."""
    dest = tmp_path / "out" / "deep" / "table.parquet"
    with pytest.raises(Gpt1Error) as info:
        with atomic.atomic_path(dest) as tmp:
            tmp.write_bytes(b"half a table")
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    assert str(info.value).startswith(f"{dest}: no space left on the device")
    assert "\n" not in str(info.value)
    assert not (tmp_path / "out").exists()
    atomic.write_bytes(dest, b"old")
    with pytest.raises(Gpt1Error, match="no space left"):
        with atomic.atomic_path(dest) as tmp:
            raise OSError(errno.ENOSPC, "No space left on device")
    assert dest.read_bytes() == b"old"
    assert sorted(p.name for p in dest.parent.iterdir()) == ["table.parquet"]


def test_replacing_a_file_or_folder_leaves_nothing_hidden_beside_it(tmp_path):
    """A directory written over an existing file or directory: the old one goes with the temp
    path, no `.name.old` (or any other entry) is left beside the destination."""
    for old in ("file", "folder"):
        dest = tmp_path / old / "out"
        dest.parent.mkdir()
        if old == "file":
            dest.write_text("old")
        else:
            (dest / "sub").mkdir(parents=True)
        with atomic.atomic_path(dest) as tmp:
            tmp.mkdir()
            (tmp / "new.txt").write_text("new")
        assert sorted(p.name for p in dest.parent.iterdir()) == ["out"]
        assert sorted(p.name for p in dest.iterdir()) == ["new.txt"]


def test_stale_temp_of_a_dead_writer_is_removed_by_the_next_write(tmp_path):
    """A writer killed mid-write leaves `.name.<pid>.*.tmp`; the next write of that
    destination removes it, while a live writer's temp path is left alone."""
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    stale = tmp_path / f".index.json.{int(dead.stdout)}.abc123xy.tmp"
    live = tmp_path / f".index.json.{os.getppid()}.zzz999qq.tmp"
    for path in (stale, live):
        (path / "index.json").mkdir(parents=True)
    atomic.write_json(tmp_path / "index.json", {"ok": True})
    assert not stale.exists() and live.exists()


def _tiny_split(n: int, seed: int) -> Encoded:
    rng = np.random.default_rng(seed)
    seqs = [[[int(t) for t in rng.integers(1, 16, 6)]] for _ in range(n)]
    return Encoded(seqs, rng.integers(0, 2, n), [str(i) for i in range(n)], [""] * n,
                   [False] * n)


def test_sigint_mid_finetune_stops_in_one_line_and_leaves_no_output_dir(make_params, tmp_path):
    """Fine-tuning restarts on re-run (a run is minutes): Ctrl-C stops it with exit code 130
    and no output directory, not even a seed's predictions, where the report would read."""
    params = make_params({"finetune": {"init": "scratch", "epochs": 1, "seeds": [0, 1],
                                       "log_interval_steps": 1}})  # a callback every update
    hp = resolve_hparams(params, "sst2")
    data = {"train": _tiny_split(16, 0), "dev": _tiny_split(8, 1), "test": _tiny_split(8, 2)}
    make_body = body_factory("scratch", None, None, lambda: GPT(params.model, 16), n_special=3)
    out = tmp_path / "finetuned" / "sst2"

    def sigint_at_6(step, metrics):  # seed 0 ran 4 steps + its test step; seed 1 runs
        if step == 6:
            os.kill(os.getpid(), signal.SIGINT)

    before = signal.getsignal(signal.SIGINT)  # SIG_IGN where pytest runs as a background job
    with pytest.raises(StoppedError, match="stopped at step 1 of seed 1") as info:
        finetune_task(TASKS["sst2"], hp, data, make_body, out, sigint_at_6)
    assert info.value.exit_code == 130
    assert signal.getsignal(signal.SIGINT) is before  # the handler found is restored
    assert not out.exists() and not list(out.parent.glob(".*"))
    finetune_task(TASKS["sst2"], hp, data, make_body, out, lambda step, m: None)
    assert sorted(p.name for p in out.iterdir()) == [
        "predictions_seed0.parquet", "predictions_seed1.parquet",
        "train_ids_seed0.parquet", "train_ids_seed1.parquet"]


@pytest.mark.slow
def test_killed_shard_corpus_leaves_no_temp_dir_after_the_next_run(tmp_path):
    """SIGKILL while shard_corpus writes its temp directory; the re-run removes it."""
    params_file, params = prepare_run(tmp_path, "run", {})
    texts = [" ".join(f"w{(i * 7 + k) % 101} the of w{i % 13}" for i in range(8000))
             for k in range(60)]
    corpus = pd.DataFrame({"doc_id": [f"d{k}" for k in range(60)], "text": texts})
    atomic.write_bytes(params.paths.clean_corpus, corpus.to_parquet() or b"")
    out = Path(params.paths.shards)
    shutil.rmtree(out)
    temps = lambda: list(out.parent.glob(f".{out.name}.*.tmp"))  # noqa: E731
    for _ in range(3):  # the window is a second or so; retried if the run finished first
        proc = _cli(params_file, "shard_corpus")
        deadline = time.monotonic() + 120
        while not temps() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.002)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        if proc.returncode == -signal.SIGKILL and temps():
            break
    left = temps()
    assert left and not out.exists(), "never killed shard_corpus mid-write"
    rerun = _cli(params_file, "shard_corpus")
    assert rerun.wait(timeout=120) == 0, rerun.stderr.read()
    assert not temps() and not any(p.exists() for p in left)
    assert (out / "index.json").is_file()


def test_finetune_runs_where_the_params_say_on_a_gpu_host(make_params, tmp_path, monkeypatch):
    """device: cpu on a host where torch sees a GPU: finetune_task's default device is the
    params' (hp.device), so it never touches CUDA (`auto` would pick cuda:0 here)."""
    params = make_params({"device": "cpu", "finetune": {"init": "scratch", "epochs": 1}})
    hp = resolve_hparams(params, "sst2")
    assert hp.device == "cpu"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)

    def no_cuda(*args, **kwargs):
        raise AssertionError("CUDA touched")

    monkeypatch.setattr(torch.cuda, "set_device", no_cuda)
    data = {"train": _tiny_split(16, 0), "dev": _tiny_split(8, 1), "test": _tiny_split(8, 2)}
    make_body = body_factory("scratch", None, None, lambda: GPT(params.model, 16), n_special=3)
    result = finetune_task(TASKS["sst2"], hp, data, make_body, tmp_path / "sst2",
                           lambda step, m: None)
    assert result["n_train"] == 16
