"""benchmarks/gpu_check.py where no GPU is: one line and exit 2, no schema imports (it must run
on a bare-torch GPU host), its paper shape and batch split equal to configs/paper.yaml, its CPU
halves (the reference losses, the 2-rank gloo DDP update, the workloads at a small shape, the
real pre-training loop) working, and a results file that names a failed or timed-out part."""

from __future__ import annotations

import os
import subprocess
import sys

import gpu_check  # benchmarks/ is on the path: pyproject.toml, [tool.pytest.ini_options]
import gpu_workloads
import pytest
import torch

from gpt1.config import load_params
from gpt1.errors import Gpt1Error
from tests.helpers.repo import REPO


@pytest.mark.slow
def test_without_cuda_it_exits_2_with_one_line():
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}  # no GPU visible, on a GPU host too
    for argv in (["benchmarks/gpu_check.py"], ["-m", "benchmarks.gpu_check"]):
        done = subprocess.run([sys.executable, *argv], cwd=REPO, env=env, capture_output=True,
                              text=True, timeout=120, check=False)
        assert done.returncode == 2, done.stderr
        assert done.stdout == ""
        lines = done.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("gpu_check: no CUDA device: torch "), lines
        assert "run it on a GPU host" in lines[0]


@pytest.mark.slow
def test_it_imports_no_schema_or_pydantic():
    code = ("import sys; import benchmarks.gpu_check; "
            "print(sorted(m for m in ('pydantic', 'yaml', 'gpt1.config', 'gpt1.checkpoint', "
            "'safetensors') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                          text=True, timeout=120, check=True)
    assert done.stdout.strip() == "[]"


def test_its_paper_shape_is_the_paper_preset():
    paper = load_params(REPO / "configs" / "paper.yaml")
    model = paper.model.model_dump()
    assert {k: model[k] for k in gpu_check.PAPER} == gpu_check.PAPER
    assert set(model) - set(gpu_check.PAPER) == {"backend"}
    lstm = paper.lstm.model_dump()
    assert {k: lstm[k] for k in gpu_check.PAPER_LSTM} == gpu_check.PAPER_LSTM
    assert set(lstm) - set(gpu_check.PAPER_LSTM) == {"lr_max"}
    pre, ft = paper.pretrain.model_dump(), paper.finetune.model_dump()
    assert {k: pre[k] for k in gpu_workloads.PAPER_PRETRAIN} == gpu_workloads.PAPER_PRETRAIN
    assert {k: ft[k] for k in gpu_workloads.PAPER_FINETUNE} == gpu_workloads.PAPER_FINETUNE


@pytest.mark.slow
def test_its_cpu_halves_run_and_agree():
    torch.set_num_threads(1)
    cpu = torch.device("cpu")
    first, again = gpu_check.losses(cpu, steps=2), gpu_check.losses(cpu, steps=2)
    assert first == again and first[1] < first[0]
    # the ZeRO-1 arm: the plain arm's code with the sharded optimizer (one spawn, not two)
    backend, gap = gpu_check.ddp_vs_one_process(cpu, zero1=True)
    assert backend == "gloo" and gap <= gpu_check.AGREE, gap


def test_its_workloads_run_on_the_cpu_at_a_small_shape():
    """The preset split (probe, then micro x accumulation), the fine-tuning update and the real
    pre-training loop, through the code the GPU runs (tiny sizes, CPU)."""
    torch.set_num_threads(1)
    cpu = torch.device("cpu")
    small = {**gpu_check.SMALL, "n_positions": 16, "n_embd": 32, "n_head": 2, "n_inner": 64}
    assert gpu_workloads.probe_micro(small, 50, 15, 4, "fp32", cpu, 1e12) == 4
    with pytest.raises(Gpt1Error, match="micro_batch_seqs: auto: one sequence needs"):
        gpu_workloads.probe_micro(small, 50, 15, 4, "fp32", cpu, 1e3)
    rate, _ = gpu_workloads.update_rate(small, 50, 15, 2, 2, "fp32", cpu, False, windows=2,
                                        per_window=1)
    assert len(rate.windows) == 2 and rate.median > 0 and rate.tokens_per_update == 2 * 2 * 15
    lstm = {**gpu_check.PAPER_LSTM, "hidden_size": 16, "n_embd": 8}
    rate, _ = gpu_workloads.update_rate(lstm, 50, 15, 2, 1, "fp32", cpu, False, windows=1,
                                        per_window=1)
    assert rate.median > 0
    rate, _ = gpu_workloads.finetune_step(small, 50, "race", 2, 4, 16, "fp32", cpu, False, 1, 1)
    assert rate.median > 0
    m = gpu_workloads.pretrain_loop(cpu, steps=4, overrides={
        "model": {"n_positions": 16, "n_embd": 32, "n_layer": 1, "n_head": 2, "n_inner": 64},
        "pretrain": {"batch_seqs": 4, "seq_len": 16, "compile": False, "precision": "fp32"}})
    assert m["steps"] == 4 and m["host_syncs"] == 0 and m["checkpoint_writing_s"] > 0
    assert m["micro_batch_seqs"] * m["accumulation"] == 4
    assert [step for step, _ in m["windows"]] == [1, 2, 3, 4]  # a log window every steps // 4
    assert all(rate > 0 for _, rate in m["windows"])


def test_the_cut_and_whole_update_rows_run_on_the_cpu_at_a_small_shape(monkeypatch):
    """The rows of the memory-bound cuts and of the whole update captured (its recording stood
    in for on the CPU: each replay runs the update) through the code the GPU runs, and the
    dropout rule under the captured update."""
    from gpt1 import step

    torch.set_num_threads(1)
    cpu = torch.device("cpu")
    small = {**gpu_check.SMALL, "n_positions": 16, "n_embd": 32, "n_head": 2, "n_inner": 64}
    for cuts in (gpu_check.ALL_CUTS, *gpu_check.ONE_CUT):
        rate, _ = gpu_workloads.update_rate(small, 50, 15, 2, 1, "fp32", cpu, False, windows=1,
                                            per_window=1, cuts=cuts)
        assert rate.median > 0
    assert gpu_check.ALL_CUTS.text() == ("pretrain.loss_chunk_tokens 8192, pretrain.fused_clip, "
                                         "pretrain.bf16_norms")
    assert gpu_workloads.NO_CUTS.text() == "no cuts"
    monkeypatch.setattr(step, "record_cuda_graph", lambda run, stream: run)
    rate, _ = gpu_workloads.update_rate(small, 50, 15, 2, 1, "fp32", cpu, False, True,
                                        windows=2, per_window=2, scope="update")
    assert len(rate.windows) == 2 and rate.median > 0
    dropout = {**gpu_check.SMALL_DROPOUT, "n_positions": 16, "n_embd": 32, "n_head": 2,
               "n_inner": 64}
    out = gpu_workloads.graph_reseeding(dropout, 50, 15, 2, "fp32", cpu, True, scope="update",
                                        compile_=False)
    assert out["same_seed_equal"] and out["other_seed_differs"]
    assert out["recordings"] == 1 and out["rerecordings"] == 0


@pytest.mark.slow
def test_the_cuts_agree_with_the_uncut_updates_on_the_cpu():
    """The check's agreement part for the cuts: fp32 within AGREE, bf16 (emulated here) within
    CUTS_BF16_AGREE."""
    torch.set_num_threads(1)
    fp32, bf16 = gpu_check.cuts_agreement(torch.device("cpu"), steps=2)
    assert fp32 <= gpu_check.AGREE and bf16 <= gpu_check.CUTS_BF16_AGREE, (fp32, bf16)


def test_a_part_past_its_own_limit_is_skipped_and_said_so():
    check = gpu_check.Check("gpu_check (test)")
    ran = []
    check.part("fits", lambda: ran.append(1), until=60)
    check.started -= 100  # 100 s later
    check.part("late", lambda: ran.append(2), until=60)
    assert ran == [1] and check.lines == ["late: skipped, past 60 s"] and not check.failed


def test_a_rate_is_the_median_of_its_windows_with_their_spread():
    """Each window is timed apart (the host clock on the CPU, CUDA events on a GPU): a slow
    window moves the spread, not the median."""
    import time

    calls = []

    def update(i):
        calls.append(i)
        time.sleep(0.03 if 9 <= i < 11 else 0.002)  # window 3 (updates 9-10) is slow

    rate = gpu_workloads.windowed_rate(update, 100, torch.device("cpu"), windows=5,
                                       per_window=2, warmup=3)
    assert calls == list(range(13)) and len(rate.windows) == 5
    assert min(rate.windows) == rate.windows[3] < rate.median / 3
    text = rate.text()
    assert text.startswith(f"{rate.median:,.0f} tokens/s (median of 5 windows of 2 updates, ")
    assert "an update" in text and "its host enqueue" in text


def test_seconds_lost_per_checkpoint_from_the_log_windows():
    """Windows of 20 updates at 100 tokens an update: steady 1,000 tokens/s (2 s a window);
    the windows after the checkpoints at 80 and 160 took 2.5 s and 3 s: 0.75 s a checkpoint."""
    windows = [(20 * (i + 1), 1000.0) for i in range(11)]
    windows[4] = (100, 2000 / 2.5)
    windows[8] = (180, 2000 / 3.0)
    lost, steady = gpu_workloads.lost_per_checkpoint(windows, 100, [80, 160])
    assert steady == 1000.0 and lost == pytest.approx(0.75)
    assert gpu_workloads.lost_per_checkpoint(windows[:3], 100, [80])[0] == 0.0


def test_the_dropout_rule_check_runs_on_the_cpu_eager():
    """The GPU check's reseeding part through the eager module: the same (seed, step,
    micro-batch) gives a bitwise-equal loss, another seed another, nothing recorded."""
    torch.set_num_threads(1)
    small = {**gpu_check.SMALL_DROPOUT, "n_positions": 16, "n_embd": 32, "n_head": 2,
             "n_inner": 64}
    out = gpu_workloads.graph_reseeding(small, 50, 15, 2, "fp32", torch.device("cpu"), False)
    assert out["same_seed_equal"] and out["other_seed_differs"]
    assert out["loss"] == out["same_loss"] != out["other_loss"]
    assert out["recordings"] == out["rerecordings"] == 0


def test_a_failed_part_is_named_and_a_hung_one_still_writes_the_file(tmp_path):
    code = f"""
import time
from pathlib import Path
from benchmarks import gpu_check
import results_file  # the module gpu_check writes through (it put benchmarks/ on its path)
from tests.helpers.repo import REPO
results_file.RESULTS_DIR = Path({str(tmp_path)!r})
check = gpu_check.Check("gpu_check (test)", hard_cap_s=3)
check.watchdog.start()
check.part("fails", lambda: 1 / 0)
check.part("measures", lambda: check.report("measured 1"))
check.part("hangs", lambda: time.sleep(60))
"""
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 1, done.stderr
    (written,) = tmp_path.glob("gpu_*.md")
    text = written.read_text()
    assert "fails: ZeroDivisionError: division by zero  <-- FAILED" in text
    assert "measured 1" in text
    assert "hard time cap: stopped at 3 s during part 'hangs'  <-- FAILED" in text


@pytest.mark.gpu
def test_it_runs_on_a_gpu(tmp_path):
    """Skipped without CUDA (then it is not a pass): the check's agreement parts on the GPU."""
    cuda = torch.device("cuda", 0)
    assert gpu_check.relative_gap(gpu_check.losses(torch.device("cpu")),
                                  gpu_check.losses(cuda)) <= gpu_check.AGREE
    assert gpu_check.host_syncs_per_step(cuda) == 0


def test_it_collects_only_the_files_that_hold_gpu_tests():
    """A GPU host without MLflow, Prefect or DVC must still collect the `-m gpu` tests."""
    files = gpu_check.gpu_test_files()
    assert "tests/unit/benchmarks/test_gpu_check.py" in files
    assert "tests/unit/test_pretraining_device.py" in files
    assert all("pytest.mark.gpu" in (gpu_check.ROOT / f).read_text() for f in files)


def test_synchronizing_calls_counts_sync_warnings_made_inside_with_their_stacks(monkeypatch):
    """The mode is switched on before the record (its own warning is not a sync), off after,
    and only sync-debug warnings raised inside the block are kept, each with its stack."""
    import warnings

    modes: list[str] = []

    def switch(mode: str) -> None:
        modes.append(mode)
        if mode == "warn":
            warnings.warn("synchronizing operations will now warn", stacklevel=1)  # as torch did

    monkeypatch.setattr(torch.cuda, "set_sync_debug_mode", switch)
    with gpu_workloads.synchronizing_calls(torch.device("cuda")) as calls:
        warnings.warn("called a synchronizing CUDA operation", stacklevel=1)
        warnings.warn("an unrelated warning", stacklevel=1)
    assert modes == ["warn", "default"]
    assert len(calls) == 1
    assert any(f.name == test_synchronizing_calls_counts_sync_warnings_made_inside_with_their_stacks
               .__name__ for f in calls[0])  # the stack that made the call
    with gpu_workloads.synchronizing_calls(torch.device("cpu")) as calls:
        warnings.warn("called a synchronizing CUDA operation", stacklevel=1)
    assert calls == [] and modes == ["warn", "default"]  # nothing counted or switched on CPU
