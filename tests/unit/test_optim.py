"""LR schedule and weight-decay groups."""

from __future__ import annotations

import pytest
import torch

from gpt1.model import GPT
from gpt1.optim import build_optimizer, lr_at


@pytest.mark.parametrize("schedule", ["cosine", "linear"])
def test_schedule_endpoints(schedule):
    total, warmup, peak = 1000, 100, 2.5e-4
    assert lr_at(0, total, warmup, peak, schedule) == 0.0
    assert lr_at(warmup, total, warmup, peak, schedule) == pytest.approx(peak)
    assert lr_at(total, total, warmup, peak, schedule) == pytest.approx(0.0, abs=1e-15)
    assert lr_at(warmup // 2, total, warmup, peak, schedule) == pytest.approx(peak / 2)
    lrs = [lr_at(s, total, warmup, peak, schedule) for s in range(total + 1)]
    assert max(lrs) == pytest.approx(peak)
    assert all(a <= b for a, b in zip(lrs[:warmup], lrs[1 : warmup + 1], strict=True))
    assert all(a >= b for a, b in zip(lrs[warmup:], lrs[warmup + 1 :], strict=False))


def test_cosine_midpoint_and_linear_midpoint():
    assert lr_at(550, 1000, 100, 1.0, "cosine") == pytest.approx(0.5)
    assert lr_at(550, 1000, 100, 1.0, "linear") == pytest.approx(0.5)
    assert lr_at(775, 1000, 100, 1.0, "cosine") == pytest.approx(0.5 * (1 + 2**-0.5 * -1), abs=1e-9)


def test_schedule_refuses_out_of_range():
    with pytest.raises(ValueError):
        lr_at(11, 10, 2, 1.0, "cosine")


def test_no_weight_decay_on_biases_or_gains(tiny_params):
    model = GPT(tiny_params.model, vocab_size=50)
    opt = build_optimizer(model, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
    by_id = {id(p): name for name, p in model.named_parameters()}
    for group in opt.param_groups:
        for p in group["params"]:
            name = by_id[id(p)]
            is_bias_or_gain = name.endswith("bias") or ".ln_" in name or name.startswith("ln_")
            assert (group["weight_decay"] == 0.0) == is_bias_or_gain, name
    n_grouped = sum(len(g["params"]) for g in opt.param_groups)
    assert n_grouped == len(list(model.parameters()))


def test_decay_is_decoupled_and_skips_gains(tiny_params):
    """With zero gradients Adam's step is 0, so only decoupled decay moves weights."""
    model = GPT(tiny_params.model, vocab_size=50)
    opt = build_optimizer(model, lr=0.1, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.5)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    opt.step()
    for name, p in model.named_parameters():
        if p.dim() > 1:
            torch.testing.assert_close(p, before[name] * (1 - 0.1 * 0.5))
        else:
            torch.testing.assert_close(p, before[name], rtol=0, atol=0)
