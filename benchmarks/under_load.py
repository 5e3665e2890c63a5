"""A demo-config training step alone vs beside busy processes, per OpenMP wait policy.

For each policy (unset: libgomp's default, idle workers spin a while before sleeping; PASSIVE:
they sleep at once, what the `gpt1` CLI sets before torch loads unless the variable is set) a
child process times training steps of params.yaml's model (bf16 where the CPU has it, 2
threads) with 0, 1 and 2 pure-Python busy loops beside it, rounds alternating, and the script
prints each slowdown against the fair-share one: with n threads, b busy processes and c cores
a fair scheduler slows the step by max(1, (n + b) / c) / max(1, n / c). The fused CPU kernels
(gpt1/backends/kernels.c) start their pthreads per call and join them (blocking), so only OpenMP's
workers can spin.

    nice .venv/bin/python benchmarks/under_load.py [--steps 4] [--rounds 2] [--results]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from results_file import add_option, recording

THREADS = 2
POLICIES = ("unset", "PASSIVE")
BUSY = (0, 1, 2)


def child(params_path: str, steps: int) -> None:
    """Print the median time of `steps` training steps (after one warm-up) as JSON."""
    import torch

    from gpt1.config import load_params
    from gpt1.model import GPT
    from gpt1.optim import build_optimizer
    from gpt1.pretraining import CausalLM
    from gpt1.runtime import resolve_precision
    from gpt1.step import train_step

    torch.set_num_threads(THREADS)
    params = load_params(params_path)
    cfg = params.pretrain
    torch.manual_seed(0)
    model = CausalLM(GPT(params.model, 8_192)).train()
    opt = build_optimizer(model, 1e-4, (0.9, 0.999), 1e-8, 0.01)
    precision = resolve_precision(cfg.precision, torch.device("cpu"))
    if cfg.micro_batch_seqs == "auto":  # a GPU memory probe (gpt1/micro_batch.py)
        raise SystemExit(f"{params_path}: pretrain.micro_batch_seqs is auto; this CPU benchmark "
                         "needs a number")
    batch = torch.randint(0, 8_192, (cfg.micro_batch_seqs, cfg.seq_len + 1))
    times = []
    for i in range(steps + 1):
        start = time.perf_counter()
        train_step(model, opt, [batch], lambda m, b: m(b), 1e-4, 1.0, precision)
        if i:
            times.append(time.perf_counter() - start)
    print(json.dumps({"step_s": statistics.median(times), "precision": precision}))


def timed(policy: str, busy: int, args: argparse.Namespace) -> float:
    """Median step time of a child run with OMP_WAIT_POLICY=policy beside `busy` spinners."""
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
                for _ in range(busy)]
    try:
        env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
        if policy != "unset":
            env["OMP_WAIT_POLICY"] = policy
        out = subprocess.run([sys.executable, __file__, "--child", "--params", args.params,
                              "--steps", str(args.steps)], env=env, check=True,
                             capture_output=True, text=True).stdout
    finally:
        for proc in spinners:
            proc.kill()
            proc.wait()
    return float(json.loads(out.splitlines()[-1])["step_s"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--steps", type=int, default=4, help="timed steps per child run")
    parser.add_argument("--rounds", type=int, default=2, help="alternating rounds")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    add_option(parser)
    args = parser.parse_args()
    if args.child:
        child(args.params, args.steps)
        return
    cores = os.cpu_count() or 1
    runs: dict[tuple[str, int], list[float]] = {(p, b): [] for p in POLICIES for b in BUSY}
    for r in range(args.rounds):
        for key in (list(runs) if r % 2 == 0 else list(reversed(runs))):
            runs[key].append(timed(*key, args))
    print(f"{cores} cores, {THREADS} threads, median of {args.rounds} rounds x {args.steps} steps")
    for policy in POLICIES:
        alone = statistics.median(runs[(policy, 0)])
        for busy in BUSY:
            sec = statistics.median(runs[(policy, busy)])
            fair = max(1.0, (THREADS + busy) / cores) / max(1.0, THREADS / cores)
            print(f"OMP_WAIT_POLICY={policy:<7} busy={busy}: {sec * 1e3:7.0f} ms/step, "
                  f"slowdown {sec / alone:4.2f}x (fair share {fair:4.2f}x)")


if __name__ == "__main__":
    with recording("under-load"):
        main()
