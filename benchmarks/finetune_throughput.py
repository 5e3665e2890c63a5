"""Fine-tuning and evaluation throughput (examples/s) per input family, at the params model.

For each family (classify, entail, similarity = 2 sequences, choice = 4 sequences) a batch of
params.finetune.batch_size examples of a typical token length is built; one training step
(gpt1.step.train_step: forward, backward, clipping, fused AdamW) is timed with the auxiliary
LM loss (lambda = params.finetune.lm_coef) and, as the peer measured in the same run, without
it (lambda = 0), alternating round by round so load from other processes hits both alike;
evaluation (forward only, no grad) is timed too. Prints medians, the LM-loss cost ratio, and
the projected time of one demo fine-tune per family at the params caps.

    .venv/bin/python benchmarks/finetune_throughput.py [--params params.yaml] [--rounds 5]
        [--results]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from results_file import add_option, recording

from gpt1.backends import apply_backend
from gpt1.config import load_params
from gpt1.finetune import infer, resolve_hparams
from gpt1.heads import TaskModel
from gpt1.model import GPT
from gpt1.optim import build_optimizer
from gpt1.runtime import resolve_precision
from gpt1.step import train_step
from gpt1.task_losses import make_loss_fn
from gpt1.tasks.formats import Encoded
from gpt1.tasks.registry import TASKS

# family -> (representative task, sequences per example, tokens per sequence)
FAMILIES = {"classify": ("sst2", 1, 32), "entail": ("rte", 1, 96),
            "similarity": ("mrpc", 2, 64), "choice": ("race", 4, 128)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--vocab", type=int, default=8_259, help="vocabulary incl. the 3 specials")
    add_option(ap)
    args = ap.parse_args()
    params = load_params(args.params)
    device = torch.device("cpu")
    precision = resolve_precision(params.pretrain.precision, device)
    print(f"model {params.model.n_layer}x{params.model.n_embd}, vocab {args.vocab}, "
          f"precision {precision}, threads {torch.get_num_threads()}")
    print(f"{'family':<11}{'B x K x T':>14}{'train ex/s':>12}{'no-LM ex/s':>12}"
          f"{'LM cost':>9}{'eval ex/s':>11}{'demo s':>8}")
    for family, (task, K, T) in FAMILIES.items():
        spec, hp = TASKS[task], resolve_hparams(params, task)
        B = hp.batch_size
        torch.manual_seed(0)
        T = min(T, params.model.n_positions)
        body = GPT(params.model, args.vocab)
        apply_backend(body, params.model.backend, torch.device("cpu"))
        model = TaskModel(body, spec, hp.clf_pdrop, hp.init_std)
        opt = build_optimizer(model, hp.lr, hp.betas, hp.eps, hp.weight_decay)
        idx = torch.randint(0, args.vocab - 3, (B, K, T))
        lengths = torch.full((B, K), T)
        labels = (torch.randn(B) if spec.regression else
                  torch.randint(0, max(K, len(spec.labels)) if spec.fmt != "choice" else K, (B,)))
        batch = (idx, lengths, labels)
        fns = {"lm": make_loss_fn(spec, hp.lm_coef), "no_lm": make_loss_fn(spec, 0.0)}
        for fn in fns.values():  # warm-up
            train_step(model, opt, [batch], fn, hp.lr, hp.grad_clip, precision)
        times: dict[str, list[float]] = {k: [] for k in fns}
        for _ in range(args.rounds):
            for name, fn in fns.items():
                t0 = time.perf_counter()
                train_step(model, opt, [batch], fn, hp.lr, hp.grad_clip, precision)
                times[name].append(time.perf_counter() - t0)
        n_eval = 4 * B
        data = Encoded([[list(range(1, T + 1))] * K] * n_eval, torch.zeros(n_eval).numpy(),
                       [str(i) for i in range(n_eval)], [""] * n_eval, [False] * n_eval)
        t0 = time.perf_counter()
        infer(model, data, 2 * B, precision, device, "eval")
        eval_rate = n_eval / (time.perf_counter() - t0)
        lm_rate = B / statistics.median(times["lm"])
        no_lm_rate = B / statistics.median(times["no_lm"])
        n_train = (hp.max_train_examples or 0) * hp.epochs
        demo = n_train / lm_rate + 2 * (hp.max_eval_examples or 0) * hp.epochs / eval_rate
        print(f"{family:<11}{f'{B} x {K} x {T}':>14}{lm_rate:>12.1f}{no_lm_rate:>12.1f}"
              f"{no_lm_rate / lm_rate:>8.2f}x{eval_rate:>11.1f}{demo:>8.0f}")


if __name__ == "__main__":
    with recording("finetune-throughput"):
        main()
