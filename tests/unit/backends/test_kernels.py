"""The fused CPU kernels (gpt1/backends/kernels.c) against their torch references and
autograd, their build cache, and the cpu_fused backend against the torch one."""

from __future__ import annotations

import copy
import logging
import math
import subprocess

import pytest
import torch
import torch.nn.functional as F

from gpt1 import networks
from gpt1.backends import apply_backend, backend_of, fused, native, ops
from gpt1.backends import kernels as K
from gpt1.config import ParamsError, load_params
from gpt1.errors import Gpt1Error
from gpt1.model import GPT
from gpt1.pretraining import CausalLM
from tests.helpers.repo import REPO

CPU = torch.device("cpu")

DTYPES = [torch.float32, torch.bfloat16]


def test_library_builds_on_this_machine() -> None:
    # CI has a C compiler: the fast path must actually be the one under test below
    assert native.library() is not None


@pytest.mark.parametrize("dtype", DTYPES)
def test_dropout_kernel_equals_reference_bit_for_bit(dtype: torch.dtype) -> None:
    x = torch.randn(777, 129, generator=torch.Generator().manual_seed(0)).to(dtype)
    y = K.dropout(x, seed=123456789012345, p=0.1)
    with native.disabled():
        ref = K.dropout(x, seed=123456789012345, p=0.1)
    assert torch.equal(y, ref)
    kept = y != 0
    assert abs(kept.float().mean().item() - 0.9) < 0.005
    _, scale = K.keep_threshold(0.1)
    assert torch.allclose(y[kept].float(), (x[kept].float() * scale).to(dtype).float())


def test_dropout_mask_independent_of_thread_count_and_seeded() -> None:
    x = torch.ones(300_001)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = K.dropout(x, 42, 0.3)
        torch.set_num_threads(2)
        two = K.dropout(x, 42, 0.3)
    finally:
        torch.set_num_threads(before)
    assert torch.equal(one, two)
    assert not torch.equal(one, K.dropout(x, 43, 0.3))  # another seed, another mask
    assert abs((one != 0).float().mean().item() - 0.7) < 0.005


def test_keep_threshold_makes_dropout_unbiased() -> None:
    threshold, scale = K.keep_threshold(0.1)
    assert threshold == round(0.1 * 2**32)
    assert math.isclose((1 - threshold / 2**32) * scale, 1.0, rel_tol=1e-12)


def test_model_dropout_backward_reuses_forward_mask() -> None:
    x = torch.randn(64, 65, requires_grad=True)
    torch.manual_seed(3)
    y = ops.dropout(x, ops.new_seed(), 0.25)
    y.backward(torch.ones_like(y))
    assert x.grad is not None
    assert torch.equal(x.grad != 0, y != 0)  # the gradient passes exactly where x did
    torch.manual_seed(3)
    assert torch.equal(ops.dropout(x.detach(), ops.new_seed(), 0.25), y.detach())  # manual_seed


@pytest.mark.parametrize("dtype", DTYPES)
def test_gelu_forward_and_backward_match_torch(dtype: torch.dtype) -> None:
    u = (torch.randn(50_000, generator=torch.Generator().manual_seed(1)) * 4).to(dtype)
    grad = torch.randn(50_000, generator=torch.Generator().manual_seed(2)).to(dtype)
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    ref_u = u.float().requires_grad_()
    ref = F.gelu(ref_u, approximate="tanh")
    ref.backward(grad.float())
    assert torch.allclose(K.gelu(u).float(), ref.detach(), atol=tol, rtol=tol)
    assert ref_u.grad is not None
    assert torch.allclose(K.gelu_backward(u, grad).float(), ref_u.grad, atol=tol, rtol=tol)


@pytest.mark.parametrize("p", [0.0, 0.1])
@pytest.mark.parametrize("dtype", DTYPES)
def test_attention_probs_kernel_equals_reference(dtype: torch.dtype, p: float) -> None:
    T = 37
    s = (torch.randn(3 * T, T, generator=torch.Generator().manual_seed(4)) * 5).to(dtype)
    probs, dropped = K.causal_attention_probs(s, 0.3, seed=99, p=p)
    with native.disabled():
        ref_probs, ref_dropped = K.causal_attention_probs(s, 0.3, seed=99, p=p)
    tol = 1e-6 if dtype == torch.float32 else 8e-3
    assert torch.allclose(probs.float(), ref_probs.float(), atol=tol)
    assert torch.equal(dropped != 0, ref_dropped != 0)  # the same mask
    assert torch.allclose(dropped.float(), ref_dropped.float(), atol=2 * tol)
    query = torch.arange(3 * T) % T
    future = torch.arange(T)[None, :] > query[:, None]
    assert torch.all(probs[future] == 0) and torch.all(dropped[future] == 0)
    assert torch.allclose(probs.float().sum(-1), torch.ones(3 * T), atol=T * tol)


def test_attention_probs_backward_equals_autograd_of_reference() -> None:
    T = 29
    s = torch.randn(2 * T, T, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    grad = torch.randn(2 * T, T, generator=torch.Generator().manual_seed(6), dtype=torch.float64)
    s32 = s.float().requires_grad_()
    with native.disabled():
        _, ref_dropped = K.causal_attention_probs(s32, 0.2, seed=7, p=0.3)
    ref_dropped.backward(grad.float())
    probs, _ = K.causal_attention_probs(s.float(), 0.2, seed=7, p=0.3)
    got = K.causal_attention_probs_backward(probs, grad.float().clone(), 0.2, seed=7, p=0.3)
    assert s32.grad is not None
    assert torch.allclose(got, s32.grad, atol=1e-6)


def test_causal_attention_function_equals_naive_attention() -> None:
    g = torch.Generator().manual_seed(8)
    q, k, v = (torch.randn(4, 16, 8, generator=g, requires_grad=True) for _ in range(3))
    torch.manual_seed(11)
    y = ops.attend(q, k, v, 0.2, ops.new_pool())
    y.backward(torch.ones_like(y))
    torch.manual_seed(11)
    seed = K.new_seed()  # the seed the op drew
    qr, kr, vr = (t.detach().clone().requires_grad_() for t in (q, k, v))
    scores = qr @ kr.transpose(1, 2) / math.sqrt(8)
    scores = scores.masked_fill(torch.ones(16, 16, dtype=torch.bool).triu(1), float("-inf"))
    keep = K.keep_mask(4 * 16 * 16, seed, 0.2).view(4, 16, 16)
    _, scale = K.keep_threshold(0.2)
    ref = (torch.softmax(scores, -1) * keep * scale) @ vr
    ref.backward(torch.ones_like(ref))
    assert torch.allclose(y, ref, atol=1e-5)
    for got, want in ((q.grad, qr.grad), (k.grad, kr.grad), (v.grad, vr.grad)):
        assert got is not None and want is not None
        assert torch.allclose(got, want, atol=1e-5)


@pytest.mark.parametrize("dtype", DTYPES)
def test_softmax_rows_and_log_sum_exp(dtype: torch.dtype) -> None:
    x = (torch.randn(19, 1000, generator=torch.Generator().manual_seed(9)) * 6).to(dtype)
    got = x.clone()
    lse = K.softmax_rows_(got)
    tol = 1e-6 if dtype == torch.float32 else 4e-3
    assert torch.allclose(got.float(), torch.softmax(x.float(), -1), atol=tol)
    assert torch.allclose(lse, torch.logsumexp(x.float(), -1), atol=1e-5)
    bad = x.clone()
    bad[3, 10] = float("nan")
    assert torch.isnan(K.softmax_rows_(bad)[3])  # a NaN logit is not hidden from the loss


def test_no_compiler_falls_back_to_torch_with_one_warning(
    monkeypatch: pytest.MonkeyPatch, tmp_path, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    monkeypatch.setenv("GPT1_KERNEL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(native, "_state", {"lib": None, "tried": False, "enabled": True})
    with caplog.at_level(logging.WARNING, logger="gpt1.backends.native"):
        assert native.library() is None
        assert native.library() is None
    assert len(caplog.records) == 1 and "no-such-cc" in caplog.records[0].getMessage()
    x = torch.randn(100)
    assert torch.allclose(K.gelu(x), F.gelu(x, approximate="tanh"))
    assert list((tmp_path / "cache").glob("*")) == []  # nothing half-written


def test_build_is_cached_and_atomic(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.setenv("GPT1_KERNEL_CACHE", str(tmp_path))
    first = native._build()
    assert first is not None and first.parent == tmp_path
    stamp = first.stat().st_mtime_ns
    assert native._build() == first and first.stat().st_mtime_ns == stamp  # reused
    digest = first.with_name(first.name + ".sha256")  # recorded at build
    assert sorted(p.name for p in tmp_path.iterdir()) == [first.name, digest.name]  # no temps
    assert native.verified(first)


def _tiny_step(precision: str) -> tuple[float, dict[str, torch.Tensor]]:
    cfg = load_params(REPO / "params.yaml").model.model_copy(
        update={"n_layer": 2, "n_embd": 32, "n_head": 4, "n_inner": 128, "n_positions": 24}
    )
    torch.manual_seed(0)
    model = GPT(cfg, 101)
    fused.install(model)  # also where the library is disabled: the ops' torch references run
    lm = CausalLM(model).train()
    windows = torch.randint(0, 101, (3, 25), generator=torch.Generator().manual_seed(1))
    torch.manual_seed(2)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
        loss = lm(windows)
    loss.backward()
    return float(loss.detach()), {n: p.grad for n, p in lm.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_training_step_with_kernels_equals_torch_path(precision: str) -> None:
    """Same dropout masks, same math: a GPT training step through the C kernels (and pooled
    buffers) equals the pure-torch path, fp32 tightly and bf16 to its rounding."""
    loss, grads = _tiny_step(precision)
    with native.disabled():
        ref_loss, ref_grads = _tiny_step(precision)
    tol = 1e-5 if precision == "fp32" else 2e-2
    assert math.isclose(loss, ref_loss, rel_tol=tol)
    assert grads.keys() == ref_grads.keys() and len(grads) > 10
    for name, grad in grads.items():
        ref = ref_grads[name]
        scale = ref.abs().max().item() + 1e-12
        assert (grad - ref).abs().max().item() <= tol * 10 * scale, name


@pytest.mark.parametrize("f_dtype", DTYPES)
def test_add_dropout_layer_norm_forward_and_backward(f_dtype: torch.dtype) -> None:
    """The fused junction equals F.layer_norm(x + dropout(f)) with the same mask, and its
    gradients equal autograd's, for 130 rows (two partial-sum blocks and a ragged one)."""
    g = torch.Generator().manual_seed(12)
    x = torch.randn(130, 48, generator=g).requires_grad_()
    f = torch.randn(130, 48, generator=g).to(f_dtype).requires_grad_()
    gamma = (1 + 0.1 * torch.randn(48, generator=g)).requires_grad_()
    beta = (0.1 * torch.randn(48, generator=g)).requires_grad_()
    grad_h = torch.randn(130, 48, generator=g)
    h, s, mean, rstd = K.add_dropout_layer_norm(x.detach(), f.detach(), gamma.detach(),
                                                beta.detach(), 1e-5, 77, 0.2, save_sum=True)
    assert s is not None
    dx, df, dgamma, dbeta = K.add_dropout_layer_norm_backward(grad_h, s, gamma.detach(), mean,
                                                              rstd, 77, 0.2, f_dtype)
    keep = K.keep_mask(130 * 48, 77, 0.2).view(130, 48)
    _, scale = K.keep_threshold(0.2)
    ref = F.layer_norm(x + f.float() * keep * scale, (48,), gamma, beta, 1e-5)
    ref.backward(grad_h)
    assert torch.allclose(h, ref.detach(), atol=1e-5)
    for got, want in ((dx, x.grad), (dgamma, gamma.grad), (dbeta, beta.grad)):
        assert want is not None and torch.allclose(got, want, atol=1e-4)
    assert f.grad is not None
    tol = 1e-5 if f_dtype == torch.float32 else 2e-2
    assert torch.allclose(df.float(), f.grad.float(), atol=tol, rtol=tol)
    with native.disabled():  # the torch reference path agrees
        h_ref, s_ref, _, _ = K.add_dropout_layer_norm(x.detach(), f.detach(), gamma.detach(),
                                                      beta.detach(), 1e-5, 77, 0.2, True)
    assert s_ref is not None and torch.allclose(h, h_ref, atol=1e-5)
    assert torch.allclose(s, s_ref, atol=1e-6)


@pytest.mark.slow
def test_damaged_cache_entry_is_rebuilt(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.setenv("GPT1_KERNEL_CACHE", str(tmp_path))
    monkeypatch.setattr(native, "_state", {"lib": None, "tried": False, "enabled": True})
    built = native._build()
    assert built is not None
    built.write_bytes(built.read_bytes()[:100])  # truncated, as by a full disk
    assert native.library() is not None  # rebuilt and loaded
    x = torch.randn(1000)
    assert torch.allclose(K.gelu(x), F.gelu(x, approximate="tanh"), atol=1e-6)


def test_pooled_nodes_refuse_a_second_backward() -> None:
    """Attention, MLP and LayerNorm nodes keep activations in reused buffers: a second backward
    through the same graph must fail loudly, not read overwritten memory."""
    cfg = load_params(REPO / "params.yaml").model.model_copy(
        update={"n_layer": 1, "n_embd": 16, "n_head": 2, "n_inner": 64, "n_positions": 8}
    )
    model = GPT(cfg, 50)
    apply_backend(model, "cpu_fused", CPU)
    lm = CausalLM(model).train()
    loss = lm(torch.randint(0, 50, (2, 9)))
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="backward through the same graph twice"):
        loss.backward()


@pytest.mark.slow
def test_foreign_library_in_the_cache_is_never_loaded(
    monkeypatch: pytest.MonkeyPatch, tmp_path, caplog: pytest.LogCaptureFixture
) -> None:
    """A shared object that is not the one this build recorded (its digest differs) is refused
    with one warning line and rebuilt: it is never loaded, so its constructor never runs."""
    cache, marker = tmp_path / "cache", tmp_path / "loaded"
    monkeypatch.setenv("GPT1_KERNEL_CACHE", str(cache))
    monkeypatch.setattr(native, "_state", {"lib": None, "tried": False, "enabled": True})
    built = native._build()
    assert built is not None
    source = tmp_path / "foreign.c"
    source.write_text('#include <stdio.h>\n__attribute__((constructor)) static void mark(void)'
                      f' {{ FILE *f = fopen("{marker}", "w"); if (f) fclose(f); }}\n')
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(built), str(source)], check=True)
    with caplog.at_level(logging.WARNING, logger="gpt1.backends.native"):
        assert native.library() is not None
    assert not marker.exists()  # the foreign library was never loaded
    assert len(caplog.records) == 1
    assert "does not match the digest" in caplog.records[0].getMessage()
    assert native.verified(built)  # the rebuilt one matches its record
    x = torch.randn(1000)
    assert torch.allclose(K.gelu(x), F.gelu(x, approximate="tanh"), atol=1e-6)


@pytest.mark.slow
def test_library_without_a_digest_record_is_rebuilt(monkeypatch: pytest.MonkeyPatch,
                                                    tmp_path) -> None:
    monkeypatch.setenv("GPT1_KERNEL_CACHE", str(tmp_path))
    monkeypatch.setattr(native, "_state", {"lib": None, "tried": False, "enabled": True})
    built = native._build()
    assert built is not None
    built.with_name(built.name + ".sha256").unlink()  # e.g. a cache from an older gpt1
    stamp = built.stat().st_mtime_ns
    assert native.library() is not None
    assert native.verified(built) and built.stat().st_mtime_ns != stamp  # rebuilt


def _tiny_cfg(**over: object):
    return load_params(REPO / "params.yaml").model.model_copy(
        update={"n_layer": 2, "n_embd": 32, "n_head": 4, "n_inner": 128, "n_positions": 24,
                **over})


def test_apply_backend_resolves_and_records() -> None:
    model = GPT(_tiny_cfg(), 50)
    assert apply_backend(model, "torch", CPU) == "torch" and backend_of(model) == "torch"
    assert type(model.h[0].attn).__name__ == "Attention"  # the model as written
    with pytest.raises(Gpt1Error, match="model.backend: cpu_fused cannot be used: it runs on "
                                        "CPU only"):
        apply_backend(model, "cpu_fused", torch.device("cuda"))
    assert apply_backend(model, "auto", torch.device("cuda")) == "torch"
    with native.disabled():
        assert apply_backend(model, "auto", CPU) == "torch"
    assert backend_of(model) == "torch"
    assert apply_backend(model, "auto", CPU) == "cpu_fused" and backend_of(model) == "cpu_fused"
    state = GPT(_tiny_cfg(), 50).state_dict()
    assert model.state_dict().keys() == state.keys()  # checkpoints and exports unchanged


def _backend_pair(cfg_over: dict[str, object]) -> tuple[CausalLM, CausalLM]:
    torch.manual_seed(0)
    plain = GPT(_tiny_cfg(**cfg_over), 101)
    fast = copy.deepcopy(plain)
    apply_backend(fast, "cpu_fused", CPU)
    return CausalLM(plain), CausalLM(fast)


@pytest.mark.parametrize("arch", ["gpt1", "gpt2"])
def test_torch_backend_matches_cpu_fused_without_dropout(arch: str) -> None:
    """p = 0: the two backends compute the same function (fp32 logits within 1e-5), and the
    same loss and gradients."""
    plain, fast = _backend_pair({"arch": arch, "resid_pdrop": 0.0, "embd_pdrop": 0.0,
                                 "attn_pdrop": 0.0})
    windows = torch.randint(0, 101, (3, 25), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        logits = [lm.lm.lm_logits(lm.lm(windows[:, :-1])) for lm in (plain.eval(), fast.eval())]
    assert (logits[0] - logits[1]).abs().max().item() <= 1e-5
    losses = [lm.train()(windows) for lm in (plain, fast)]
    for loss in losses:
        loss.backward()
    assert math.isclose(losses[0].item(), losses[1].item(), rel_tol=1e-6)
    for (name, a), (_, b) in zip(plain.named_parameters(), fast.named_parameters(), strict=True):
        assert a.grad is not None and b.grad is not None
        assert torch.allclose(a.grad, b.grad, atol=1e-6, rtol=1e-4), name


def test_backends_train_to_the_same_loss_with_dropout() -> None:
    """p = 0.1: different dropout masks (torch's Bernoulli vs the hash), the same training: a
    tiny model learns a periodic sequence to the same loss within noise."""
    plain, fast = _backend_pair({"resid_pdrop": 0.1, "embd_pdrop": 0.1, "attn_pdrop": 0.1})
    g = torch.Generator().manual_seed(3)
    pattern = torch.randint(0, 101, (7,), generator=g)
    finals = []
    for lm in (plain, fast):
        opt = torch.optim.AdamW(lm.parameters(), lr=3e-3)
        torch.manual_seed(4)
        for _ in range(60):
            start = torch.randint(0, 7, (8,), generator=g)
            windows = pattern[(start[:, None] + torch.arange(25)) % 7]
            loss = lm.train()(windows)
            loss.backward()
            opt.step()
            opt.zero_grad()
        with torch.no_grad():
            finals.append(lm.eval()(pattern[torch.arange(25) % 7][None]).item())
    assert finals[0] < 1.0 and finals[1] < 1.0  # from ln(101) = 4.6: both learned it
    assert abs(finals[0] - finals[1]) < 0.25, finals


@pytest.mark.slow
def test_compiled_fused_model_has_no_graph_breaks_and_eager_loss() -> None:
    """torch.compile traces the fused custom ops: zero graph breaks, and the compiled loss and
    gradients equal eager's (dropout on: inductor draws the mask seeds with torch's eager RNG)."""
    _, fast = _backend_pair({})
    windows = torch.randint(0, 101, (2, 17), generator=torch.Generator().manual_seed(5))
    explained = torch._dynamo.explain(fast.train())(windows)
    assert explained.graph_break_count == 0, explained.break_reasons
    assert explained.graph_count == 1
    torch.manual_seed(6)
    eager = fast(windows)
    eager.backward()
    eager_grads = [p.grad.clone() for p in fast.parameters() if p.grad is not None]
    fast.zero_grad()
    # fresh compilation (a cached graph could predate a change of the ops' fake kernels)
    with torch._inductor.config.patch(fallback_random=True, force_disable_caches=True):
        compiled = torch.compile(fast)
        torch.manual_seed(6)
        loss = compiled(windows)
        loss.backward()
    assert math.isclose(loss.item(), eager.item(), rel_tol=1e-5)
    grads = [p.grad for p in fast.parameters() if p.grad is not None]
    assert len(grads) == len(eager_grads) > 10
    for got, want in zip(grads, eager_grads, strict=True):
        assert torch.allclose(got, want, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("kind", ["transformer", "lstm"])
def test_build_model_installs_the_params_backend(make_params, kind: str) -> None:
    """networks.build_model (every stage's model) applies model.backend; `torch` leaves the
    model as written, `auto` on CPU fuses it."""
    assert backend_of(networks.build_model(kind, make_params(), 50)) == "cpu_fused"
    plain = networks.build_model(kind, make_params({"model": {"backend": "torch"}}), 50)
    assert backend_of(plain) == "torch"
    with pytest.raises(ParamsError, match="backend"):
        make_params({"model": {"backend": "cuda_fused"}})
