"""Importing this module stops the process with one line when the running interpreter lacks
gpt1's dependencies.

dvc.yaml's stages run `python -m gpt1 ...` with whatever `python` comes first on PATH: from a
shell without the project venv activated (e.g. `.venv/bin/dvc repro`), that is an interpreter
without the project's dependencies, and the first missing import would end in a traceback.
`gpt1/__main__.py` imports this module before anything else of the project.

The check looks for the dependencies themselves, not for gpt1's package metadata: an editable
install leaves `gpt1.egg-info` in the repository, which any interpreter started there finds.
"""

from __future__ import annotations

import sys
from importlib.util import find_spec

# Import names of the dependencies every stage needs (pyproject.toml `dependencies`).
REQUIRED = ("yaml", "pydantic", "numpy", "pandas", "torch", "tqdm")

missing = [name for name in REQUIRED if find_spec(name) is None]
if missing:
    sys.stderr.write(
        f"gpt1: error: {sys.executable} lacks gpt1's dependencies ({', '.join(missing)}): a "
        "shell without the project venv? run `source .venv/bin/activate` (after `bash "
        "setup.sh`) first\n"
    )
    raise SystemExit(2)  # a config error: retrying cannot heal it
