"""pretrain.micro_batch_seqs: auto -- the probe's choice under a fake memory limit, recorded in
the checkpoints and model.json, reused by a resume with as many ranks."""

from __future__ import annotations

import pytest
import torch

from gpt1 import checkpoint, micro_batch
from gpt1.errors import Gpt1Error
from gpt1.model import GPT
from gpt1.pretraining import CausalLM
from tests.helpers.streams import VOCAB, CrashError, crash_at_12, pretrain_tiny

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: one thread (tests/conftest.py)

AUTO = {"device": "cpu", "pretrain": {"precision": "fp32", "micro_batch_seqs": "auto"}}


def test_choose_takes_the_largest_divisor_that_fits():
    def measure(m):  # 1 GiB fixed + 1 GiB a sequence; 6 sequences never fit (a failed probe)
        return float("inf") if m == 6 else float((1 + m) * 2**30)

    limit = 8 * 2**30 / micro_batch.HEADROOM  # 8 GiB to plan for
    assert micro_batch.choose(12, measure, limit) == 4  # 12 and 6 do not fit; 4 -> 5 GiB
    assert micro_batch.choose(8, measure, limit) == 4
    assert micro_batch.choose(7, measure, limit) == 7  # 8 GiB: exactly the budget
    assert micro_batch.choose(5, measure, limit / 2) == 1  # 5 needs 6 GiB of 4
    with pytest.raises(Gpt1Error, match="micro_batch_seqs: auto: one sequence needs 2,048 MiB"):
        micro_batch.choose(4, measure, 1.5 * 2**30)


def test_the_cpu_probe_grows_with_the_micro_batch(tiny_params):
    model = CausalLM(GPT(tiny_params.model, VOCAB))
    measure = micro_batch.probe(model, 32, VOCAB, "fp32", torch.device("cpu"), 0)
    state = torch.get_rng_state()
    one, two, four = measure(1), measure(2), measure(4)
    assert one < two < four and four - two == pytest.approx(2 * (two - one), rel=0.2)
    assert torch.equal(torch.get_rng_state(), state)  # no random draw left behind
    assert all(p.grad is None for p in model.parameters())


def _limit_between(params, low, high):
    """A fake memory limit between the probe's peaks at `low` and `high` sequences (with the
    Adam moments a fresh run has yet to allocate)."""
    model = CausalLM(GPT(params.model, VOCAB))
    moments = 2 * sum(p.numel() * p.element_size() for p in model.parameters())
    measure = micro_batch.probe(model, params.pretrain.seq_len, VOCAB, "fp32",
                                torch.device("cpu"), moments)
    return (measure(low) + measure(high)) / 2 / micro_batch.HEADROOM


def test_auto_picks_from_the_probe_records_it_and_resumes_with_it(make_params, tmp_path,
                                                                  monkeypatch):
    """batch 4 on one rank: a limit between the peaks at 2 and 4 sequences picks 2 (2 micro
    x 2 accumulation), recorded; a crashed run resumed under a limit where 4 fits keeps 2 and
    ends bit-identical to the run never stopped."""
    params = make_params(AUTO)
    tight = _limit_between(params, 2, 4)
    monkeypatch.setattr(micro_batch, "memory_limit", lambda device, world: tight)
    metrics = pretrain_tiny(params, tmp_path / "a")
    assert (metrics["micro_batch_seqs"], metrics["accumulation"]) == (2, 2)
    meta = checkpoint.read_model_meta(tmp_path / "a")
    assert meta["split"] == {"micro_batch_seqs": 2, "world_size": 1}
    with pytest.raises(CrashError):
        pretrain_tiny(params, tmp_path / "b", crash_at_12)
    state = checkpoint.read_checkpoint_state(checkpoint.latest_checkpoint(tmp_path / "b"))
    assert state["split"] == {"micro_batch_seqs": 2, "world_size": 1}
    monkeypatch.setattr(micro_batch, "memory_limit", lambda device, world: 1e15)
    assert pretrain_tiny(params, tmp_path / "b")["micro_batch_seqs"] == 2  # recorded, not re-probed
    for name in ["model.safetensors", "zeroshot/step_00000032.safetensors"]:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    fresh = pretrain_tiny(params, tmp_path / "c")  # a fresh run: it all fits
    assert fresh["micro_batch_seqs"] == 4


def test_auto_on_more_ranks_than_the_batch_splits_over_is_refused(make_params):
    cfg = make_params(AUTO).pretrain
    assert cfg.accumulation(2) == 1
    with pytest.raises(Gpt1Error, match=r"batch_seqs=4 does not split over 3 ranks"):
        cfg.accumulation(3)
    assert micro_batch.eval_window_count(cfg) == cfg.eval_batches * cfg.batch_seqs
