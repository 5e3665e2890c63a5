"""benchmarks/gpu_overhead.py where no GPU is: one line and exit 2 (an unknown part too, named
with the parts there are), and its CPU-runnable half, the update breakdown, on a tiny model."""

from __future__ import annotations

import os
import subprocess
import sys

import gpu_overhead  # benchmarks/ is on the path: pyproject.toml, [tool.pytest.ini_options]
import pytest
import torch

from tests.helpers.repo import REPO


def run(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}  # no GPU visible, on a GPU host too
    return subprocess.run([sys.executable, "benchmarks/gpu_overhead.py", *args], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.slow
def test_without_cuda_or_with_an_unknown_part_it_exits_2_with_one_line():
    done = run()
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines() == [done.stderr.strip()]
    assert done.stderr.startswith("gpu_overhead: no CUDA device: torch ")
    done = run("zero1,micro9")
    assert done.returncode == 2
    assert done.stderr.strip() == ("gpu_overhead: unknown part(s) micro9; parts: "
                                   + ", ".join(gpu_overhead.PARTS))


def test_the_update_breakdown_runs_on_a_tiny_model(monkeypatch):
    tiny = {**gpu_overhead.gpu_check.SMALL, "n_positions": 16, "n_embd": 32, "n_layer": 1,
            "n_head": 2, "n_inner": 64}
    monkeypatch.setattr(gpu_overhead.gpu_check, "PAPER", tiny)
    monkeypatch.setattr(gpu_overhead.gpu_check, "PAPER_VOCAB", 50)
    monkeypatch.setattr(gpu_overhead.gpu_check, "SEQ", 15)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: None)
    check = gpu_overhead.Check("python benchmarks/gpu_overhead.py micro8")
    gpu_overhead.update_breakdown(check, 2, torch.device("cpu"), False)
    first, kernels, host = check.lines
    assert first.startswith("micro-batch 2 x 15 (eager, bf16): ") and "ms an update" in first
    assert kernels.startswith("  top kernels") and host.startswith("  top host operations")


def test_gpu_time_counts_each_kernel_once_and_no_host_operation_or_annotation():
    """The H200 run summed every row's own device time: a host operation (aten::mm) carries
    the time of the kernel it launched, listed again in the kernel's row, and GPU-side
    annotations (## Call CompiledFxGraph, Optimizer.step#...) span kernels: "197 % of the
    wall". Only kernel rows count."""
    from types import SimpleNamespace as Row

    from torch.autograd import DeviceType

    rows = [Row(key="aten::mm", device_type=DeviceType.CPU, is_user_annotation=False,
                self_device_time_total=3000.0),
            Row(key="nvjet_sm90_tst", device_type=DeviceType.CUDA, is_user_annotation=False,
                self_device_time_total=3000.0),
            Row(key="## Call CompiledFxGraph abc", device_type=DeviceType.CUDA,
                is_user_annotation=False, self_device_time_total=5000.0),
            Row(key="Optimizer.step#AdamW.step", device_type=DeviceType.CUDA,
                is_user_annotation=True, self_device_time_total=900.0),
            Row(key="multi_tensor_apply_kernel", device_type=DeviceType.CUDA,
                is_user_annotation=False, self_device_time_total=900.0)]
    assert gpu_overhead.kernel_ms(rows, 3) == pytest.approx(3900.0 / 1e3 / 3)
