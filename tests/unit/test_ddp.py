"""DDP with 2 CPU processes (gloo) and half the accumulation == 1 process, within 1e-5; the
host syncs of a DDP step: none between the loop's sync points (log, eval, checkpoint).

device: cpu throughout: these are the gloo paths, and on a GPU host LOCAL_RANK=1 would name a
second GPU that a one-GPU machine does not have."""

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

OVERRIDES = {"device": "cpu", "pretrain": {"max_tokens": 12 * 4 * 32, "log_interval_steps": 1,
                                           "eval_interval_steps": 6, "precision": "fp32"}}
SPARSE = {"device": "cpu", "pretrain": {"max_tokens": 12 * 4 * 32, "log_interval_steps": 4,
                                        "eval_interval_steps": 6, "checkpoint_interval_steps": 8,
                                        "zero_shot_checkpoints": 0, "precision": "fp32"}}
"""Sync points at updates 4, 6, 8 and 12 only: the updates between them must not sync."""


def _count_host_syncs(syncs: list[int]) -> None:
    """Record, for every host read of a tensor (.item, .tolist) and every stop agreement across
    ranks, the number of updates done so far (patched into this process only)."""
    import gpt1.pretraining as loop

    done = [0]
    step = loop.train_step

    def counted_step(*args, **kwargs):
        out = step(*args, **kwargs)
        done[0] += 1
        return out

    for name in ("item", "tolist"):
        read = getattr(torch.Tensor, name)

        def counted_read(self, *args, _read=read, **kwargs):
            syncs.append(done[0])
            return _read(self, *args, **kwargs)

        setattr(torch.Tensor, name, counted_read)
    agree = loop.stop_agreed

    def counted_agree(*args, **kwargs):
        syncs.append(done[0])
        return agree(*args, **kwargs)

    loop.train_step, loop.stop_agreed = counted_step, counted_agree


def _train(run_dir: Path, out: Path, sparse: bool = False) -> None:
    """One rank of a run; rank 0 writes the per-step losses and val losses to `out`, and with
    SPARSE logging every rank writes its host syncs to out.<rank>."""
    from gpt1.model import GPT
    from gpt1.pretraining import pretrain

    torch.set_num_threads(1)
    syncs: list[int] = []
    if sparse:
        _count_host_syncs(syncs)
    params = parse_params(make_params_dict(run_dir.parent, SPARSE if sparse else OVERRIDES),
                          "tiny")
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
    if sparse:
        Path(f"{out}.{os.environ.get('RANK', '0')}").write_text(json.dumps(syncs))


def _rank(rank: int, world: int, port: int, run_dir: Path, out: Path,
          sparse: bool = False) -> None:
    os.environ.update({"RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(world),
                       "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
    _train(run_dir, out, sparse)


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


@pytest.mark.skipif(not torch.distributed.is_gloo_available(), reason="needs gloo")
def test_ddp_steps_between_sync_points_do_not_sync_the_host(tmp_path):
    """2 ranks, 12 updates, logging every 4, eval every 6, checkpoints every 8: each rank reads
    the device (.item / .tolist) or agrees on a stop only after updates 4, 6, 8 and 12."""
    out = tmp_path / "syncs.json"
    (tmp_path / "two").mkdir()
    mp.spawn(_rank, args=(2, _free_port(), tmp_path / "two" / "run", out, True), nprocs=2)
    for rank in (0, 1):
        syncs = json.loads(Path(f"{out}.{rank}").read_text())
        per_step = {done: syncs.count(done) for done in range(1, 13)}
        assert {d for d, n in per_step.items() if n} == {4, 6, 8, 12}, per_step
        assert per_step[4] >= 3  # loss, grad norm, stop agreement: the counter sees them
