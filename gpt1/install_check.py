"""Importing this module stops the process with one line when gpt1 is not installed for the
running interpreter.

dvc.yaml's stages run `python -m gpt1 ...` with whatever `python` comes first on PATH: from a
shell without the project venv activated (e.g. `.venv/bin/dvc repro`), that is an interpreter
without the project's dependencies, and the first missing import would end in a traceback.
`gpt1/__main__.py` imports this module before anything else of the project.
"""

from __future__ import annotations

import sys
from importlib import metadata

try:
    metadata.distribution("gpt1")
except metadata.PackageNotFoundError:
    sys.stderr.write(
        f"gpt1: error: the gpt1 package is not installed for {sys.executable} (a shell without "
        "the project venv?): run `source .venv/bin/activate` (after `bash setup.sh`) first\n"
    )
    raise SystemExit(2) from None  # a config error: retrying cannot heal it
