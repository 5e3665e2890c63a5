"""train_step, the pre-training loop: learning, resume == uninterrupted, NaN stop, metrics."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gpt1 import checkpoint
from gpt1.model import GPT
from gpt1.optim import build_optimizer
from gpt1.pretraining import CausalLM, pretrain, zero_shot_steps
from gpt1.runtime import has_fast_bf16, resolve_precision
from gpt1.step import NonFiniteLossError, step_values, train_step

VOCAB = 64


@pytest.fixture(autouse=True)
def _one_thread():
    """Tiny models gain nothing from 2 threads, and OpenMP spin-waits badly on a shared CPU."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _tokens(n: int, seed: int) -> np.ndarray:
    """A learnable stream: a repeated random phrase with some noise tokens."""
    phrase = np.random.default_rng(0).integers(0, VOCAB, 40)
    rng = np.random.default_rng(seed)
    stream = np.tile(phrase, n // 40 + 1)[:n]
    noise = rng.random(n) < 0.05
    stream[noise] = rng.integers(0, VOCAB, noise.sum())
    return stream.astype(np.uint16)


def _run(params, run_dir, on_metrics=lambda s, m: None):
    torch.manual_seed(params.seed)
    model = GPT(params.model, VOCAB)
    meta = {"kind": "transformer", "vocab_size": VOCAB, "tokenizer_hash": "h" * 64}
    train = [_tokens(3000, 1), _tokens(2000, 2)]
    val = [_tokens(1000, 3)]
    return pretrain(model, train, val, params, run_dir, meta, 1.0, on_metrics)


class CrashError(Exception):
    pass


def _crash_at_12(step, metrics):
    if step == 12:
        raise CrashError


def _loss(model, batch):
    return model(batch)


def test_accumulation_matches_one_big_batch(tiny_params):
    cfg = tiny_params.model.model_copy(update={"resid_pdrop": 0.0, "embd_pdrop": 0.0,
                                               "attn_pdrop": 0.0})
    batch = torch.from_numpy(_tokens(4 * 17, 0).astype(np.int64)).view(4, 17)
    states = []
    for micro in ([batch], [batch[:2], batch[2:]]):
        torch.manual_seed(0)
        model = CausalLM(GPT(cfg, VOCAB))
        opt = build_optimizer(model, 1e-3, (0.9, 0.999), 1e-8, 0.01)
        out = step_values(train_step(model, opt, micro, _loss, 1e-3, 1.0, "fp32"), 1e-3)
        states.append((out, model.state_dict()))
    (a, sa), (b, sb) = states
    assert a["loss"] == pytest.approx(b["loss"], abs=1e-6)
    assert a["grad_norm"] == pytest.approx(b["grad_norm"], rel=1e-5)
    for k in sa:
        torch.testing.assert_close(sa[k], sb[k], rtol=1e-5, atol=1e-6)


def test_pretrain_learns_and_writes_outputs(make_params, tmp_path):
    params = make_params({"pretrain": {"max_tokens": 12800, "lr_max": 3e-3}})
    seen = []
    metrics = _run(params, tmp_path / "run", lambda s, m: seen.append((s, m)))
    history = metrics["history"]
    assert history[-1]["val_loss"] < history[0]["val_loss"] - 0.5
    assert metrics["val_ppl"] == pytest.approx(np.exp(history[-1]["val_loss"]))
    assert any("tokens_per_s" in m and "flops_per_s" in m and "lr" in m for _, m in seen)
    model, meta = checkpoint.load_model(tmp_path / "run", "h" * 64)
    assert meta["step"] == metrics["steps"] == 100
    assert sorted(int(s) for s in meta["zeroshot"]) == zero_shot_steps(100, 3, 4) == [0, 4, 100]
    assert zero_shot_steps(1464, 5, 100) == [0, 100, 245, 598, 1464]  # log-spaced after warm-up
    assert zero_shot_steps(10, 2) == [0, 10] and zero_shot_steps(10, 0) == []
    early, _ = checkpoint.load_model(tmp_path / "run", "h" * 64, step=4)
    name = "h.0.ln_1.weight"
    assert not torch.equal(early.state_dict()[name], model.state_dict()[name])


def test_crash_then_rerun_equals_uninterrupted(make_params, tmp_path):
    # device: cpu: bit-identical resumes are promised on the CPU only (not by CUDA's kernels)
    params = make_params({"device": "cpu", "pretrain": {"precision": "fp32"}})
    _run(params, tmp_path / "a")

    with pytest.raises(CrashError):
        _run(params, tmp_path / "b", _crash_at_12)
    assert checkpoint.latest_checkpoint(tmp_path / "b").name == "step_00000008"
    _run(params, tmp_path / "b")
    for name in ["model.safetensors", "zeroshot/step_00000032.safetensors"]:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


def test_nan_loss_stops_naming_the_step_and_keeps_checkpoint(make_params, tmp_path):
    params = make_params({"pretrain": {"precision": "fp32"}})
    holder = {}
    run_dir = tmp_path / "run"

    def poison(step, metrics):
        if step == 12:  # after the step-8 checkpoint
            with torch.no_grad():
                next(holder["model"].parameters()).fill_(float("nan"))

    import gpt1.pretraining as train_mod

    orig = train_mod.build_optimizer

    def spy(model, *a):
        holder["model"] = model
        return orig(model, *a)

    train_mod.build_optimizer = spy
    try:
        with pytest.raises(NonFiniteLossError, match="at step 12;.*step_00000008"):
            _run(params, run_dir, poison)
    finally:
        train_mod.build_optimizer = orig
    state = checkpoint.read_checkpoint_state(checkpoint.latest_checkpoint(run_dir))
    assert state["step"] == 8
    assert not (run_dir / "model.safetensors").exists()


def test_changed_params_start_fresh(make_params, tmp_path):
    params = make_params({"pretrain": {"precision": "fp32", "max_tokens": 1024}})
    _run(params, tmp_path / "run")
    other = make_params({"pretrain": {"precision": "fp32", "max_tokens": 1024, "lr_max": 5e-4}})
    _run(other, tmp_path / "run")
    meta = checkpoint.read_model_meta(tmp_path / "run")
    assert meta["params"]["pretrain"]["lr_max"] == 5e-4


def test_fast_bf16_cpu_flags(tmp_path, monkeypatch):
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX512")
    info = tmp_path / "cpuinfo"
    for flags, fast in (("fpu avx512f avx512_bf16", True), ("fpu amx_bf16 amx_tile", True),
                        ("fpu avx2 avx512f", False)):
        info.write_text(f"processor\t: 0\nflags\t\t: {flags}\n")
        assert has_fast_bf16(str(info)) is fast
    assert has_fast_bf16(str(tmp_path / "missing")) is False


def test_bf16_is_not_fast_where_onednn_is_capped_below_it(tmp_path, monkeypatch):
    """ONEDNN_MAX_CPU_ISA=AVX2 on an AVX512-BF16 chip: oneDNN emulates bf16, so `auto` is fp32."""
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX512")
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nflags\t\t: fpu avx512f avx512_bf16\n")
    for cap, fast in (("AVX2", False), ("avx512_core", False), ("AVX512_CORE_BF16", True),
                      ("AVX512_CORE_AMX", True), ("ALL", True)):
        monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", cap)
        assert has_fast_bf16(str(info)) is fast, cap


def test_resolve_precision():
    cpu = torch.device("cpu")
    assert resolve_precision("fp32", cpu) == "fp32"
    assert resolve_precision("bf16", cpu) == "bf16"
    assert resolve_precision("auto", cpu) in ("fp32", "bf16")
    with pytest.raises(ValueError):
        resolve_precision("fp16", cpu)


def test_other_micro_batch_split_resumes_from_the_latest_checkpoint(make_params, tmp_path, caplog):
    """micro_batch_seqs 2 -> 1 (global batch 4 either way) resumes at the step-8 checkpoint
    instead of deleting it; without dropout the result equals the run never split otherwise."""
    no_dropout = {"resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0}

    def params_for(micro):
        return make_params({"device": "cpu", "model": no_dropout,
                            "pretrain": {"precision": "fp32", "micro_batch_seqs": micro}})

    _run(params_for(2), tmp_path / "a")

    with pytest.raises(CrashError):
        _run(params_for(2), tmp_path / "b", _crash_at_12)
    with caplog.at_level("INFO", logger="gpt1.pretraining"):
        _run(params_for(1), tmp_path / "b")
    messages = [r.getMessage() for r in caplog.records]
    assert any(m.startswith("resuming from ") and m.endswith("(step 8)") for m in messages)
    assert not any("starting a fresh run" in m for m in messages)
    a, _ = checkpoint.load_model(tmp_path / "a", "h" * 64)
    b, meta = checkpoint.load_model(tmp_path / "b", "h" * 64)
    assert meta["params"]["pretrain"]["micro_batch_seqs"] == 1
    for name, value in a.state_dict().items():
        torch.testing.assert_close(b.state_dict()[name], value, rtol=1e-5, atol=1e-5)
