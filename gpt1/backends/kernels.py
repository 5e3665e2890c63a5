"""Fused CPU kernels of the training step (kernels.c) and their torch references.

Each op here runs the C kernel when it can (CPU tensor, float32 or bfloat16, the library
built: gpt1/backends/native.py) and otherwise the torch reference below it, which computes the
same function: the same dropout masks bit for bit (both hash the element index with the same
seed), the same math in fp32 up to rounding.
"""

from __future__ import annotations

import torch

from gpt1.backends.native import library

KIND = {torch.float32: 0, torch.bfloat16: 1}
MASK32 = 0xFFFFFFFF


def usable(*tensors: torch.Tensor) -> bool:
    """True when the C kernels can take these tensors (CPU, one float dtype, < 2^32 elements)."""
    if not tensors or library() is None:
        return False
    dtype = tensors[0].dtype
    return all(
        t.device.type == "cpu" and t.dtype == dtype and t.numel() < 2**32 for t in tensors
    ) and dtype in KIND


def _ptr(t: torch.Tensor) -> int:
    return int(t.data_ptr())


def new_seed(device: torch.device | None = None) -> int:
    """A 64-bit mask seed drawn from torch's generator for `device` (so manual_seed governs it)."""
    draw = torch.randint(-(2**63), 2**63 - 1, (), dtype=torch.int64, device=device or "cpu")
    return int(draw) & 0xFFFFFFFFFFFFFFFF


def keep_threshold(p: float) -> tuple[int, float]:
    """(threshold, scale): keep element i iff hash(i) >= threshold; kept values times scale.

    The drop probability is p quantised to 2^-32; scale uses the quantised value, so E[y] = x.
    """
    threshold = min(MASK32, max(0, round(p * 2**32)))
    return threshold, 2**32 / (2**32 - threshold)


# ---- torch references ------------------------------------------------------------------------

def _mul32(x: torch.Tensor, c: int) -> torch.Tensor:
    """(x * c) mod 2^32 for x in [0, 2^32) held in int64, without int64 overflow."""
    return (x * (c & 0xFFFF) + (((x * (c >> 16)) & 0xFFFF) << 16)) & MASK32


def _mix32(x: torch.Tensor) -> torch.Tensor:
    x = x ^ (x >> 16)
    x = _mul32(x, 0x7FEB352D)
    x = x ^ (x >> 15)
    x = _mul32(x, 0x846CA68B)
    return x ^ (x >> 16)


def keep_mask(numel: int, seed: int, p: float, device: torch.device | str = "cpu") -> torch.Tensor:
    """(numel,) bool keep mask of element indices 0..numel-1: the kernels' mask, in torch ops."""
    threshold, _ = keep_threshold(p)
    index = torch.arange(numel, dtype=torch.int64, device=device)
    s0, s1 = seed & MASK32, (seed >> 32) & MASK32
    return _mix32(_mix32((index + s0) & MASK32) ^ s1) >= threshold


def _dropout_reference(x: torch.Tensor, seed: int, p: float) -> torch.Tensor:
    _, scale = keep_threshold(p)
    keep = keep_mask(x.numel(), seed, p, x.device).view(x.shape)
    return (x.float() * torch.where(keep, scale, 0.0)).to(x.dtype)  # fp32 math, as the kernel


def _attn_reference(s: torch.Tensor, alpha: float, seed: int, p: float
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    rows, t_len = s.shape
    query = torch.arange(rows, device=s.device) % t_len
    visible = torch.arange(t_len, device=s.device)[None, :] <= query[:, None]
    probs = torch.softmax((alpha * s.float()).masked_fill(~visible, float("-inf")), dim=-1)
    probs = probs.to(s.dtype)
    return probs, _dropout_reference(probs, seed, p)


# ---- ops (kernel, else reference) ------------------------------------------------------------

def dropout(x: torch.Tensor, seed: int, p: float) -> torch.Tensor:
    """keep ? x * scale : 0 with the (seed, index) mask; the same call is its own backward."""
    x = x.contiguous()
    lib = library()
    if lib is None or not usable(x):
        return _dropout_reference(x, seed, p)
    y = torch.empty_like(x)
    threshold, scale = keep_threshold(p)
    lib.gpt1_dropout(_ptr(x), _ptr(y), x.numel(), KIND[x.dtype], seed, threshold, scale,
                     torch.get_num_threads())
    return y


def _out(like: torch.Tensor, out: torch.Tensor | None) -> torch.Tensor:
    if out is None:
        return torch.empty_like(like)
    if out.shape != like.shape or out.dtype != like.dtype or not out.is_contiguous():
        raise ValueError(f"out: expected contiguous {like.dtype} {tuple(like.shape)}, got "
                         f"{out.dtype} {tuple(out.shape)}")
    return out


def gelu(u: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """tanh-approximated GELU (spec §5), into `out` when given."""
    u = u.contiguous()
    lib = library()
    if lib is None or not usable(u):
        y = torch.nn.functional.gelu(u, approximate="tanh")
        return y if out is None else _out(u, out).copy_(y)
    y = _out(u, out)
    lib.gpt1_gelu_fwd(_ptr(u), _ptr(y), u.numel(), KIND[u.dtype], torch.get_num_threads())
    return y


def gelu_backward(u: torch.Tensor, grad: torch.Tensor, out: torch.Tensor | None = None
                  ) -> torch.Tensor:
    """dL/du from dL/dgelu(u), into `out` when given (which may be `grad` itself)."""
    u, grad = u.contiguous(), grad.contiguous().to(u.dtype)
    lib = library()
    if lib is None or not usable(u, grad):
        dx = torch.ops.aten.gelu_backward(grad, u, approximate="tanh")
        return dx if out is None else _out(u, out).copy_(dx)
    dx = _out(u, out)
    lib.gpt1_gelu_bwd(_ptr(u), _ptr(grad), _ptr(dx), u.numel(), KIND[u.dtype],
                      torch.get_num_threads())
    return dx


def causal_attention_probs(
    s: torch.Tensor, alpha: float, seed: int, p: float,
    out: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(R, T) scores q.k, row r = query r % T -> (softmax(alpha s) over keys <= r % T, its
    dropout with the (seed, index) mask), both in s's dtype (into `out` when given)."""
    s = s.contiguous()
    lib = library()
    if lib is None or not usable(s):
        ref_probs, ref_dropped = _attn_reference(s, alpha, seed, p)
        if out is None:
            return ref_probs, ref_dropped
        return _out(s, out[0]).copy_(ref_probs), _out(s, out[1]).copy_(ref_dropped)
    probs = _out(s, out[0] if out else None)
    dropped: torch.Tensor | None = _out(s, out[1] if out else None) if p > 0 else None
    threshold, scale = keep_threshold(p)
    lib.gpt1_attn_fwd(_ptr(s), _ptr(probs), _ptr(dropped) if dropped is not None else None,
                      s.size(0), s.size(1), KIND[s.dtype], alpha, seed, threshold, scale,
                      torch.get_num_threads())
    return probs, dropped if dropped is not None else probs


def causal_attention_probs_backward(
    probs: torch.Tensor, grad_dropped: torch.Tensor, alpha: float, seed: int, p: float
) -> torch.Tensor:
    """dL/ds from the saved probabilities and dL/d(dropped probabilities); may reuse the
    gradient's memory."""
    probs, grad = probs.contiguous(), grad_dropped.contiguous().to(probs.dtype)
    lib = library()
    if lib is None or not usable(probs, grad):
        dp = _dropout_reference(grad, seed, p).float()
        pf = probs.float()
        return (alpha * pf * (dp - (pf * dp).sum(-1, keepdim=True))).to(probs.dtype)
    threshold, scale = keep_threshold(p)
    lib.gpt1_attn_bwd(_ptr(probs), _ptr(grad), probs.size(0), probs.size(1), KIND[probs.dtype],
                      alpha, seed, threshold, scale, torch.get_num_threads())
    return grad


def softmax_rows_(x: torch.Tensor) -> torch.Tensor:
    """Overwrite each row of the (N, V) contiguous x with its softmax (fp32 math); return the
    rows' (N,) fp32 log-sum-exp."""
    lib = library()
    if lib is None or not usable(x) or not x.is_contiguous():
        lse = torch.empty(x.size(0), dtype=torch.float32, device=x.device)
        rows = max(1, (1 << 18) // max(1, x.size(1)))  # ~1 MB of fp32 per chunk: stays in L2
        for start in range(0, x.size(0), rows):
            chunk = x[start : start + rows].to(torch.float32, copy=True)
            peak = chunk.amax(-1, keepdim=True)
            total = chunk.sub_(peak).exp_().sum(-1, keepdim=True)
            lse[start : start + rows] = (peak + total.log()).squeeze(1)
            x[start : start + rows] = chunk.div_(total)
        return lse
    lse = torch.empty(x.size(0), dtype=torch.float32, device=x.device)
    lib.gpt1_softmax_rows(_ptr(x), _ptr(lse), x.size(0), x.size(1), KIND[x.dtype],
                          torch.get_num_threads())
    return lse


def add_dropout_layer_norm(
    x: torch.Tensor, f: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor, eps: float,
    seed: int, p: float, save_sum: bool, sum_out: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor, torch.Tensor]:
    """LayerNorm(x + dropout(f)) over the last dim of (N, C) rows: x, gamma, beta fp32, f fp32
    or bf16. Returns (h fp32, the sum s if save_sum (into sum_out when given), per-row mean,
    per-row 1/std)."""
    x, f = x.contiguous(), f.contiguous()
    lib = library()
    if lib is None or not usable(x, gamma, beta) or x.dtype != torch.float32 or not usable(f):
        s = x + _dropout_reference(f.float(), seed, p)  # fp32 math, as the kernel
        mean = s.mean(-1)
        rstd = torch.rsqrt(s.var(-1, unbiased=False) + eps)
        h = torch.nn.functional.layer_norm(s, (s.size(-1),), gamma, beta, eps)
        return h, s if save_sum else None, mean, rstd
    rows, cols = x.shape
    h = torch.empty_like(x)
    saved = _out(x, sum_out) if save_sum else None
    mean = torch.empty(rows, dtype=torch.float32)
    rstd = torch.empty(rows, dtype=torch.float32)
    threshold, scale = keep_threshold(p)
    lib.gpt1_add_layer_norm_fwd(
        _ptr(x), _ptr(f), _ptr(gamma.contiguous()), _ptr(beta.contiguous()),
        _ptr(saved) if saved is not None else None, _ptr(h), _ptr(mean), _ptr(rstd), rows, cols,
        KIND[f.dtype], eps, seed, threshold, scale, torch.get_num_threads())
    return h, saved, mean, rstd


def add_dropout_layer_norm_backward(
    grad_h: torch.Tensor, s: torch.Tensor, gamma: torch.Tensor, mean: torch.Tensor,
    rstd: torch.Tensor, seed: int, p: float, f_dtype: torch.dtype,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dL/dx fp32, dL/df in f_dtype, dL/dgamma, dL/dbeta) of `add_dropout_layer_norm`."""
    grad_h = grad_h.contiguous().float()
    lib = library()
    if lib is None or not usable(grad_h, s, gamma) or f_dtype not in KIND:
        xhat = (s - mean[:, None]) * rstd[:, None]
        g = grad_h * gamma
        ds = rstd[:, None] * (g - g.mean(-1, keepdim=True)
                              - xhat * (g * xhat).mean(-1, keepdim=True))
        grad_f = _dropout_reference(ds, seed, p).to(f_dtype)
        return ds, grad_f, (grad_h * xhat).sum(0), grad_h.sum(0)
    rows, cols = grad_h.shape
    dx = torch.empty_like(grad_h)
    df = torch.empty(rows, cols, dtype=f_dtype)
    dgamma = torch.empty(cols, dtype=torch.float32)
    dbeta = torch.empty(cols, dtype=torch.float32)
    threshold, scale = keep_threshold(p)
    if lib.gpt1_add_layer_norm_bwd(
        _ptr(grad_h), _ptr(s), _ptr(gamma.contiguous()), _ptr(mean), _ptr(rstd), _ptr(dx),
        _ptr(df), _ptr(dgamma), _ptr(dbeta), rows, cols, KIND[f_dtype], seed, threshold, scale,
        torch.get_num_threads(),
    ):
        raise MemoryError("add_dropout_layer_norm_backward: out of memory for partial sums")
    return dx, df, dgamma, dbeta
