"""Any x86-64 CPU: the model, LSTM and kernel tests also pass with the machine capped to AVX2.

An AVX-512 or AMX machine runs bf16 natively; an AVX2-only one (e.g. AMD EPYC before Zen 4)
emulates it and its oneDNN has no bf16 LSTM. This test re-runs those test files in a
subprocess with every layer capped to AVX2: oneDNN (ONEDNN_MAX_CPU_ISA), ATen's vector
kernels (ATEN_CPU_CAPABILITY) and the C kernels (GPT1_KERNEL_MARCH=x86-64-v3, built into a
fresh cache; torch.compile's cache too), so a developer on an AVX-512 chip sees an AVX2-only
failure before it lands. On an AVX2-only chip (or a run already capped) the plain suite is
that run, and this one skips saying so.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.repo import REPO

MODEL_TESTS = ["tests/unit/test_model.py", "tests/unit/test_lstm.py",
               "tests/unit/backends/test_kernels.py"]
CAPPED = {"ONEDNN_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2",
          "GPT1_KERNEL_MARCH": "x86-64-v3"}


def _has_avx512() -> bool:
    try:
        text = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        return False
    return any(ln.startswith("flags") and "avx512f" in ln.split() for ln in text.splitlines())


@pytest.mark.slow
def test_model_tests_pass_capped_to_avx2(tmp_path: Path) -> None:
    if platform.machine() not in ("x86_64", "AMD64"):
        pytest.skip(f"AVX2 is an x86-64 ISA; this machine is {platform.machine()}")
    if os.environ.get("ONEDNN_MAX_CPU_ISA", "").upper() == "AVX2":
        pytest.skip("this run is already capped to AVX2 (ONEDNN_MAX_CPU_ISA=AVX2)")
    if not _has_avx512():
        pytest.skip("this CPU has no AVX-512: the plain run of the model tests is the AVX2 run")
    # fresh build caches: torch.compile's, filled by an uncapped run, gives NaN or a segfault
    env = {**os.environ, **CAPPED, "GPT1_KERNEL_CACHE": str(tmp_path / "kernels"),
           "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *MODEL_TESTS],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=1200,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "passed" in proc.stdout
    assert list((tmp_path / "kernels").glob("kernels-*.so")), "the AVX2 C kernels were not built"
