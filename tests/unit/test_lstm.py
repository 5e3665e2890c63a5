"""LSTM language model (Table 5 / Figure 2 baseline): contract shared with GPT, causality,
tied head, and the same pre-training loop (run, resume, load)."""

from __future__ import annotations

import pytest
import torch

from gpt1 import checkpoint
from gpt1.lstm import LSTMLM, lstm_flops_per_token
from gpt1.pretraining import pretrain
from tests.helpers.streams import VOCAB, token_stream

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: one thread (tests/conftest.py)


@pytest.mark.parametrize("hidden", [32, 48])
def test_shapes_tied_head_and_projection(tiny_params, hidden):
    cfg = tiny_params.lstm.model_copy(update={"hidden_size": hidden})
    model = LSTMLM(cfg, VOCAB).eval()
    h = model(torch.randint(0, VOCAB, (3, 9)))
    assert h.shape == (3, 9, cfg.n_embd)
    torch.testing.assert_close(model.lm_logits(h), h @ model.tokens_embed.weight.T)
    assert (model.proj is None) == (hidden == cfg.n_embd)
    gates = dict(model.rnn.named_parameters())["bias_ih_l0"]
    assert torch.all(gates[hidden : 2 * hidden] == 1.0)  # forget-gate bias


def test_causality(tiny_params):
    model = LSTMLM(tiny_params.lstm, VOCAB).eval()
    idx = torch.randint(0, VOCAB, (2, 12))
    changed = idx.clone()
    changed[:, 7] = (idx[:, 7] + 1) % VOCAB
    with torch.no_grad():
        a, b = model.lm_logits(model(idx)), model.lm_logits(model(changed))
    torch.testing.assert_close(a[:, :7], b[:, :7], rtol=0, atol=0)
    assert (a[:, 7:] - b[:, 7:]).abs().max() > 0


def test_flops_count_grows_with_width(tiny_params):
    small = lstm_flops_per_token(tiny_params.lstm, VOCAB)
    wide = lstm_flops_per_token(tiny_params.lstm.model_copy(update={"hidden_size": 96}), VOCAB)
    assert 0 < small < wide


def test_pretrain_loop_trains_and_resumes_the_lstm(make_params, tmp_path):
    params = make_params({"pretrain": {"precision": "fp32"}})
    meta = {"kind": "lstm", "vocab_size": VOCAB, "tokenizer_hash": "h" * 64,
            "pretrain_seed": params.seed}
    data = ([token_stream(3000, 1), token_stream(2000, 2)], [token_stream(1000, 3)])

    def run(run_dir, on_metrics=lambda s, m: None):
        torch.manual_seed(params.seed)
        return pretrain(LSTMLM(params.lstm, VOCAB), *data, params, run_dir, meta,
                        lstm_flops_per_token(params.lstm, VOCAB), on_metrics)

    metrics = run(tmp_path / "a")
    assert metrics["history"][-1]["val_loss"] < metrics["history"][0]["val_loss"]

    def crash(step, m):
        if step == 20:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run(tmp_path / "b", crash)
    run(tmp_path / "b")
    name = checkpoint.MODEL_FILE
    assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    model, loaded = checkpoint.load_model(tmp_path / "a", "h" * 64)
    assert isinstance(model, LSTMLM) and loaded["arch"] == "lstm"


def test_bf16_autocast_runs_on_any_cpu(tiny_params, caplog):
    """Under bf16 autocast the LSTM trains on every x86-64 CPU: where oneDNN has no bf16 LSTM
    (AVX2-only chips) the layer runs in fp32, said once in the log, never a oneDNN error; the
    result stays within bf16 rounding of the fp32 model either way."""
    from gpt1 import lstm

    model = LSTMLM(tiny_params.lstm, VOCAB).eval()
    idx = torch.randint(0, VOCAB, (2, 9), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        want = model.lm_logits(model(idx))
    lstm.cpu_bf16_lstm.cache_clear()
    with caplog.at_level("WARNING", logger="gpt1.lstm"):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            got = model.lm_logits(model(idx))
            model.lm_logits(model(idx))  # the probe runs once
        got.float().sum().backward()
    said = [r.message for r in caplog.records if "bf16 LSTM" in r.message]
    assert len(said) == (0 if lstm.cpu_bf16_lstm() else 1)
    assert said == [] or "runs in fp32" in said[0]
    torch.testing.assert_close(got.float(), want, atol=0.05, rtol=0.05)
    assert all(p.grad is not None and torch.isfinite(p.grad).all()
               for p in model.rnn.parameters())


def test_pretrain_loop_runs_the_lstm_in_bf16(make_params, tmp_path):
    """precision: bf16 set by the user pre-trains the LSTM on any CPU (a few tiny steps)."""
    params = make_params({"pretrain": {"precision": "bf16", "max_tokens": 640}})
    meta = {"kind": "lstm", "vocab_size": VOCAB, "tokenizer_hash": "h" * 64,
            "pretrain_seed": params.seed}
    torch.manual_seed(params.seed)
    metrics = pretrain(LSTMLM(params.lstm, VOCAB), [token_stream(3000, 1)], [token_stream(1000, 3)],
                       params, tmp_path / "run", meta, lstm_flops_per_token(params.lstm, VOCAB),
                       lambda s, m: None)
    assert metrics["precision"] == "bf16"
    assert all(torch.isfinite(torch.tensor(h["val_loss"])) for h in metrics["history"])
