"""The fused CPU kernels as torch custom ops (`torch.ops.gpt1.*`), each with its autograd
formula and a fake (shape-only) implementation, so eager autograd runs them as single nodes
and torch.compile traces through them without graph breaks.

Dropout masks are a hash of (seed, element index) (gpt1/backends/kernels.py): each op takes
its seed as an int64 scalar tensor drawn from torch's generator, and backward regenerates the
mask from it instead of keeping the mask. Large intermediates live in a `ScratchPool` per
module (gpt1/backends/scratch.py; eager only, -1 = fresh tensors, as under compile).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from gpt1.backends import kernels as K
from gpt1.backends.scratch import (  # noqa: F401 (new_pool, new_seed: the ops' API)
    backward_once,
    buffer,
    hold,
    lend,
    mask_seed,
    new_pool,
    new_seed,
    no_zero_grads,
    release,
)

# ---- dropout: keep ? x * scale : 0; the same op with the same seed is its own backward -------


@torch.library.custom_op("gpt1::dropout", mutates_args=())
def dropout(x: Tensor, seed: Tensor, p: float) -> Tensor:
    return K.dropout(x, mask_seed(seed), p)


@dropout.register_fake
def _(x: Tensor, seed: Tensor, p: float) -> Tensor:
    return torch.empty_like(x, memory_format=torch.contiguous_format)


def _dropout_setup(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
    no_zero_grads(ctx)
    ctx.save_for_backward(inputs[1])
    ctx.p = inputs[2]


def _dropout_backward(ctx: Any, grad: Tensor | None) -> tuple[Tensor | None, None, None]:
    (seed,) = ctx.saved_tensors
    return (None if grad is None else dropout(grad, seed, ctx.p)), None, None


dropout.register_autograd(_dropout_backward, setup_context=_dropout_setup)


# ---- the tied We's two uses under autocast: fp32 lookup + low-precision output copy ---------

@torch.library.custom_op("gpt1::tied_lookup", mutates_args=())
def tied_lookup(weight: Tensor, idx: Tensor, head_dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    return torch.nn.functional.embedding(idx, weight), weight.to(head_dtype, copy=True)


@tied_lookup.register_fake
def _(weight: Tensor, idx: Tensor, head_dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    return (weight.new_empty((*idx.shape, weight.size(1))),
            weight.new_empty(weight.shape, dtype=head_dtype))


def _tied_lookup_setup(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    no_zero_grads(ctx)
    weight, idx, _ = inputs
    ctx.save_for_backward(idx)
    ctx.weight_shape, ctx.weight_dtype = weight.shape, weight.dtype


def _tied_lookup_backward(ctx: Any, grad_x: Tensor | None, grad_head: Tensor | None
                          ) -> tuple[Tensor, None, None]:
    """The lookup gradient is added in place into the upcast output-layer gradient: one
    (V, C) fp32 tensor instead of a zero-filled one, an upcast copy and their sum."""
    (idx,) = ctx.saved_tensors
    if grad_head is None:  # the output layer was not used (e.g. no auxiliary LM loss)
        grad = torch.zeros(ctx.weight_shape, dtype=ctx.weight_dtype, device=idx.device)
    else:
        grad = grad_head.to(ctx.weight_dtype)  # a fresh tensor: the dtypes differ
    if grad_x is not None:
        grad.index_add_(0, idx.reshape(-1), grad_x.reshape(-1, grad.size(1)).to(grad.dtype))
    return grad, None, None


tied_lookup.register_autograd(_tied_lookup_backward, setup_context=_tied_lookup_setup)


# ---- causal attention with dropout on the probabilities, (B*nh, T, hs) inputs ---------------

@torch.library.custom_op("gpt1::causal_attention", mutates_args=())
def causal_attention(q: Tensor, k: Tensor, v: Tensor, seed: Tensor, p: float, pool: int
                     ) -> tuple[Tensor, Tensor, Tensor]:
    """(y, probs, dropped probs): softmax(q k^T / sqrt(hs) + causal mask), its dropout, y =
    dropped @ v. The masking, softmax and dropout are one fused pass (K.causal_attention_probs)."""
    n, T, hs = q.shape
    scores = torch.bmm(q, k.transpose(1, 2), out=buffer(pool, "scratch", q, (n, T, T)))
    probs, dropped = K.causal_attention_probs(
        scores.view(n * T, T), 1.0 / math.sqrt(hs), mask_seed(seed), p,
        out=(buffer(pool, "probs", q, (n * T, T)), buffer(pool, "dropped", q, (n * T, T))),
    )
    probs, dropped = probs.view(n, T, T), dropped.view(n, T, T)
    return torch.bmm(dropped, v), probs, dropped


@causal_attention.register_fake
def _(q: Tensor, k: Tensor, v: Tensor, seed: Tensor, p: float, pool: int
      ) -> tuple[Tensor, Tensor, Tensor]:
    n, T, _ = q.shape
    return torch.empty_like(q), q.new_empty((n, T, T)), q.new_empty((n, T, T))


@torch.library.custom_op("gpt1::causal_attention_backward", mutates_args=())
def causal_attention_backward(
    grad_y: Tensor, q: Tensor, k: Tensor, v: Tensor, probs: Tensor, dropped: Tensor,
    seed: Tensor, p: float, pool: int,
) -> tuple[Tensor, Tensor, Tensor]:
    n, T, hs = q.shape
    grad_y = grad_y.to(v.dtype)
    grad_v = torch.bmm(dropped.transpose(1, 2), grad_y)
    grad_dropped = torch.bmm(grad_y, v.transpose(1, 2), out=buffer(pool, "scratch", v, (n, T, T)))
    grad_scores = K.causal_attention_probs_backward(
        probs.view(n * T, T), grad_dropped.view(n * T, T), 1.0 / math.sqrt(hs), mask_seed(seed), p
    ).view(n, T, T)  # includes the 1/sqrt(hs) scale
    return torch.bmm(grad_scores, k), torch.bmm(grad_scores.transpose(1, 2), q), grad_v


@causal_attention_backward.register_fake
def _(grad_y: Tensor, q: Tensor, k: Tensor, v: Tensor, probs: Tensor, dropped: Tensor,
      seed: Tensor, p: float, pool: int) -> tuple[Tensor, Tensor, Tensor]:
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


def _attention_setup(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    no_zero_grads(ctx)
    q, k, v, seed, p, pool = inputs
    ctx.save_for_backward(q, k, v, output[1], output[2], seed)
    ctx.p = p
    hold(ctx, pool)


def _attention_backward(ctx: Any, grad_y: Tensor, *_: Any) -> tuple[Any, ...]:
    backward_once(ctx, "attention")
    q, k, v, probs, dropped, seed = ctx.saved_tensors
    grads = causal_attention_backward(grad_y, q, k, v, probs, dropped, seed, ctx.p, ctx.pool)
    release(ctx)
    return *grads, None, None, None


causal_attention.register_autograd(_attention_backward, setup_context=_attention_setup)


def attend(q: Tensor, k: Tensor, v: Tensor, p: float, pool: int) -> Tensor:
    """(n, T, hs) q, k, v in one dtype -> (n, T, hs) causal attention with dropout p."""
    y, _, _ = causal_attention(q, k, v, new_seed(), p, lend(pool, q, k, v))
    return y


# ---- MLP core: c_proj(gelu(c_fc(x))) on (N, C) rows, all in one dtype ------------------------

@torch.library.custom_op("gpt1::gelu", mutates_args=())
def gelu(u: Tensor) -> Tensor:
    """tanh-approximated GELU (spec §5), for the no-grad path."""
    return K.gelu(u)


@gelu.register_fake
def _(u: Tensor) -> Tensor:
    return torch.empty_like(u, memory_format=torch.contiguous_format)


@torch.library.custom_op("gpt1::mlp", mutates_args=())
def mlp(x: Tensor, w_fc: Tensor, b_fc: Tensor, w_proj: Tensor, b_proj: Tensor, pool: int
        ) -> tuple[Tensor, Tensor, Tensor]:
    """(y, u, a): u = c_fc(x), a = gelu(u), y = c_proj(a); the two (N, 4C) intermediates in
    the pool (a fresh 6 MB tensor each per layer and step was mostly page faults)."""
    shape = (x.size(0), w_fc.size(0))
    u = torch.addmm(b_fc, x, w_fc.t(), out=buffer(pool, "u", x, shape))
    a = K.gelu(u, out=buffer(pool, "a", x, shape))
    return torch.addmm(b_proj, a, w_proj.t()), u, a


@mlp.register_fake
def _(x: Tensor, w_fc: Tensor, b_fc: Tensor, w_proj: Tensor, b_proj: Tensor, pool: int
      ) -> tuple[Tensor, Tensor, Tensor]:
    shape = (x.size(0), w_fc.size(0))
    return x.new_empty((x.size(0), w_proj.size(0))), x.new_empty(shape), x.new_empty(shape)


@torch.library.custom_op("gpt1::mlp_backward", mutates_args=())
def mlp_backward(grad_y: Tensor, x: Tensor, w_fc: Tensor, w_proj: Tensor, u: Tensor, a: Tensor,
                 pool: int) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    grad_y = grad_y.to(a.dtype)
    grad_w_proj = grad_y.t() @ a
    grad_b_proj = grad_y.sum(0)  # fp32 accumulation inside (a dtype= would upcast a copy)
    grad_a = torch.mm(grad_y, w_proj, out=buffer(pool, "grad", u, tuple(u.shape)))
    grad_u = K.gelu_backward(u, grad_a, out=grad_a)  # in place
    return grad_u @ w_fc, grad_u.t() @ x, grad_u.sum(0), grad_w_proj, grad_b_proj


@mlp_backward.register_fake
def _(grad_y: Tensor, x: Tensor, w_fc: Tensor, w_proj: Tensor, u: Tensor, a: Tensor,
      pool: int) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    return (torch.empty_like(x), torch.empty_like(w_fc), w_fc.new_empty(w_fc.size(0)),
            torch.empty_like(w_proj), w_proj.new_empty(w_proj.size(0)))


def _mlp_setup(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    no_zero_grads(ctx)
    x, w_fc, _, w_proj, _, pool = inputs
    ctx.save_for_backward(x, w_fc, w_proj, output[1], output[2])
    hold(ctx, pool)


def _mlp_backward(ctx: Any, grad_y: Tensor, *_: Any) -> tuple[Any, ...]:
    backward_once(ctx, "MLP")
    grads = mlp_backward(grad_y, *ctx.saved_tensors, ctx.pool)
    release(ctx)
    return *grads, None


mlp.register_autograd(_mlp_backward, setup_context=_mlp_setup)


def mlp_core(x: Tensor, params: list[Tensor], pool: int) -> Tensor:
    """(N, C) rows and [w_fc, b_fc, w_proj, b_proj], all in one dtype -> (N, C)."""
    w_fc, b_fc, w_proj, b_proj = params
    y, _, _ = mlp(x, w_fc, b_fc, w_proj, b_proj, lend(pool, x, *params))
    return y


# ---- LayerNorm(x + dropout(f)) over (N, C) rows: each post-LN junction in one pass -----------

@torch.library.custom_op("gpt1::add_dropout_layer_norm", mutates_args=())
def add_dropout_layer_norm(
    x: Tensor, f: Tensor, gamma: Tensor, beta: Tensor, eps: float, seed: Tensor, p: float,
    save_sum: bool, pool: int,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """(h, the pre-norm sum s (empty unless save_sum), row mean, row 1/std)."""
    h, s, mean, rstd = K.add_dropout_layer_norm(
        x, f, gamma, beta, eps, mask_seed(seed), p, save_sum,
        sum_out=buffer(pool, "sum", x, tuple(x.shape)) if save_sum else None,
    )
    return h, s if s is not None else x.new_empty(0), mean, rstd


@add_dropout_layer_norm.register_fake
def _(x: Tensor, f: Tensor, gamma: Tensor, beta: Tensor, eps: float, seed: Tensor, p: float,
      save_sum: bool, pool: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    saved = torch.empty_like(x) if save_sum else x.new_empty(0)
    return torch.empty_like(x), saved, x.new_empty(x.size(0)), x.new_empty(x.size(0))


@torch.library.custom_op("gpt1::add_dropout_layer_norm_backward", mutates_args=())
def add_dropout_layer_norm_backward(
    grad_h: Tensor, s: Tensor, gamma: Tensor, mean: Tensor, rstd: Tensor, seed: Tensor,
    p: float, f_dtype: torch.dtype,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    return K.add_dropout_layer_norm_backward(grad_h, s, gamma, mean, rstd, mask_seed(seed), p,
                                             f_dtype)


@add_dropout_layer_norm_backward.register_fake
def _(grad_h: Tensor, s: Tensor, gamma: Tensor, mean: Tensor, rstd: Tensor, seed: Tensor,
      p: float, f_dtype: torch.dtype) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    return (torch.empty_like(s), s.new_empty(s.shape, dtype=f_dtype), torch.empty_like(gamma),
            torch.empty_like(gamma))


def _layer_norm_setup(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    no_zero_grads(ctx)
    x, f, gamma, _, _, seed, p, _, pool = inputs
    ctx.save_for_backward(output[1], gamma, output[2], output[3], seed)
    ctx.p, ctx.f_dtype = p, f.dtype
    hold(ctx, pool)


def _layer_norm_backward(ctx: Any, grad_h: Tensor, *_: Any) -> tuple[Any, ...]:
    backward_once(ctx, "LayerNorm")
    s, gamma, mean, rstd, seed = ctx.saved_tensors
    grads = add_dropout_layer_norm_backward(grad_h, s, gamma, mean, rstd, seed, ctx.p,
                                            ctx.f_dtype)
    release(ctx)
    return *grads, None, None, None, None, None


add_dropout_layer_norm.register_autograd(_layer_norm_backward, setup_context=_layer_norm_setup)


def add_dropout_layer_norm_rows(x: Tensor, f: Tensor, gamma: Tensor, beta: Tensor, eps: float,
                                p: float, pool: int) -> Tensor:
    """LayerNorm(x + dropout(f)) of (N, C) fp32 x and fp32/bf16 f -> (N, C) fp32."""
    seed = new_seed() if p > 0 else torch.zeros((), dtype=torch.int64)
    save = torch.is_grad_enabled() and any(t.requires_grad for t in (x, f, gamma, beta))
    h, _, _, _ = add_dropout_layer_norm(x, f, gamma, beta, eps, seed, p, save,
                                        lend(pool, x, f, gamma, beta))
    return h


# ---- output layer + cross-entropy: softmax(h W^T) per row, fp32 math -------------------------

@torch.library.custom_op("gpt1::head_cross_entropy", mutates_args=())
def head_cross_entropy(h: Tensor, weight: Tensor, targets: Tensor, keep: bool, pool: int
                       ) -> tuple[Tensor, Tensor, Tensor]:
    """(losses (N,) fp32, softmax rows (N, V) in h's dtype, fp32 p_target (empty unless keep)).

    F.linear + F.cross_entropy under autocast upcast the whole (N, V) logits to fp32 and
    materialise the log-softmax and its gradient, all memory traffic. Here the logits are
    written into a reused buffer and each row is overwritten in place by its softmax (one fused
    pass); backward scales that softmax in place into dL/dlogits and runs the two GEMMs. The
    target entries of the gradient, p_t - 1, come from fp32 p_t kept separately, so a bf16
    softmax near 1 loses nothing there.
    """
    logits = buffer(pool, "logits", h, (h.size(0), weight.size(0)))
    torch.mm(h, weight.t(), out=logits)
    target_logit = logits.gather(1, targets.unsqueeze(1)).squeeze(1).float()
    lse = K.softmax_rows_(logits)  # logits -> softmax rows, in place
    losses = lse - target_logit  # (N,)
    p_target = torch.exp(-losses) if keep else losses.new_empty(0)
    return losses, logits, p_target


@head_cross_entropy.register_fake
def _(h: Tensor, weight: Tensor, targets: Tensor, keep: bool, pool: int
      ) -> tuple[Tensor, Tensor, Tensor]:
    losses = h.new_empty(h.size(0), dtype=torch.float32)
    kept = torch.empty_like(losses) if keep else losses.new_empty(0)
    return losses, h.new_empty((h.size(0), weight.size(0))), kept


@torch.library.custom_op("gpt1::head_cross_entropy_backward", mutates_args=("probs",))
def head_cross_entropy_backward(
    grad_rows: Tensor, h: Tensor, weight: Tensor, targets: Tensor, p_target: Tensor,
    probs: Tensor, need_h: bool, need_weight: bool,
) -> tuple[Tensor, Tensor]:
    """(dL/dh, dL/dW) (empty where not needed); `probs` becomes dL/dlogits in place."""
    grad = probs
    g = grad_rows.float()
    rows = torch.arange(grad.size(0), device=grad.device)
    alpha = 1.0
    if bool((g == g[0]).all()):  # a mean loss: one scalar, applied by the GEMMs (alpha)
        alpha = float(g[0])
        grad[rows, targets] = (p_target - 1.0).to(grad.dtype)  # d/dz_t = p_t - 1
    else:
        chunk_rows = max(1, (1 << 18) // weight.size(0))  # ~1 MB of fp32 per chunk: in L2
        for start in range(0, grad.size(0), chunk_rows):
            chunk = grad[start : start + chunk_rows]
            chunk.copy_(chunk.float().mul_(g[start : start + chunk_rows, None]))
        grad[rows, targets] = ((p_target - 1.0) * g).to(grad.dtype)
    zero = grad.new_zeros(())  # beta = 0: only alpha * (A @ B)
    grad_h = torch.addmm(zero, grad, weight, beta=0, alpha=alpha) if need_h else h.new_empty(0)
    grad_w = (torch.addmm(zero, grad.t(), h, beta=0, alpha=alpha) if need_weight
              else weight.new_empty(0))
    return grad_h, grad_w


@head_cross_entropy_backward.register_fake
def _(grad_rows: Tensor, h: Tensor, weight: Tensor, targets: Tensor, p_target: Tensor,
      probs: Tensor, need_h: bool, need_weight: bool) -> tuple[Tensor, Tensor]:
    return (torch.empty_like(h) if need_h else h.new_empty(0),
            torch.empty_like(weight) if need_weight else weight.new_empty(0))


def _head_setup(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    no_zero_grads(ctx)
    h, weight, targets, _, pool = inputs
    ctx.save_for_backward(h, weight, targets, output[2], output[1])
    hold(ctx, pool)


def _head_backward(ctx: Any, grad_rows: Tensor, *_: Any) -> tuple[Any, ...]:
    backward_once(ctx, "head cross-entropy")  # the softmax buffer became the gradient
    need_h, need_weight = ctx.needs_input_grad[:2]
    grad_h, grad_w = head_cross_entropy_backward(grad_rows, *ctx.saved_tensors, need_h,
                                                 need_weight)
    release(ctx)
    return grad_h if need_h else None, grad_w if need_weight else None, None, None, None


head_cross_entropy.register_autograd(_head_backward, setup_context=_head_setup)


def head_losses(h: Tensor, weight: Tensor, targets: Tensor, pool: int = -1) -> Tensor:
    """(N, C) hidden, (V, C) output weights, (N,) targets -> (N,) fp32 losses, equal to
    F.cross_entropy(h @ weight.T, targets, reduction="none") with fp32 softmax math."""
    keep = torch.is_grad_enabled() and (h.requires_grad or weight.requires_grad)
    losses, _, _ = head_cross_entropy(h, weight, targets.reshape(-1), keep,
                                      lend(pool, h, weight))
    return losses
