"""On a generated task of each family with a learnable rule, fine-tuning a tiny model from
scratch reaches >= 95% dev accuracy: the formats, head, losses and loop are wired end to end."""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest

from gpt1.finetune import body_factory, finetune_task, resolve_hparams
from gpt1.model import GPT
from gpt1.tasks.formats import Specials, Truncation, encode_table
from gpt1.tasks.registry import TASKS

WORDS = "cat dog sat ran mat big red blue tree bird sang sky sun".split()
MARKS = ["good", "bad"]
VOCAB = {w: i for i, w in enumerate(WORDS + MARKS + ["alpha", "beta"], start=1)}  # 0 = pad
SP = Specials(start=len(VOCAB) + 1, delimiter=len(VOCAB) + 2, classify=len(VOCAB) + 3)
VOCAB_SIZE = len(VOCAB) + 4


def encode(texts: list[str]) -> list[list[int]]:
    return [[VOCAB[w] for w in t.split()] for t in texts]


def _filler(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 5)))


def _with(word: str, rng: random.Random) -> str:
    """Filler words with `word` at a random position."""
    ws = _filler(rng).split()
    ws.insert(rng.randint(0, len(ws)), word)
    return " ".join(ws)


def synthetic(task: str, n: int, seed: int) -> pd.DataFrame:
    """Rules: classify - which marker the text holds; entail - entailment iff the hypothesis
    holds "good" (the premise's marker is a distractor); similarity - 1 iff either sentence
    holds "good" (symmetric); choice - the answer holding "good"."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        m1, m2 = rng.choice(MARKS), rng.choice(MARKS)
        a, b, choices = _with(m1, rng), _with(m2, rng), []
        if task == "sst2":
            b, label = "", MARKS.index(m1)
        elif task == "rte":
            label = int(m2 != "good")  # 0 = entailment
        elif task == "mrpc":
            label = int("good" in (m1, m2))
        else:  # story_cloze: two answers, one holds "good"
            label = rng.randrange(2)
            choices = [_with("good" if k == label else "bad", rng) for k in range(2)]
            b = ""
        rows.append({"id": f"{i}", "text_a": a, "text_b": b, "choices": choices,
                     "label": label, "group": "", "source": f"gen:{i}"})
    return pd.DataFrame(rows)


@pytest.mark.parametrize("task", ["sst2", "rte", "mrpc", "story_cloze"])
def test_tiny_model_learns_each_family(task: str, make_params, tmp_path: Path) -> None:
    spec = TASKS[task]
    params = make_params({
        "finetune": {"lr": 3e-3, "batch_size": 16, "epochs": 6, "warmup_frac": 0.1,
                     "lm_coef": 0.5, "seeds": [0], "max_train_examples": None,
                     "max_eval_examples": None, "select": "dev",
                     # random batches: pools of 50 leave MRPC's rule unlearnt (gpt1/batching.py)
                     "bucket_pool_batches": None},
        "pretrain": {"precision": "fp32"},
        "model": {"resid_pdrop": 0.0, "attn_pdrop": 0.0, "embd_pdrop": 0.0},
    })
    tr = Truncation(n_ctx=params.model.n_positions, rule="half", keep="head")
    data = {split: encode_table(synthetic(task, n, seed), spec, encode, SP, tr)
            for split, n, seed in (("train", 512, 0), ("dev", 128, 1), ("test", 128, 2))}
    hp = resolve_hparams(params, task)
    make_body = body_factory("scratch", None, None, lambda: GPT(params.model, VOCAB_SIZE),
                             n_special=3)
    seen: list[dict[str, float]] = []
    result = finetune_task(spec, hp, data, make_body, tmp_path / task,
                           lambda step, m: seen.append(m))
    dev_acc = max(h["acc"] for h in result["seeds"][0]["dev_history"])
    assert dev_acc >= 0.95, result["seeds"][0]["dev_history"]
    assert result["scores"]["acc"]["mean"] >= 0.9
    assert (tmp_path / task / "predictions_seed0.parquet").is_file()
    assert any("train/loss" in m for m in seen) and any("dev/acc" in m for m in seen)
    assert replace(hp, lm_coef=0.0).lm_coef == 0.0
