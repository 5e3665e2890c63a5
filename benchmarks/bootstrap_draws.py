"""The report's run-level bootstrap: vectorised draw sums vs a Python loop over draws.

One contrast as the study scores it (QNLI's 5,732 examples, two arms x 6 runs, accuracy):
`gpt1.stats.draw_sums` (resample counts per chunk of draws, one matrix product; the counts of
a split cached for the next contrast) against the peer a loop over draws would be (per draw:
one resample of the examples, every run's accuracy on it). Both use the same number of draws;
the script prints each time and the ratio.

    nice .venv/bin/python benchmarks/bootstrap_draws.py [--draws 2000] [--n 5732]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from gpt1 import stats
from gpt1.scoring import score_features


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--draws", type=int, default=2000)
    parser.add_argument("--n", type=int, default=5732)
    parser.add_argument("--runs", type=int, default=12)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    hits = (rng.random((args.runs, args.n)) < 0.6).astype(float)
    feats = np.concatenate([score_features("acc", h, np.ones(args.n)) for h in hits], axis=1)

    start = time.perf_counter()
    stats._counts.cache_clear()
    vec = stats.draw_sums(feats, args.draws, seed=1)[:, 1::2] / args.n
    t_vec = time.perf_counter() - start
    start = time.perf_counter()
    cached = stats.draw_sums(feats, args.draws, seed=1)[:, 1::2] / args.n
    t_cached = time.perf_counter() - start

    start = time.perf_counter()
    loop_rng = np.random.default_rng(1)
    loop = np.empty((args.draws, args.runs))
    for b in range(args.draws):  # the peer: one resample per draw, in Python
        idx = loop_rng.integers(0, args.n, args.n)
        loop[b] = hits[:, idx].mean(axis=1)
    t_loop = time.perf_counter() - start

    assert np.allclose(vec, cached)
    spread = (float(np.std(vec[:, 0])), float(np.std(loop[:, 0])))
    print(f"{args.draws} draws x {args.n} examples x {args.runs} runs")
    print(f"vectorised (first call) {t_vec:.2f} s, cached counts {t_cached:.2f} s, "
          f"Python loop {t_loop:.2f} s")
    print(f"loop / vectorised = {t_loop / t_vec:.1f}x; loop / cached = {t_loop / t_cached:.1f}x")
    print(f"sd of one run's accuracy over draws: vectorised {spread[0]:.4f}, loop {spread[1]:.4f}")


if __name__ == "__main__":
    main()
