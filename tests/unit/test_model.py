"""GPT-1 model: shapes, causality, tying, init, dropout variants, parameter count."""

from __future__ import annotations

import pytest
import torch

from gpt1.backends import apply_backend, ops
from gpt1.config import ModelCfg
from gpt1.lstm import LSTMLM
from gpt1.model import GPT, TiedEmbedding, count_parameters, transfer_weights

CPU = torch.device("cpu")


def _cfg(tiny_params, **over) -> ModelCfg:
    return tiny_params.model.model_copy(update=over)


@pytest.mark.parametrize("arch", ["gpt1", "gpt2"])
def test_shapes_and_tied_head(tiny_params, arch):
    model = GPT(_cfg(tiny_params, arch=arch), vocab_size=50).eval()
    idx = torch.randint(0, 50, (3, 7))
    h = model(idx)
    assert h.shape == (3, 7, tiny_params.model.n_embd)
    logits = model.lm_logits(h)
    assert logits.shape == (3, 7, 50)
    # the output layer is the token embedding (spec §1): no separate head parameter
    torch.testing.assert_close(logits, h @ model.tokens_embed.weight.T)
    names = [n for n, _ in model.named_parameters()]
    assert ("ln_f.weight" in names) == (arch == "gpt2")


@pytest.mark.parametrize("arch", ["gpt1", "gpt2"])
@pytest.mark.parametrize("embd_dropout", ["activations", "matrix"])
def test_causality(tiny_params, arch, embd_dropout):
    """Changing token t+1 leaves the logits at positions <= t unchanged."""
    model = GPT(_cfg(tiny_params, arch=arch, embd_dropout=embd_dropout), vocab_size=50).eval()
    idx = torch.randint(0, 50, (2, 16))
    t = 9
    changed = idx.clone()
    changed[:, t + 1] = (idx[:, t + 1] + 1) % 50
    with torch.no_grad():
        a, b = model.lm_logits(model(idx)), model.lm_logits(model(changed))
    torch.testing.assert_close(a[:, : t + 1], b[:, : t + 1], rtol=0, atol=1e-6)
    assert (a[:, t + 1 :] - b[:, t + 1 :]).abs().max() > 1e-4


@pytest.mark.parametrize("backend", ["torch", "cpu_fused"])
def test_causality_in_training_mode_with_dropout(tiny_params, backend):
    """Attention with dropout is causal too, in both backends (same masks via the seed)."""
    model = GPT(_cfg(tiny_params, attn_pdrop=0.5), vocab_size=50).train()
    assert apply_backend(model, backend, CPU) == backend
    idx = torch.randint(0, 50, (2, 16))
    changed = idx.clone()
    changed[:, 12] = (idx[:, 12] + 1) % 50
    torch.manual_seed(3)
    a = model.lm_logits(model(idx))
    torch.manual_seed(3)
    b = model.lm_logits(model(changed))
    torch.testing.assert_close(a[:, :12], b[:, :12], rtol=0, atol=1e-6)


def test_init(tiny_params):
    model = GPT(_cfg(tiny_params, n_embd=64, n_inner=256, n_head=4), vocab_size=2000)
    std = tiny_params.model.initializer_range
    for name, p in model.named_parameters():
        if name.endswith("bias"):
            assert torch.count_nonzero(p) == 0, name
        elif "ln_" in name:
            assert torch.all(p == 1), name
        else:
            assert abs(p.std().item() - std) < 0.2 * std, name
            assert abs(p.mean().item()) < 0.2 * std, name


@pytest.mark.parametrize("backend", ["torch", "cpu_fused"])
def test_matrix_dropout_shares_mask_with_head(tiny_params, backend):
    """embd_dropout=matrix: the output layer uses the same dropped We as the lookup."""
    model = GPT(_cfg(tiny_params, embd_dropout="matrix", embd_pdrop=0.5), vocab_size=50).train()
    apply_backend(model, backend, CPU)
    idx = torch.arange(50).view(1, 50)[:, :16]
    h = model(idx)
    head = model.tokens_embed.pass_weight
    assert head is not None
    assert (head == 0).float().mean() > 0.3  # half the entries dropped
    torch.testing.assert_close(model.lm_logits(h), h @ head.T)
    model.eval()
    model(idx)
    assert model.tokens_embed.pass_weight is None


def test_too_long_sequence_is_refused(tiny_params):
    model = GPT(tiny_params.model, vocab_size=50)
    with pytest.raises(ValueError, match="n_positions"):
        model(torch.zeros(1, tiny_params.model.n_positions + 1, dtype=torch.long))


def test_paper_parameter_count_matches_transformers():
    """The paper preset (40,478 + 3 specials, ctx 512) within 1% of transformers' OpenAIGPT."""
    transformers = pytest.importorskip("transformers")
    from gpt1.config import load_params
    from tests.helpers.repo import REPO

    paper = load_params(REPO / "configs" / "paper.yaml").model
    vocab = 40478 + 3
    with torch.device("meta"):
        ours = count_parameters(GPT(paper, vocab))
        hf_cfg = transformers.OpenAIGPTConfig(
            vocab_size=vocab, n_positions=paper.n_positions, n_embd=paper.n_embd,
            n_layer=paper.n_layer, n_head=paper.n_head,
        )
        theirs = sum(p.numel() for p in transformers.OpenAIGPTLMHeadModel(hf_cfg).parameters())
    assert abs(ours - theirs) / theirs < 0.01, (ours, theirs)
    assert 115e6 < ours < 118e6  # spec §1: ~117M


def test_transfer_weights_copies_first_k_blocks(tiny_params):
    cfg = _cfg(tiny_params, n_layer=3)
    src, dst = GPT(cfg, 50), GPT(cfg, 50)
    before = {k: v.clone() for k, v in dst.state_dict().items()}
    copied = transfer_weights(src.state_dict(), dst, layers_transferred=1)
    assert "tokens_embed.weight" in copied and "positions_embed.weight" in copied
    for name, value in dst.state_dict().items():
        source = src.state_dict()[name] if name in copied else before[name]
        torch.testing.assert_close(value, source, rtol=0, atol=0)
    assert all(n.startswith(("tokens_embed", "positions_embed", "h.0.")) for n in copied)
    assert any(n.startswith("h.0.") for n in copied)
    copied_all = transfer_weights(src.state_dict(), dst, layers_transferred=None)
    assert set(copied_all) == set(src.state_dict())
    with pytest.raises(ValueError):
        transfer_weights(src.state_dict(), dst, layers_transferred=4)


@pytest.mark.parametrize("p", [0.1, 0.5])
def test_fast_dropout_rate_is_uniform_and_unbiased(p):
    x = torch.ones(4, 100_003)
    y = ops.dropout(x, ops.new_seed(), p)
    dropped = (y == 0).float()
    for lane in range(4):  # every position of the 4 x 16-bit lanes of each random word
        assert dropped.flatten()[lane::4].mean().item() == pytest.approx(p, abs=0.01)
    assert y.mean().item() == pytest.approx(1.0, abs=0.01)
    fused = torch.nn.Dropout(p).eval()
    apply_backend(fused, "cpu_fused", CPU)
    assert torch.equal(fused(x), x)


def _head_case(dtype, n=37, vocab=5_000, width=24):
    torch.manual_seed(0)
    h = torch.randn(n, width)
    weight = torch.randn(vocab, width) / 2
    targets = torch.randint(0, vocab, (n,))
    h[0] = 0.0
    h[0, 0] = 40.0  # row 0: softmax ~1 at its target, so p_t - 1 must stay exact
    weight[targets[0]] = 0.0
    weight[targets[0], 0] = 1.0
    return h.to(dtype), weight.to(dtype), targets


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("weighted", [False, True])
def test_head_cross_entropy_matches_linear_plus_torch(dtype, weighted):
    """Fused output layer + loss = F.linear + F.cross_entropy: losses and both gradients, for a
    mean loss (pre-training) and unequal row weights (fine-tuning LM loss), fp32 and bf16, over
    two steps sharing the pooled logits buffer."""
    h0, w0, targets = _head_case(dtype)
    row_weights = torch.rand(len(targets)) if weighted else torch.full((len(targets),), 0.1)
    pool = ops.new_pool()
    for _ in range(2):
        h, w = h0.clone().requires_grad_(), w0.clone().requires_grad_()
        ours = ops.head_losses(h, w, targets, pool)
        g_h, g_w = torch.autograd.grad((ours * row_weights).sum(), (h, w))
        h_ref, w_ref = h0.float().requires_grad_(), w0.float().requires_grad_()
        logits = (h_ref @ w_ref.T).to(dtype).float()  # the same rounded logits
        ref = torch.nn.functional.cross_entropy(logits, targets, reduction="none")
        r_h, r_w = torch.autograd.grad((ref * row_weights).sum(), (h_ref, w_ref))
        assert ours.dtype == torch.float32
        torch.testing.assert_close(ours, ref, atol=1e-5, rtol=1e-5)
        bf16 = dtype == torch.bfloat16
        tol = {"atol": 0.05, "rtol": 0.02} if bf16 else {"atol": 1e-5, "rtol": 1e-4}
        torch.testing.assert_close(g_h.float(), r_h, **tol)
        torch.testing.assert_close(g_w.float(), r_w, **tol)
        assert g_h.dtype == dtype and g_w.dtype == dtype


def test_head_cross_entropy_pool_lends_one_buffer_at_a_time():
    h0, w0, targets = _head_case(torch.float32)
    pool = ops.new_pool()
    h1, h2 = h0.clone().requires_grad_(), (2 * h0).requires_grad_()
    loss1 = ops.head_losses(h1, w0, targets, pool).mean()
    loss2 = ops.head_losses(h2, w0, targets, pool).mean()  # before loss1's backward
    (g1,) = torch.autograd.grad(loss1, h1, retain_graph=True)
    (g2,) = torch.autograd.grad(loss2, h2)
    for h, g in ((h0, g1), (2 * h0, g2)):
        ref_h = h.clone().requires_grad_()
        ref = torch.nn.functional.cross_entropy(ref_h @ w0.T, targets)
        torch.testing.assert_close(g, torch.autograd.grad(ref, ref_h)[0])
    with pytest.raises(RuntimeError, match="twice"):
        torch.autograd.grad(loss1, h1)
    with torch.no_grad():  # evaluation: no buffer kept, same values
        torch.testing.assert_close(ops.head_losses(h0, w0, targets, pool).mean(), loss1)


@pytest.mark.parametrize("body", ["transformer", "lstm"])
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_lm_losses_equal_lm_logits_then_cross_entropy(tiny_params, body, precision):
    """The fused path the trainers use equals lm_logits + F.cross_entropy, in train mode with
    the matrix embedding dropout (same mask seed) and under bf16 autocast, gradients too."""
    def build():
        torch.manual_seed(0)
        model = (GPT(_cfg(tiny_params, embd_dropout="matrix"), vocab_size=50)
                 if body == "transformer" else LSTMLM(tiny_params.lstm, vocab_size=50))
        assert apply_backend(model, "cpu_fused", CPU) == "cpu_fused"
        return model.train()

    idx = torch.randint(0, 50, (3, 9), generator=torch.Generator().manual_seed(1))
    results = []
    for fused in (True, False):
        model = build()
        torch.manual_seed(2)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
            h = model(idx[:, :-1])
            if fused:
                loss = model.lm_losses(h, idx[:, 1:]).mean()
            else:
                logits = model.lm_logits(h).float()
                targets = idx[:, 1:].reshape(-1)
                loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 50), targets)
        loss.backward()
        results.append((loss.detach(), model.tokens_embed.weight.grad.clone()))
    (fused_loss, fused_grad), (ref_loss, ref_grad) = results
    tol = {"atol": 1e-5, "rtol": 1e-5} if precision == "fp32" else {"atol": 2e-3, "rtol": 2e-2}
    torch.testing.assert_close(fused_loss, ref_loss, **tol)
    torch.testing.assert_close(fused_grad, ref_grad, **tol)


@pytest.mark.parametrize("use_head", [True, False])
def test_tied_lookup_under_autocast_matches_separate_uses(use_head):
    """Under bf16 autocast the lookup and the output layer share one node (_TiedLookup): same
    values and the same We gradient as F.embedding + F.linear, also when the head is unused."""
    torch.manual_seed(0)
    emb = TiedEmbedding(40, 8, 0.0, "activations")
    apply_backend(emb, "cpu_fused", CPU)
    torch.nn.init.normal_(emb.weight)
    idx = torch.tensor([[1, 5, 5, 39], [0, 1, 2, 3]])
    probe = torch.randn(2, 4, 8)
    grads = []
    for fused in (True, False):
        emb.weight.grad = None
        with torch.autocast("cpu", dtype=torch.bfloat16):
            if fused:
                x = emb.embed(idx)
                logits = emb.logits(x + probe) if use_head else None
            else:
                x = torch.nn.functional.embedding(idx, emb.weight)
                logits = torch.nn.functional.linear(x + probe, emb.weight) if use_head else None
            loss = (x * probe).sum() + (logits.float().square().mean() if use_head else 0)
        loss.backward()
        grads.append(emb.weight.grad.clone())
    assert x.dtype == torch.float32
    torch.testing.assert_close(grads[0], grads[1])


@pytest.mark.parametrize("backend", ["torch", "cpu_fused"])
def test_padded_vocabulary_keeps_the_real_logits_loss_and_gradients(tiny_params, backend):
    """model.vocab_pad_multiple 64 pads 50 output rows to 64: the real vocabulary's logits, the
    loss and every gradient equal the unpadded model's (fp32, <= 1e-6; same init draws), the
    padded rows stay zero with zero gradient, and they are not counted as parameters."""
    idx = torch.randint(0, 50, (3, 9), generator=torch.Generator().manual_seed(1))
    runs = []
    for multiple in (1, 64):
        torch.manual_seed(0)
        model = GPT(_cfg(tiny_params, vocab_pad_multiple=multiple), vocab_size=50)
        assert apply_backend(model, backend, CPU) == backend
        torch.manual_seed(2)
        h = model.train()(idx[:, :-1])
        loss = model.lm_losses(h, idx[:, 1:]).mean()
        loss.backward()
        runs.append((model, model.lm_logits(h).detach(), loss.detach()))
    (plain, plain_logits, plain_loss), (padded, padded_logits, padded_loss) = runs
    assert tuple(padded.tokens_embed.weight.shape) == (64, tiny_params.model.n_embd)
    assert count_parameters(padded) == count_parameters(plain)
    assert padded_logits.shape == plain_logits.shape == (3, 8, 50)
    assert (padded_logits - plain_logits).abs().max().item() <= 1e-6
    assert (padded_loss - plain_loss).abs().item() <= 1e-6
    pad_grad = padded.tokens_embed.weight.grad
    assert not padded.tokens_embed.weight[50:].any() and not pad_grad[50:].any()
    grads = dict(plain.named_parameters())
    for name, p in padded.named_parameters():
        ref = grads[name].grad
        got = p.grad[: ref.shape[0]]
        assert (got - ref).abs().max().item() <= 1e-6, name
