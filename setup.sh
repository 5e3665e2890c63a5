#!/usr/bin/env bash
# Create .venv with the locked dependency set (constraints.txt) and gpt1 installed editable.
#   CPU-only machine (default when nvidia-smi is absent): the CPU build of torch 2.13.0.
#   GPU machine: the CUDA build; pick another CUDA index with TORCH_INDEX=<pytorch wheel index URL>.
#   TORCH_BUILD=cuda forces the CUDA build where nvidia-smi is absent (a `docker build`).
set -euo pipefail
cd "$(dirname "$0")"
PYTHON=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
PIP=(.venv/bin/pip install --disable-pip-version-check -q)
if [ -n "${TORCH_INDEX:-}" ] || [ "${TORCH_BUILD:-}" = cuda ] || command -v nvidia-smi >/dev/null 2>&1; then
  # pip counts an installed 2.13.0+cpu as torch==2.13.0: remove a CPU build before installing
  if .venv/bin/python -c "import sys, torch; sys.exit(torch.version.cuda is not None)" 2>/dev/null; then
    .venv/bin/pip uninstall -y -q torch
  fi
  if [ -n "${TORCH_INDEX:-}" ]; then
    "${PIP[@]}" torch==2.13.0 --index-url "$TORCH_INDEX"
  else
    "${PIP[@]}" torch==2.13.0                    # PyPI's Linux wheel bundles CUDA
  fi
else
  # PyPI's Linux torch wheel bundles CUDA (~5 GB); the CPU index has the 750 MB CPU build.
  "${PIP[@]}" torch==2.13.0 --extra-index-url https://download.pytorch.org/whl/cpu \
    --retries 0 --timeout 15
fi
"${PIP[@]}" -c constraints.txt -e ".[dev]"
.venv/bin/python -c "import torch, gpt1; print('gpt1 ready: torch', torch.__version__, \
  '| CUDA' if torch.cuda.is_available() else '| CPU')"
