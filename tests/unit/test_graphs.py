"""pretrain.cuda_graphs on the CPU: the dropout reseeding rule the graphed and eager paths
share, the updates going through the graphed module and evaluation through the eager one, the
whole update captured (cuda_graph_scope: update) with a stand-in for the recording, one
warning line where the graphs cannot run, a refusal with DDP, and the recording counter a GPU
check reads."""

from __future__ import annotations

import logging

import pytest
import torch

from gpt1 import graphs
from gpt1 import step as step_module
from gpt1.data.loader import WindowSampler
from gpt1.model import GPT
from gpt1.pretraining import CausalLM, step_micro_batches
from gpt1.step import WholeUpdate, micro_batch_seed, seeded_loss
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
    assert graphs.unusable(cpu, 1) == "the device is cpu, not a GPU"
    assert graphs.unusable(cuda, 2) == "one micro-batch an update needed (2 accumulated)"
    assert graphs.unusable(cuda, 1, compiler=False) == "no C compiler (torch.compile needs one)"
    assert graphs.unusable(cuda, 1) is None
    assert graphs.usable(False, cpu, 1, True) is False
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


def test_cuda_graphs_with_several_ddp_ranks_are_refused_naming_the_key(make_params, monkeypatch):
    """One line naming the key, before any rank is launched (the launcher) and at each rank's
    start (torchrun by hand)."""
    from gpt1 import launcher
    from gpt1.errors import Gpt1Error

    params = make_params({"pretrain": {"cuda_graphs": True, "compile": True, "nproc": 2}})
    with pytest.raises(Gpt1Error, match=r"^pretrain\.cuda_graphs: true with 8 DDP ranks: CUDA "
                       r"graphs under DDP are not supported yet \(its all-reduce hooks\); set "
                       r"pretrain\.cuda_graphs: false, or pretrain\.nproc: 1$"):
        params.pretrain.refuse_graphs_with_ddp(8)
    params.pretrain.refuse_graphs_with_ddp(1)
    make_params().pretrain.refuse_graphs_with_ddp(8)  # off: any rank count
    monkeypatch.setattr(launcher, "launch_ranks", lambda *a: pytest.fail("ranks launched"))
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    monkeypatch.setattr(launcher, "rank", lambda: None)
    with pytest.raises(Gpt1Error, match="true with 2 DDP ranks"):
        launcher.launch_if_needed(["pretrain"], params, "params.yaml")


def run_now(run, stream):
    """A stand-in for recording a CUDA graph on the CPU: each replay runs the update."""
    return run


def test_the_whole_update_captured_keeps_the_eager_bytes_and_the_optimizer_state(tiny_params):
    """WholeUpdate with the stand-in recording: 2 eager updates, the third recorded, then
    replays over the captured inputs (the batch copied in, the lr and halt flag filled, the
    generator reseeded before each): the weights and Adam state equal plain train_step's bit
    for bit, with dropout on; a halted update changes nothing; the param groups hold floats."""
    from gpt1.optim import build_optimizer
    from gpt1.step import train_step

    windows = torch.from_numpy(token_stream(6 * 2 * 17, 0).astype("int64")).view(6, 2, 17)
    runs = []
    for whole in (False, True):
        torch.manual_seed(0)
        module = CausalLM(GPT(tiny_params.model, VOCAB)).train()
        opt = build_optimizer(module, 1e-3, (0.9, 0.999), 1e-8, 0.01)
        recordings = graphs.Recordings(on=False)
        update = WholeUpdate(module, opt, 0.5, "fp32", True, graphs.WARMUP_STEPS,
                             recordings.recorded, record=run_now)
        halted = torch.zeros((), dtype=torch.bool)
        losses = []
        for step in range(6):
            batch = [(micro_batch_seed(1234, step, 0), windows[step])]
            lr = 1e-3 * (step + 1)
            out = (update(batch, lr, halted) if whole else
                   train_step(module, opt, batch, seeded_loss, lr, 0.5, "fp32", halted, True))
            losses.append(out[0])
        if whole:
            assert recordings.count == 1 and update.eager_updates == graphs.WARMUP_STEPS - 1
            assert [g["lr"] for g in opt.param_groups] == [1e-3 * 6] * 2
            assert not any(g["capturable"] for g in opt.param_groups)
            before = [p.detach().clone() for p in module.parameters()]
            update([(micro_batch_seed(1234, 6, 0), windows[0])], 1e-3, torch.ones((), dtype=bool))
            assert all(torch.equal(a, p) for a, p in zip(before, module.parameters(), strict=True))
        runs.append((losses, module.state_dict(), opt.state_dict()["state"]))
    (eager_losses, eager_w, eager_s), (whole_losses, whole_w, whole_s) = runs
    assert all(torch.equal(a, b) for a, b in zip(eager_losses, whole_losses, strict=True))
    assert all(torch.equal(eager_w[k], whole_w[k]) for k in eager_w)
    assert all(torch.equal(eager_s[i][k], whole_s[i][k]) for i in eager_s for k in eager_s[i])


def test_the_whole_update_replay_keeps_the_dropout_rule(tiny_params):
    """Through the captured update (stand-in recording), at lr 0: the same (seed, step,
    micro-batch) twice gives a bitwise-equal loss, another seed another."""
    from gpt1.optim import build_optimizer

    torch.manual_seed(0)
    module = CausalLM(GPT(tiny_params.model, VOCAB)).train()
    opt = build_optimizer(module, 0.0, (0.9, 0.999), 1e-8, 0.0)
    update = WholeUpdate(module, opt, 1.0, "fp32", False, graphs.WARMUP_STEPS, lambda: None,
                         record=run_now)
    windows = torch.from_numpy(token_stream(2 * 17, 0).astype("int64")).view(2, 17)
    halted = torch.zeros((), dtype=torch.bool)
    for step in range(graphs.WARMUP_STEPS):
        update([(micro_batch_seed(1234, step, 0), windows)], 0.0, halted)
    first = update([(micro_batch_seed(1234, 7, 0), windows)], 0.0, halted)[0]
    torch.rand(100)  # the generator moved on in between: the reseed makes it irrelevant
    again = update([(micro_batch_seed(1234, 7, 0), windows)], 0.0, halted)[0]
    other = update([(micro_batch_seed(1235, 7, 0), windows)], 0.0, halted)[0]
    assert torch.equal(first, again) and not torch.equal(first, other)


def test_the_loop_with_the_whole_update_captured_ends_with_the_eager_bytes(make_params,
                                                                          tmp_path, monkeypatch):
    """cuda_graph_scope: update in the real loop (the recording stood in for on the CPU): the
    captured update runs every step after warm-up, evaluation stays eager, and the files equal
    the eager run's bit for bit; one recording, none after warm-up."""
    params = make_params({"device": "cpu", "pretrain": {"precision": "fp32",
                                                        "micro_batch_seqs": 4}})  # one a step
    pretrain_tiny(params, tmp_path / "eager")
    monkeypatch.setattr(graphs, "unusable", lambda *args: None)
    monkeypatch.setattr(step_module, "record_cuda_graph", run_now)
    replays = []
    real_call = WholeUpdate.__call__
    monkeypatch.setattr(WholeUpdate, "__call__", lambda self, *a: (
        replays.append(self.replay is not None), real_call(self, *a))[1])
    on = params.model_copy(update={"pretrain": params.pretrain.model_copy(
        update={"cuda_graphs": True, "compile": False, "cuda_graph_scope": "update"})})
    metrics = pretrain_tiny(on, tmp_path / "whole")
    assert metrics["cuda_graphs"] is True
    assert metrics["cuda_graph_recordings"] == 1 and metrics["cuda_graph_rerecordings"] == 0
    assert replays == [False] * graphs.WARMUP_STEPS + [True] * (metrics["steps"] - 3)
    for name in ["model.safetensors", "zeroshot/step_00000032.safetensors"]:
        assert (tmp_path / "eager" / name).read_bytes() == (tmp_path / "whole" / name
                                                            ).read_bytes()
