"""pretrain.cuda_graphs on the CPU: the dropout reseeding rule the graphed and eager paths
share, the updates going through the graphed module and evaluation through the eager one, one
warning line where the graphs cannot run, and the recording counter a GPU check reads."""

from __future__ import annotations

import logging

import pytest
import torch

from gpt1 import graphs
from gpt1.data.loader import WindowSampler
from gpt1.model import GPT
from gpt1.pretraining import CausalLM, step_micro_batches
from gpt1.step import micro_batch_seed, seeded_loss
from tests.helpers.streams import VOCAB, pretrain_tiny, token_stream

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: one thread (tests/conftest.py)


def test_a_micro_batch_seed_is_a_pure_function_of_seed_step_and_micro_batch():
    seed = micro_batch_seed(1234, 7, 3)
    assert seed == micro_batch_seed(1234, 7, 3) and 0 <= seed < 2**63
    assert len({seed, micro_batch_seed(1235, 7, 3), micro_batch_seed(1234, 8, 3),
                micro_batch_seed(1234, 7, 2)}) == 4
    # the loop's micro-batches of a step carry the same seeds and windows however split
    sampler = WindowSampler([token_stream(3000, 1)], 16, 1234)
    cpu = torch.device("cpu")
    one = step_micro_batches(sampler, 1234, 5, 0, 4, 1, 4, cpu)
    two = [b for r in (0, 1) for b in step_micro_batches(sampler, 1234, 5, r, 2, 1, 4, cpu)]
    assert [s for s, _ in one] == [s for s, _ in two] == [micro_batch_seed(1234, 5, m)
                                                          for m in range(4)]
    assert all(torch.equal(a, b) for (_, a), (_, b) in zip(one, two, strict=True))


def test_the_same_seed_gives_a_bitwise_equal_loss_and_another_seed_another(tiny_params):
    torch.manual_seed(0)
    module = CausalLM(GPT(tiny_params.model, VOCAB)).train()  # dropout on
    windows = torch.from_numpy(token_stream(2 * 17, 0).astype("int64")).view(2, 17)
    seed = micro_batch_seed(1234, 3, 0)
    first = seeded_loss(module, (seed, windows))
    torch.rand(100)  # the generator moved on in between: the reseed makes it irrelevant
    assert torch.equal(first, seeded_loss(module, (seed, windows)))
    assert not torch.equal(first, seeded_loss(module, (micro_batch_seed(1235, 3, 0), windows)))


class Graphed(torch.nn.Module):
    """A stand-in for the CUDA-graphed wrapper on the CPU: the same module, calls counted."""

    def __init__(self, module: torch.nn.Module) -> None:
        super().__init__()
        self.module, self.calls = module, 0

    def forward(self, windows: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return self.module(windows)


def test_updates_go_through_the_graphed_module_with_the_eager_path_seeds(make_params, tmp_path,
                                                                         monkeypatch):
    """With the graphed wrapper in place (a stand-in, as no CUDA is here), every micro-batch
    goes through it with the seeds of the eager path, evaluation does not, and the weights
    equal the eager run's bit for bit."""
    params = make_params({"device": "cpu", "pretrain": {"precision": "fp32"}})
    pretrain_tiny(params, tmp_path / "eager")
    made: list[Graphed] = []
    monkeypatch.setattr(graphs, "unusable", lambda *args: None)
    monkeypatch.setattr(graphs, "graphed", lambda module: made.append(Graphed(module))
                        or made[-1])
    on = params.model_copy(update={"pretrain": params.pretrain.model_copy(
        update={"cuda_graphs": True, "compile": True})})
    metrics = pretrain_tiny(on, tmp_path / "graphed")
    (wrapper,) = made
    assert metrics["cuda_graphs"] is True
    assert wrapper.calls == metrics["steps"] * metrics["accumulation"]  # no evaluation call
    for name in ["model.safetensors", "zeroshot/step_00000032.safetensors"]:
        assert (tmp_path / "eager" / name).read_bytes() == (tmp_path / "graphed" / name
                                                            ).read_bytes()


def test_where_cuda_graphs_cannot_run_one_line_says_why(make_params, tmp_path, caplog):
    cuda, cpu = torch.device("cuda", 0), torch.device("cpu")
    assert graphs.unusable(cpu, 1, 1) == "the device is cpu, not a GPU"
    assert graphs.unusable(cuda, 8, 1) == "not with DDP (8 ranks) yet"
    assert graphs.unusable(cuda, 1, 2) == "one micro-batch an update needed (2 accumulated)"
    assert graphs.unusable(cuda, 1, 1, compiler=False) == ("no C compiler (torch.compile needs "
                                                           "one)")
    assert graphs.unusable(cuda, 1, 1) is None
    assert graphs.training_module(torch.nn.Linear(1, 1), False, cpu, 1, 1, True) is None
    params = make_params({"pretrain": {"precision": "fp32", "cuda_graphs": True,
                                       "compile": True}})  # device auto: the CPU here
    with caplog.at_level(logging.WARNING):
        metrics = pretrain_tiny(params.model_copy(update={"pretrain": params.pretrain.model_copy(
            update={"compile": False})}), tmp_path / "run")  # eager: no compiler needed here
    lines = [r.getMessage() for r in caplog.records if "cuda_graphs" in r.getMessage()]
    assert lines == ["pretrain.cuda_graphs: the device is cpu, not a GPU: running without CUDA "
                     "graphs"]
    assert metrics["cuda_graphs"] is False and metrics["cuda_graph_rerecordings"] == 0


def test_the_recording_counter_counts_cuda_graph_recordings_only_while_counting():
    from torch._dynamo.callback import CallbackTrigger, callback_handler

    recordings = graphs.Recordings()
    with recordings.counting():
        with callback_handler.install_callbacks(CallbackTrigger.CUDAGRAPH_RECORDING, "0/0"):
            pass
        with callback_handler.install_callbacks(CallbackTrigger.DYNAMO, "0/1"):
            pass
    with callback_handler.install_callbacks(CallbackTrigger.CUDAGRAPH_RECORDING, "0/2"):
        pass
    assert recordings.count == 1
