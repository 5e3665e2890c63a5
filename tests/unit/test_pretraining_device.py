"""The training loop's device paths: no-sync NaN handling, device choice, cost projection,
torch.compile, and (gpu marker) a few steps on CUDA."""

from __future__ import annotations

import logging

import numpy as np
import pytest
import torch

from gpt1 import runtime
from gpt1.backends import backend_of
from gpt1.errors import Gpt1Error
from gpt1.model import GPT
from gpt1.optim import build_optimizer
from gpt1.pretraining import CausalLM, cost_projection
from gpt1.runtime import has_fast_bf16
from gpt1.step import NonFiniteLossError, NonFiniteWatch, step_values, train_step
from tests.helpers.streams import VOCAB, pretrain_tiny, token_stream

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: one thread (tests/conftest.py)

NO_DROPOUT = {"resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0}


def _model_and_opt(tiny_params):
    torch.manual_seed(0)
    model = CausalLM(GPT(tiny_params.model, VOCAB))
    return model, build_optimizer(model, 1e-2, (0.9, 0.999), 1e-8, 0.01)


def _batch() -> torch.Tensor:
    return torch.from_numpy(token_stream(2 * 17, 0).astype(np.int64)).view(2, 17)


def _snapshot(model, opt):
    weights = {k: v.clone() for k, v in model.state_dict().items()}
    state = {id(p): {k: v.clone() for k, v in s.items()} for p, s in opt.state.items()}
    return weights, state


def _assert_unchanged(before, model, opt):
    weights, state = before
    for k, v in model.state_dict().items():
        assert torch.equal(v, weights[k]), k
    for p, s in opt.state.items():
        for k, v in s.items():
            assert torch.equal(v, state[id(p)][k]), k


def test_non_finite_step_applies_no_update_and_is_reported(tiny_params):
    model, opt = _model_and_opt(tiny_params)
    train_step(model, opt, [_batch()], lambda m, b: m(b), 1e-2, 1.0, "fp32")  # state exists
    before = _snapshot(model, opt)
    out = train_step(model, opt, [_batch()], lambda m, b: m(b) * float("nan"), 1e-2, 1.0, "fp32")
    assert not bool(out[2])
    _assert_unchanged(before, model, opt)
    with pytest.raises(NonFiniteLossError, match="non-finite loss nan"):
        step_values(out, 1e-2)


def test_halted_flag_skips_a_finite_update(tiny_params):
    model, opt = _model_and_opt(tiny_params)
    train_step(model, opt, [_batch()], lambda m, b: m(b), 1e-2, 1.0, "fp32")
    before = _snapshot(model, opt)
    out = train_step(model, opt, [_batch()], lambda m, b: m(b), 1e-2, 1.0, "fp32",
                     halted=torch.tensor(True))
    assert bool(out[2])
    _assert_unchanged(before, model, opt)
    train_step(model, opt, [_batch()], lambda m, b: m(b), 1e-2, 1.0, "fp32",
               halted=torch.tensor(False))
    assert not torch.equal(model.state_dict()["lm.h.0.ln_1.weight"],
                           before[0]["lm.h.0.ln_1.weight"])


def test_watch_names_the_first_bad_step(tmp_path):
    watch = NonFiniteWatch(torch.device("cpu"))
    one, nan = torch.tensor(1.0), torch.tensor(float("nan"))
    watch.record(3, one, one, torch.tensor(True))
    watch.check(tmp_path)  # nothing bad yet
    assert not bool(watch.halted)
    watch.record(4, nan, torch.tensor(2.5), torch.tensor(False))
    watch.record(5, torch.tensor(float("inf")), one, torch.tensor(False))
    assert bool(watch.halted)
    with pytest.raises(NonFiniteLossError, match=r"loss nan / grad norm 2.5 at step 4;.*None"):
        watch.check(tmp_path)


def test_the_device_is_the_local_rank_gpu(monkeypatch):
    """`cpu` is the CPU on any host; `auto` and `cuda` take this process's GPU (LOCAL_RANK)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert runtime.device("auto") == runtime.device("cpu") == torch.device("cpu")
    chosen = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "set_device", chosen.append)
    monkeypatch.setenv("LOCAL_RANK", "3")
    assert runtime.device("auto") == runtime.device("cuda") == torch.device("cuda", 3)
    assert runtime.device("cpu") == torch.device("cpu")
    assert chosen == [3, 3]


def test_cuda_without_a_gpu_stops_in_one_line_naming_the_build(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.version, "cuda", None)
    with pytest.raises(Gpt1Error, match=r"^device: cuda, but torch .* is a CPU-only build; on "
                                         r"a GPU host run `bash setup.sh`"):
        runtime.device("cuda")
    monkeypatch.setattr(torch.version, "cuda", "12.8")
    with pytest.raises(Gpt1Error, match=r"\(CUDA 12.8\) sees no GPU"):
        runtime.check_device("cuda")
    runtime.check_device("auto")  # auto and cpu never stop
    runtime.check_device("cpu")


def test_cost_projection_and_its_log_line(make_params, tmp_path, caplog):
    plan = cost_projection(1000, 6e3, 2_000_000, tokens_per_s=500.0)
    assert plan == {"params": 1000.0, "flops_per_token": 6e3, "tokens": 2e6, "flops": 1.2e10,
                    "hours": 2e6 / 500.0 / 3600.0}
    assert "hours" not in cost_projection(1000, 6e3, 10)
    params = make_params({"pretrain": {"precision": "fp32", "max_tokens": 1280}})
    with caplog.at_level(logging.INFO, logger="gpt1.pretraining"):
        pretrain_tiny(params, tmp_path / "run")
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("cost:")]
    n_params = sum(p.numel() for p in GPT(params.model, VOCAB).parameters())
    assert lines[0] == f"cost: {n_params:.4g} parameters, 1 FLOP/token, 1280 tokens planned, " \
                       "1280 FLOP in all"
    assert "over steps 2-4:" in lines[1] and " h in all" in lines[1]


@pytest.mark.slow
def test_compiled_pretrain_matches_eager(make_params, tmp_path, caplog):
    # pytest captures every level; torch's DEBUG trace logging then trips dynamo on the
    # current model's autograd Functions (an internal error, not seen at the CLI's INFO level)
    caplog.set_level(logging.INFO)
    losses: dict[bool, list[float]] = {}
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    for compiled in (False, True):
        params = make_params({"device": "cpu",  # the CPU backend's compiled custom ops
                              "model": {**NO_DROPOUT, "n_layer": 1},
                              "pretrain": {"precision": "fp32", "max_tokens": 384,
                                           "log_interval_steps": 1, "compile": compiled}})
        seen: list[tuple[int, dict[str, float]]] = []
        pretrain_tiny(params, tmp_path / str(compiled), lambda s, m, out=seen: out.append((s, m)))
        losses[compiled] = [m["loss"] for _, m in seen if "loss" in m]
    assert len(losses[True]) == 3
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] > 0  # it did compile
    np.testing.assert_allclose(losses[True], losses[False], rtol=1e-5)


@pytest.mark.slow
def test_the_gpu_recipe_trains_on_cpu_through_the_torch_backend(make_params, tmp_path):
    """What a GPU worker runs (gpt1/model.py as written: SDPA attention with dropout_p, torch's
    dropout, bf16 autocast, torch.compile, the no-sync NaN watch), run on CPU: where no GPU is
    lent, this is the CUDA code path's check short of the device itself. On a CPU that
    emulates bf16 (AVX2-only x86-64: a bf16 GEMM ~50x slower than fp32) the same recipe runs
    a quarter of the tokens and must take half the validation-loss drop (measured there:
    0.41 after 3,200 tokens)."""
    torch._dynamo.reset()
    tokens, drop = (12800, 0.5) if has_fast_bf16() else (3200, 0.25)
    params = make_params({"device": "cpu",  # the CPU on any host, a GPU one included
                          "pretrain": {"precision": "bf16", "compile": True,
                                       "max_tokens": tokens, "lr_max": 3e-3}})
    model = GPT(params.model, VOCAB)
    assert backend_of(model) == "torch" and params.model.attn_pdrop > 0
    metrics = pretrain_tiny(params, tmp_path / "run")
    assert metrics["precision"] == "bf16"
    history = metrics["history"]
    assert history[-1]["val_loss"] < history[0]["val_loss"] - drop


@pytest.mark.gpu
def test_a_few_steps_on_cuda(make_params, tmp_path):
    """Skipped without CUDA (then it is not a pass): bf16, compiled, pinned copies, the
    device-side NaN watch, on the GPU."""
    params = make_params({"pretrain": {"precision": "auto", "compile": True,
                                       "max_tokens": 12800, "lr_max": 3e-3}})
    metrics = pretrain_tiny(params, tmp_path / "run")
    assert metrics["precision"] == "bf16"
    history = metrics["history"]
    assert history[-1]["val_loss"] < history[0]["val_loss"] - 0.5


def test_compile_without_a_c_compiler_falls_back_to_eager_with_one_warning(monkeypatch, caplog):
    """torch.compile needs a C compiler at run time: without one the module stays eager and one
    warning names the key and the fix; with one it is compiled in place."""
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.setattr(runtime.shutil, "which", lambda name: None)
    module = torch.nn.Linear(2, 2)
    with caplog.at_level(logging.WARNING, logger="gpt1.runtime"):
        assert runtime.compile_or_eager(module, "pretrain.compile") is False
    assert [r.getMessage() for r in caplog.records] == [
        "pretrain.compile: no C compiler (cc, gcc or clang on PATH, or $CC), which torch.compile "
        "needs at run time: running eager (install one, e.g. apt-get install gcc)"]
    assert module._compiled_call_impl is None
    monkeypatch.setattr(runtime.shutil, "which", lambda name: f"/usr/bin/{name}")
    assert runtime.c_compiler() == "/usr/bin/cc"
    monkeypatch.setenv("CC", "clang")
    assert runtime.c_compiler() == "/usr/bin/clang"
    assert runtime.compile_or_eager(module, "pretrain.compile") is True
    assert module._compiled_call_impl is not None
