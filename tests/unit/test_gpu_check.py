"""benchmarks/gpu_check.py where no GPU is: one line and exit 2, no schema imports (it must run
on a bare-torch GPU host), its paper shape equal to configs/paper.yaml, and its CPU halves (the
reference losses, the 2-rank gloo DDP update) working."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from gpt1.config import load_params

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
import gpu_check  # noqa: E402


def test_without_cuda_it_exits_2_with_one_line():
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}  # no GPU visible, on a GPU host too
    for argv in (["benchmarks/gpu_check.py"], ["-m", "benchmarks.gpu_check"]):
        done = subprocess.run([sys.executable, *argv], cwd=ROOT, env=env, capture_output=True,
                              text=True, timeout=120, check=False)
        assert done.returncode == 2, done.stderr
        assert done.stdout == ""
        lines = done.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("gpu_check: no CUDA device: torch "), lines
        assert "run it on a GPU host" in lines[0]


def test_it_imports_no_schema_or_pydantic():
    code = ("import sys; sys.path.insert(0, 'benchmarks'); import gpu_check; "
            "print(sorted(m for m in ('pydantic', 'yaml', 'gpt1.config', 'gpt1.checkpoint', "
            "'safetensors') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, check=True)
    assert done.stdout.strip() == "[]"


def test_its_paper_shape_is_the_paper_preset():
    model = load_params(ROOT / "configs" / "paper.yaml").model.model_dump()
    assert {k: model[k] for k in gpu_check.PAPER} == gpu_check.PAPER
    assert set(model) - set(gpu_check.PAPER) == {"backend"}


def test_its_cpu_halves_run_and_agree():
    torch.set_num_threads(1)
    cpu = torch.device("cpu")
    first, again = gpu_check.losses(cpu, steps=2), gpu_check.losses(cpu, steps=2)
    assert first == again and first[1] < first[0]
    backend, gap = gpu_check.ddp_vs_one_process(cpu)
    assert backend == "gloo" and gap <= gpu_check.AGREE, gap


@pytest.mark.gpu
def test_it_runs_on_a_gpu(tmp_path):
    """Skipped without CUDA (then it is not a pass): the check's agreement parts on the GPU."""
    cuda = torch.device("cuda", 0)
    assert gpu_check.relative_gap(gpu_check.losses(torch.device("cpu")),
                                  gpu_check.losses(cuda)) <= gpu_check.AGREE
    assert gpu_check.host_syncs_per_step(cuda) == 0
