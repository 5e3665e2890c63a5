"""The fine-tuning step on a device: no host read between log points (counted as the
pre-training DDP test counts them), the LM loss's chunked cross-entropy equal to the whole one
and never holding the logits of every position at once, and the compiled step equal to eager."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gpt1 import finetune
from gpt1.finetune import body_factory, finetune_task, resolve_hparams
from gpt1.heads import TaskModel
from gpt1.model import GPT
from gpt1.task_losses import chunked_lm_losses, lm_loss
from gpt1.tasks.formats import Encoded
from gpt1.tasks.registry import TASKS
from tests.helpers.counters import count_updates, patch_host_reads

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: one thread (tests/conftest.py)

V = 50


def _choice_split(n: int, seed: int) -> Encoded:
    """n RACE-shaped examples (4 answers of 5..20 tokens each), labels 0..3."""
    rng = np.random.default_rng(seed)
    seqs = [[rng.integers(1, V - 3, rng.integers(5, 21)).tolist() for _ in range(4)]
            for _ in range(n)]
    return Encoded(seqs, rng.integers(0, 4, n), [str(i) for i in range(n)], [""] * n,
                   [False] * n)


def _finetune(make_params, tmp_path, over, on_metrics=lambda step, m: None):
    params = make_params({"device": "cpu", "pretrain": {"precision": "fp32"},
                          "finetune": {"batch_size": 4, "epochs": 2, "seeds": [0],
                                       "max_train_examples": None, **over}})
    data = {"train": _choice_split(24, 0), "test": _choice_split(8, 1)}
    make_body = body_factory("scratch", None, None, lambda: GPT(params.model, V), n_special=3)
    return finetune_task(TASKS["race"], resolve_hparams(params, "race"), data, make_body,
                         tmp_path / "out", on_metrics, device=torch.device("cpu"))


def test_no_host_read_between_log_points(make_params, tmp_path, monkeypatch):
    """2 epochs of 6 updates, logging every 4: the loop reads the device (.item, .tolist,
    .cpu, nonzero) only after updates 4, 6 (an epoch's end), 8 and 12 (the end, then the test
    split's predictions)."""
    reads: list[int] = []
    done = count_updates(finetune, monkeypatch.setattr)
    patch_host_reads(lambda: reads.append(done[0]), ("item", "tolist", "cpu", "nonzero"),
                     monkeypatch.setattr)
    logged: list[int] = []
    _finetune(make_params, tmp_path, {"log_interval_steps": 4},
              lambda at, m: logged.append(at) if "train/loss" in m else None)
    assert done[0] == 12
    assert sorted(set(reads)) == [4, 6, 8, 12], reads
    assert logged == [4, 6, 8, 12]


def test_the_chunked_lm_loss_equals_the_whole_one_and_holds_one_chunk(tiny_params):
    torch.manual_seed(0)
    model = TaskModel(GPT(tiny_params.model, V), TASKS["race"], 0.0, 0.02)
    h = torch.randn(23, tiny_params.model.n_embd, requires_grad=True)
    targets = torch.randint(0, V, (23,))
    whole = model.lm_losses(h, targets)
    (gh,) = torch.autograd.grad(whole.sum(), h)
    biggest = [0]

    def pack(t):
        biggest[0] = max(biggest[0], t.numel())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        parts = chunked_lm_losses(model, h, targets, chunk=5)
    (gc,) = torch.autograd.grad(parts.sum(), h)
    torch.testing.assert_close(parts, whole, rtol=0, atol=1e-6)
    torch.testing.assert_close(gc, gh, rtol=0, atol=1e-6)
    assert biggest[0] < 23 * V  # never the logits of all 23 positions
    idx = torch.randint(1, V, (3, 1, 9))
    lengths = torch.tensor([[9], [4], [6]])
    model.eval()
    _, hs = model(idx, lengths)
    assert lm_loss(model, hs, idx, lengths).isfinite()


@pytest.mark.slow
def test_the_compiled_step_equals_eager(tiny_params, monkeypatch):
    """finetune.compile compiles the task model in place: three updates on one RACE-shaped
    batch give eager's losses within 1e-5 (no dropout, whose compiled masks differ), the LM
    loss in chunks of 64 positions (recomputed in backward) as on a GPU batch."""
    from gpt1 import task_losses
    from gpt1.finetune import collate
    from gpt1.optim import build_optimizer
    from gpt1.runtime import compile_or_eager
    from gpt1.step import train_step
    from gpt1.task_losses import make_loss_fn

    monkeypatch.setattr(task_losses, "LM_CHUNK_TOKENS", 64)
    cfg = tiny_params.model.model_copy(update={"resid_pdrop": 0.0, "embd_pdrop": 0.0,
                                               "attn_pdrop": 0.0})
    split = _choice_split(2, 0)
    idx, lengths = collate(split.seqs, torch.device("cpu"))
    batch = (idx, lengths, torch.as_tensor(split.labels))
    runs = []
    for comp in (False, True):
        torch.manual_seed(0)
        model = TaskModel(GPT(cfg, V), TASKS["race"], 0.0, 0.02)
        if comp:
            assert compile_or_eager(model, "finetune.compile")
        opt = build_optimizer(model, 1e-3, (0.9, 0.999), 1e-8, 0.01)
        loss_fn = make_loss_fn(TASKS["race"], 0.5)
        runs.append([float(train_step(model, opt, [batch], loss_fn, 1e-3, 1.0, "fp32")[0])
                     for _ in range(3)])
    for a, b in zip(*runs, strict=True):
        assert abs(a - b) <= 1e-5, runs
