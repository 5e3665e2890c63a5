"""Canonical task tables and the DPRD file, generated (random words, never real data): what
prepare_task and the mirror leave, for tests that start after the data stages."""

from __future__ import annotations

import random
from pathlib import Path

import pandas as pd

WORDS = "the a cat dog sat ran on mat good bad film very positive negative it he she".split()

DPRD = ("The cat sat on the dog because it was good.\nit\nThe cat,the dog\nthe dog\n\n"
        "The dog ran at the cat because it was bad.\nit\nThe dog,the cat\nThe dog\n")
"""Two DPRD examples in the mirror's `<split>.c.txt` format."""


def sentence(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def table(task: str, n: int, rng: random.Random) -> pd.DataFrame:
    """`n` rows of `task`'s canonical table (gpt1.tasks.load's columns)."""
    rows = []
    for i in range(n):
        choices = [sentence(rng, 2) for _ in range(4)] if task == "race" else []
        label = rng.randrange(4 if task == "race" else 3 if task == "mnli" else 2)
        rows.append({"id": f"{task}{i}", "text_a": sentence(rng, 6),
                     "text_b": "" if task in ("cola", "sst2") else sentence(rng, 3),
                     "choices": choices, "label": label,
                     "group": rng.choice(["middle", "high"]) if task == "race" else "",
                     "source": f"gen:{i}"})
    return pd.DataFrame(rows)


def write_dprd(mirror_dir: str | Path, split: str = "test") -> Path:
    """The DPRD file the zero-shot stages read from the mirror."""
    path = Path(mirror_dir) / "tasks" / "DPRD" / f"{split}.c.txt"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(DPRD)
    return path
