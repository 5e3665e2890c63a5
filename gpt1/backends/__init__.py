"""Compute backends: how a built model's modules compute, chosen by `model.backend`.

gpt1/model.py is the math in plain torch (the `torch` backend: SDPA, torch's dropout, on any
device). `cpu_fused` swaps its modules for subclasses running the fused CPU kernels of
kernels.c, registered as torch custom ops (gpt1/backends/ops.py) so torch.compile traces them;
`auto` picks `cpu_fused` on CPU when the kernel library builds, `torch` otherwise (CUDA
always). The backend is applied after construction, like torch.compile, and changes no
parameter: checkpoints and exports are the same under either.
"""

from __future__ import annotations

import torch
from torch import nn

from gpt1.backends import fused, native
from gpt1.errors import Gpt1Error

BACKENDS = ("auto", "torch", "cpu_fused")


def resolve(name: str, device: torch.device, model: nn.Module) -> str:
    """The backend `name` means for `model` on `device`: "torch" or "cpu_fused"."""
    if name not in BACKENDS:
        raise Gpt1Error(f"model.backend: unknown backend {name!r} (one of {', '.join(BACKENDS)})")
    if name == "torch":
        return "torch"
    why = None
    if device.type != "cpu":
        why = f"it runs on CPU only, not {device.type}"
    elif any(p.dtype != torch.float32 for p in model.parameters()):
        why = "it needs float32 parameters"
    elif native.library() is None:
        why = "the kernel library is not available (see the warning above)"
    if why is None:
        return "cpu_fused"
    if name == "cpu_fused":
        raise Gpt1Error(f"model.backend: cpu_fused cannot be used: {why}")
    return "torch"


def backend_of(model: nn.Module) -> str:
    """The backend installed on `model`: "cpu_fused" or "torch" (what artifacts record)."""
    return "cpu_fused" if any(isinstance(m, fused.FUSED_TYPES) for m in model.modules()) \
        else "torch"


def apply_backend(model: nn.Module, name: str, device: torch.device) -> str:
    """Install the backend `name` (auto | torch | cpu_fused) onto `model` in place; returns the
    resolved name ("torch" or "cpu_fused")."""
    resolved = resolve(name, device, model)
    if resolved == "cpu_fused":
        fused.install(model)
    return resolved
