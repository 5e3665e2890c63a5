"""Which examples make each fine-tuning batch: random batches or length buckets.

A batch is padded to its longest sequence, so random batches of short and long examples are
mostly padding (SST-2: ~16 real tokens per row, ~47 padded). Length buckets keep the epoch's
seeded shuffle and only regroup it: the epoch's permutation is cut into pools of
`pool_batches` batches, each pool is sorted by length (stable, so ties keep the shuffled
order) and cut into batches, and the batches of the epoch are then visited in a seeded random
order. Every example is still seen exactly once per epoch, the examples of an epoch are the
same as with random batches (the same permutation of the same training set), the number of
updates is the same (ceil(n / batch_size)), and the same seed gives the same batches.

Off at `finetune.bucket_pool_batches: null`: length-homogeneous batches change what a short run
learns. On the synthetic MRPC rule of tests/e2e/test_finetune_synthetic.py (a tiny
model from scratch, 192 updates) pools of 8 or 50 batches left it a constant predictor at
fine-tuning seeds 0, 1 and 2, where random batches and pools of 1-2 batches learn the rule
(measured 2026-11-26). A preset turns buckets on only with its own check that the arms learn:
the demo and the study (pools of 50) after the from-scratch SST-2 pilot learnt as well with them
as without (benchmarks/results/scratch-pilot-check_*).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def example_lengths(seqs: Sequence[Sequence[Sequence[int]]]) -> np.ndarray:
    """Per example, the length it pads its batch to: its longest sequence."""
    return np.array([max(len(s) for s in ex) for ex in seqs], dtype=np.int64)


def epoch_batches(perm: np.ndarray, lengths: np.ndarray, batch_size: int,
                  pool_batches: int | None, order_rng: np.random.Generator) -> list[np.ndarray]:
    """The batches (row indices) of one epoch visiting `perm`.

    `pool_batches` None: consecutive slices of `perm` (random batches, the order of `perm`).
    Else length buckets: pools of pool_batches * batch_size rows of `perm`, each sorted by
    length and cut into batches; the batches' order is then shuffled with `order_rng` (which
    the random-batch path never draws from).
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if pool_batches is None:
        return [perm[s : s + batch_size] for s in range(0, len(perm), batch_size)]
    if pool_batches < 1:
        raise ValueError(f"pool_batches must be >= 1 or None, got {pool_batches}")
    pool = pool_batches * batch_size
    batches: list[np.ndarray] = []
    for start in range(0, len(perm), pool):
        rows = perm[start : start + pool]
        rows = rows[np.argsort(lengths[rows], kind="stable")]
        batches.extend(rows[s : s + batch_size] for s in range(0, len(rows), batch_size))
    return [batches[i] for i in order_rng.permutation(len(batches))]


def padded_tokens(batches: Sequence[np.ndarray], seqs: Sequence[Sequence[Sequence[int]]]
                  ) -> tuple[int, int]:
    """(real tokens, tokens after padding) of these batches: every sequence of a batch is padded
    to the batch's longest, as collate builds it."""
    real = padded = 0
    for rows in batches:
        lens = [len(s) for i in rows for s in seqs[i]]
        real += sum(lens)
        padded += max(lens) * len(lens)
    return real, padded
