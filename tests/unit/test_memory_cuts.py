"""The memory-bound cuts of a pre-training update, each behind its pretrain key and off by
default, checked on the CPU against the uncut update: the output layer and loss fused over
chunks (loss_chunk_tokens: the same loss and gradients, and no tensor the size of the whole
logits), the clip inside the fused AdamW (fused_clip: the same clipped update) and LayerNorm
outputs kept bf16 under autocast (bf16_norms: bf16 where asked, fp32 runs untouched)."""

from __future__ import annotations

import logging

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from gpt1.lstm import LSTMLM
from gpt1.model import GPT, LayerNorm, keep_norms_low_precision, next_token_loss
from gpt1.optim import build_optimizer
from gpt1.pretraining import CausalLM
from gpt1.step import clip_scale, seeded_loss, train_step
from tests.helpers.streams import VOCAB, pretrain_tiny, token_stream

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: one thread (tests/conftest.py)


class LargestTensor(TorchDispatchMode):
    """The most elements any operation made inside the block."""

    def __init__(self) -> None:
        super().__init__()
        self.numel = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, tuple | list) else (out,):
            if isinstance(t, torch.Tensor):
                self.numel = max(self.numel, t.numel())
        return out


def _model(cfg, body: str, pad: int = 1, embd_dropout: str = "activations"):
    torch.manual_seed(0)
    if body == "lstm":
        return LSTMLM(cfg.lstm, VOCAB).train()
    model_cfg = cfg.model.model_copy(update={"vocab_pad_multiple": pad,
                                             "embd_dropout": embd_dropout})
    return GPT(model_cfg, VOCAB).train()


@pytest.mark.parametrize(("body", "pad", "embd_dropout"), [
    ("transformer", 1, "activations"), ("transformer", 48, "matrix"), ("lstm", 1, "activations")])
@pytest.mark.parametrize("chunk", [7, 5000])
def test_the_fused_loss_equals_the_unfused_one_with_its_gradients(tiny_params, body, pad,
                                                                  embd_dropout, chunk):
    """fp32, dropout on (the same masks: reseeded), padded output rows or not, a chunk that
    does not divide the tokens or one chunk for all: the loss and every parameter's gradient
    equal the unfused path's within 1e-6; the padded rows get no gradient."""
    windows = torch.from_numpy(token_stream(3 * 17, 0).astype("int64")).view(3, 17)
    runs = []
    for chunk_tokens in (None, chunk):
        model = _model(tiny_params, body, pad, embd_dropout)
        torch.manual_seed(5)
        loss = next_token_loss(model, windows, chunk_tokens)
        loss.backward()
        runs.append((loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}))
    (ref, ref_grads), (fused, fused_grads) = runs
    torch.testing.assert_close(fused, ref, rtol=1e-6, atol=1e-6)
    for name, grad in ref_grads.items():
        torch.testing.assert_close(fused_grads[name], grad, rtol=1e-5, atol=1e-7, msg=name)
    weight = fused_grads["tokens_embed.weight"]
    assert weight.shape[0] == (48 * 2 if pad == 48 else VOCAB)
    assert not weight[VOCAB:].any()


def test_the_fused_loss_never_makes_a_tensor_of_all_the_logits(tiny_params):
    """Forward and backward, no operation makes more than one chunk's logits (the unfused
    path makes (tokens x vocabulary) ones); without gradients the same loss."""
    vocab = 4000  # the logits dwarf every other tensor, as at the paper's 40,481 words
    torch.manual_seed(0)
    model = GPT(tiny_params.model, vocab).train()
    windows = torch.from_numpy(token_stream(4 * 33, 0).astype("int64")).view(4, 33)
    tokens, chunk = 4 * 32, 16
    with LargestTensor() as unfused:
        next_token_loss(model, windows, None).backward()
    with LargestTensor() as fused:
        loss = next_token_loss(model, windows, chunk)
        loss.backward()
    assert unfused.numel >= tokens * vocab
    assert fused.numel <= max(chunk, tiny_params.model.n_embd) * vocab < tokens * vocab // 2
    with torch.no_grad():
        model.eval()
        torch.testing.assert_close(next_token_loss(model, windows, chunk),
                                   next_token_loss(model, windows, None), rtol=1e-6, atol=1e-6)


def test_the_fused_loss_under_bf16_autocast_stays_close_to_the_unfused_one(tiny_params):
    """bf16 GEMMs (autocast) and fp32 logits both ways: the loss within 1e-3, the gradients
    as close as bf16 GEMMs leave them."""
    windows = torch.from_numpy(token_stream(3 * 17, 0).astype("int64")).view(3, 17)
    runs = []
    for chunk in (None, 11):
        model = _model(tiny_params, "transformer")
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = next_token_loss(model, windows, chunk)
        loss.backward()
        runs.append((loss.detach(), model.tokens_embed.weight.grad.clone(),
                     model.h[0].attn.c_attn.weight.grad.clone()))
    (ref, *ref_grads), (fused, *fused_grads) = runs
    assert fused.dtype == torch.float32
    torch.testing.assert_close(fused, ref, rtol=1e-3, atol=1e-3)
    for a, b in zip(fused_grads, ref_grads, strict=True):
        torch.testing.assert_close(a, b, rtol=5e-2, atol=2e-3)


@pytest.mark.parametrize("grad_clip", [1e-3, 1e6])
def test_the_clip_inside_adamw_gives_the_clipped_update(tiny_params, grad_clip):
    """fused_clip divides the gradients inside the fused AdamW kernel: the same norm, the same
    first and second moments and weights as clip_grad_norm_ + step within fp32 rounding, with
    the clip engaged (1e-3) or not (1e6); engaged, the moments are not the unclipped ones."""
    windows = torch.from_numpy(token_stream(2 * 17, 0).astype("int64")).view(2, 17)
    runs = {}
    for fused, clip in ((False, grad_clip), (True, grad_clip), (False, 1e9)):
        torch.manual_seed(0)
        module = CausalLM(GPT(tiny_params.model, VOCAB)).train()
        opt = build_optimizer(module, 1e-3, (0.9, 0.999), 1e-8, 0.01)
        norms = [train_step(module, opt, [(s, windows)], seeded_loss, 1e-3, clip, "fp32",
                            fused_clip=fused)[1] for s in range(3)]
        assert not hasattr(opt, "grad_scale")
        runs[fused, clip] = (norms, [p.detach().clone() for p in module.parameters()],
                             [opt.state[p]["exp_avg"].clone() for p in module.parameters()])
    (norms, weights, moments), (f_norms, f_weights, f_moments) = (runs[False, grad_clip],
                                                                  runs[True, grad_clip])
    assert torch.equal(norms[0], f_norms[0])  # the first norm: the same gradients
    torch.testing.assert_close(f_norms, norms, rtol=1e-5, atol=0)
    torch.testing.assert_close(f_weights, weights, rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(f_moments, moments, rtol=1e-4, atol=1e-9)
    unclipped = runs[False, 1e9][2]
    assert (grad_clip < 1) == any(not torch.allclose(a, b) for a, b in zip(unclipped, moments,
                                                                           strict=True))


def test_the_clip_divisor_is_the_reciprocal_of_clip_grad_norm_s_factor():
    norms = torch.tensor([0.0, 0.5, 0.999, 3.0, float("inf")])
    scale = clip_scale(norms, 1.0)
    assert scale.dtype == torch.float32
    assert scale[:3].tolist() == [1.0, 1.0, 1.0] and scale[4] == float("inf")
    assert scale[3].item() == pytest.approx((3.0 + 1e-6) / 1.0)


@pytest.mark.parametrize("arch", ["gpt1", "gpt2"])
def test_bf16_norms_keep_layernorm_outputs_bf16_under_autocast_only(tiny_params, arch):
    """On: under bf16 autocast every LayerNorm hands out bf16 (its gain and bias gradients
    still fp32), the loss within 2e-2 of autocast's fp32 LayerNorms; without autocast (an fp32
    run) the same bytes as off."""
    cfg = tiny_params.model.model_copy(update={"arch": arch})
    windows = torch.from_numpy(token_stream(3 * 17, 0).astype("int64")).view(3, 17)
    out = {}
    for on in (False, True):
        for autocast in (False, True):
            torch.manual_seed(0)
            model = GPT(cfg, VOCAB).train()
            assert keep_norms_low_precision(model, on) == 2 * cfg.n_layer + (arch == "gpt2")
            seen: list[torch.dtype] = []
            for m in model.modules():
                if isinstance(m, LayerNorm):
                    m.register_forward_hook(lambda _m, _i, o, seen=seen: seen.append(o.dtype))
            torch.manual_seed(5)
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                loss = next_token_loss(model, windows, None)
            loss.backward()
            out[on, autocast] = (loss.detach(), model.h[0].ln_1.weight.grad, set(seen))
    assert out[True, True][2] == {torch.bfloat16}
    assert out[False, True][2] == out[True, False][2] == {torch.float32}
    assert out[True, True][1].dtype == torch.float32
    assert torch.equal(out[True, False][0], out[False, False][0])
    assert torch.equal(out[True, False][1], out[False, False][1])
    torch.testing.assert_close(out[True, True][0], out[False, True][0], rtol=2e-2, atol=0)


def test_the_loop_with_every_cut_on_trains_as_without(make_params, tmp_path, caplog):
    """The real loop (fp32, CPU) with loss_chunk_tokens, fused_clip and bf16_norms on: the
    same losses within 1e-4 as with them off; bf16_norms in an fp32 run says in one line that
    it changes nothing."""
    base = make_params({"device": "cpu", "pretrain": {"precision": "fp32"}})
    seen: dict[bool, list[float]] = {False: [], True: []}
    for on in (False, True):
        pre = base.pretrain.model_copy(update={"loss_chunk_tokens": 40 if on else None,
                                               "fused_clip": on, "bf16_norms": on})
        with caplog.at_level(logging.WARNING):
            pretrain_tiny(base.model_copy(update={"pretrain": pre}), tmp_path / str(on),
                          lambda step, m, on=on: seen[on].append(m["loss"]) if "loss" in m
                          else None)
    assert len(seen[True]) == len(seen[False]) > 1
    torch.testing.assert_close(seen[True], seen[False], rtol=1e-4, atol=0)
    lines = [r.getMessage() for r in caplog.records if "bf16_norms" in r.getMessage()]
    assert lines == ["pretrain.bf16_norms: precision is fp32 (no bf16 autocast): LayerNorm "
                     "outputs stay fp32"]


@pytest.mark.gpu
def test_the_cuts_on_a_gpu_agree_with_the_uncut_update():
    """On CUDA in bf16 (the kernels the GPU check times): the fused loss and its gradients
    against the unfused ones, the clip in the fused CUDA AdamW against clip_grad_norm_."""
    from types import SimpleNamespace

    cuda = torch.device("cuda", 0)
    cfg = SimpleNamespace(arch="gpt1", n_positions=64, n_embd=64, n_layer=2, n_head=2,
                          n_inner=256, afn="gelu", resid_pdrop=0.0, embd_pdrop=0.0,
                          attn_pdrop=0.0, embd_dropout="activations", layer_norm_epsilon=1e-5,
                          initializer_range=0.02, vocab_pad_multiple=64)
    windows = torch.randint(0, 1000, (4, 65), device=cuda)
    runs = []
    for fused in (False, True):
        torch.manual_seed(0)
        module = CausalLM(GPT(cfg, 1000), 64 if fused else None).to(cuda).train()  # type: ignore[arg-type]
        keep_norms_low_precision(module, fused)
        opt = build_optimizer(module, 1e-3, (0.9, 0.999), 1e-8, 0.01)
        losses = [train_step(module, opt, [(s, windows)], seeded_loss, 1e-3, 0.1, "bf16",
                             fused_clip=fused)[0] for s in range(3)]
        runs.append(torch.stack(losses).float().cpu())
    torch.testing.assert_close(runs[1], runs[0], rtol=1e-2, atol=0)
