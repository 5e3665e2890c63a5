"""DDP with 2 CPU processes (gloo) and half the accumulation == 1 process, within 1e-5."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp

from gpt1.config import parse_params
from tests.conftest import make_params_dict
from tests.unit.test_train import VOCAB, _tokens

OVERRIDES = {"pretrain": {"max_tokens": 12 * 4 * 32, "log_interval_steps": 1,
                          "eval_interval_steps": 6, "precision": "fp32"}}


def _train(run_dir: Path, out: Path) -> None:
    """One rank of a run; rank 0 writes the per-step losses and val losses to `out`."""
    from gpt1.model import GPT
    from gpt1.pretraining import pretrain

    torch.set_num_threads(1)
    params = parse_params(make_params_dict(run_dir.parent, OVERRIDES), "tiny")
    torch.manual_seed(params.seed)
    model = GPT(params.model, VOCAB)
    seen: list[tuple[int, dict]] = []
    metrics = pretrain(model, [_tokens(3000, 1), _tokens(2000, 2)], [_tokens(1000, 3)], params,
                       run_dir, {"kind": "gpt", "vocab_size": VOCAB, "tokenizer_hash": "h" * 64},
                       1.0, lambda step, m: seen.append((step, m)))
    if int(os.environ.get("RANK", "0")) == 0:
        losses = [m["loss"] for _, m in seen if "loss" in m]
        out.write_text(json.dumps({"losses": losses, "world": metrics["world_size"],
                                   "val": [h["val_loss"] for h in metrics["history"]]}))


def _rank(rank: int, world: int, port: int, run_dir: Path, out: Path) -> None:
    os.environ.update({"RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(world),
                       "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
    _train(run_dir, out)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.skipif(not torch.distributed.is_gloo_available(), reason="needs gloo")
def test_two_process_gloo_equals_one_process(tmp_path, monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    single = tmp_path / "single.json"
    _train(tmp_path / "one" / "run", single)  # 1 rank x accumulation 2
    double = tmp_path / "double.json"
    (tmp_path / "two").mkdir()
    mp.spawn(_rank, args=(2, _free_port(), tmp_path / "two" / "run", double), nprocs=2)
    a, b = json.loads(single.read_text()), json.loads(double.read_text())
    assert (a["world"], b["world"]) == (1, 2)
    assert len(a["losses"]) == len(b["losses"]) == 12
    for x, y in zip(a["losses"] + a["val"], b["losses"] + b["val"], strict=True):
        assert abs(x - y) <= 1e-5, (x, y)
