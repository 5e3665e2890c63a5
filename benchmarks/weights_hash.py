"""sha256 of the weights after N pre-training steps of the params.yaml model on seeded tokens.

A refactor of the model or its kernels that must not change results (bit-identity) is checked
by running this before and after it: the printed digests must be equal. Each run trains the
params.yaml model (dropout as configured) with `train_step` on CPU, once in fp32 and once under
bf16 autocast, on random token windows drawn from a fixed seed.

    python benchmarks/weights_hash.py [--steps 20] [--backend cpu_fused]
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gpt1.config import load_params  # noqa: E402
from gpt1.model import GPT  # noqa: E402
from gpt1.optim import build_optimizer  # noqa: E402
from gpt1.pretraining import CausalLM, micro_batch_seed, seeded_loss  # noqa: E402
from gpt1.step import train_step  # noqa: E402

VOCAB = 1000


def weights_digest(model: torch.nn.Module) -> str:
    """sha256 over every state tensor's name and raw bytes, in state_dict order."""
    digest = hashlib.sha256()
    for name, tensor in model.state_dict().items():
        digest.update(name.encode())
        digest.update(tensor.detach().contiguous().view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def train(steps: int, precision: str, backend: str | None) -> str:
    params = load_params(Path(__file__).resolve().parents[1] / "params.yaml")
    cfg, pre = params.model, params.pretrain
    torch.manual_seed(params.seed)
    model = GPT(cfg, VOCAB)
    if backend is not None:
        from gpt1.backends import apply_backend

        apply_backend(model, backend, torch.device("cpu"))
    lm = CausalLM(model)
    opt = build_optimizer(lm, pre.lr_max, (pre.adam_beta1, pre.adam_beta2), pre.adam_eps,
                          pre.weight_decay)
    data = torch.Generator().manual_seed(params.seed)
    if pre.micro_batch_seqs == "auto":  # a GPU memory probe (gpt1/micro_batch.py)
        raise SystemExit("params.yaml: pretrain.micro_batch_seqs is auto; this CPU benchmark "
                         "needs a number")
    micro = pre.batch_seqs // pre.micro_batch_seqs
    for step in range(steps):
        batches = [
            (micro_batch_seed(params.seed, step, m),
             torch.randint(0, VOCAB, (pre.micro_batch_seqs, pre.seq_len + 1), generator=data))
            for m in range(micro)
        ]
        train_step(lm, opt, batches, seeded_loss, pre.lr_max, pre.grad_clip, precision)
    return weights_digest(model)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--backend", default=None, help="model.backend to apply")
    args = parser.parse_args()
    for precision in ("fp32", "bf16"):
        print(f"{precision} {args.steps} steps: {train(args.steps, precision, args.backend)}")


if __name__ == "__main__":
    main()
