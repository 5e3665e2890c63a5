"""Length-bucketed fine-tuning batches: every example once per epoch, the epoch's examples and
update count unchanged, seeded, less padding; evaluation batched by length but returned in
the examples' order."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from gpt1.batching import epoch_batches, example_lengths, padded_tokens
from gpt1.finetune import infer
from gpt1.heads import TaskModel
from gpt1.model import GPT
from gpt1.tasks.formats import Encoded
from gpt1.tasks.registry import TASKS


def _seqs(n: int, seed: int = 0) -> list[list[list[int]]]:
    """n one-sequence examples of skewed lengths 2..60 (most short, as SST-2)."""
    lens = np.random.default_rng(seed).geometric(0.08, size=n).clip(2, 60)
    return [[list(range(1, int(k) + 1))] for k in lens]


@pytest.mark.parametrize("n, batch_size, pool", [(1000, 32, 50), (333, 16, 4), (10, 4, 1),
                                                 (7, 32, 50)])
def test_buckets_visit_the_epochs_permutation_once(n: int, batch_size: int, pool: int) -> None:
    seqs = _seqs(n)
    lengths = example_lengths(seqs)
    perm = np.random.default_rng(3).permutation(n)
    batches = epoch_batches(perm, lengths, batch_size, pool, np.random.default_rng(4))
    flat = np.concatenate(batches)
    assert sorted(flat.tolist()) == list(range(n))  # every example exactly once
    assert len(batches) == math.ceil(n / batch_size)  # as many updates as random batches
    assert all(len(b) <= batch_size for b in batches)
    assert sum(len(b) < batch_size for b in batches) <= 1  # at most one short batch
    # each batch comes from one pool of the epoch's permutation
    pool_of = {int(r): i // (pool * batch_size) for i, r in enumerate(perm)}
    assert all(len({pool_of[int(r)] for r in b}) == 1 for b in batches)


def test_random_batches_are_consecutive_slices_and_draw_nothing() -> None:
    perm = np.random.default_rng(0).permutation(50)
    order_rng = np.random.default_rng(1)
    batches = epoch_batches(perm, example_lengths(_seqs(50)), 8, None, order_rng)
    assert [b.tolist() for b in batches] == [perm[s : s + 8].tolist() for s in range(0, 50, 8)]
    assert order_rng.integers(1 << 30) == np.random.default_rng(1).integers(1 << 30)


def test_buckets_are_seeded_and_cut_padding() -> None:
    seqs = _seqs(2000)
    lengths = example_lengths(seqs)
    perm = np.random.default_rng(5).permutation(len(seqs))

    def run(seed: int) -> list[list[int]]:
        return [b.tolist() for b in epoch_batches(perm, lengths, 32, 50,
                                                  np.random.default_rng(seed))]

    assert run(7) == run(7)
    assert run(7) != run(8)  # the batches' order is shuffled, not sorted by length
    first_lengths = [int(lengths[b].max()) for b in epoch_batches(perm, lengths, 32, 50,
                                                                   np.random.default_rng(7))]
    assert first_lengths != sorted(first_lengths)
    real, padded_random = padded_tokens(epoch_batches(perm, lengths, 32, None,
                                                      np.random.default_rng(0)), seqs)
    real_b, padded_bucketed = padded_tokens(epoch_batches(perm, lengths, 32, 50,
                                                          np.random.default_rng(0)), seqs)
    assert real == real_b == int(lengths.sum())
    assert padded_random / real > 2.0  # skewed lengths: random batches are mostly padding
    assert padded_bucketed / real < 1.15


def test_padded_tokens_counts_every_sequence_of_a_batch() -> None:
    seqs = [[[1, 2], [1, 2, 3, 4]], [[5], [6, 7, 8]]]  # 2 examples x 2 sequences
    assert padded_tokens([np.array([0, 1])], seqs) == (10, 16)


@pytest.mark.parametrize("bad", [0, -1])
def test_bad_pool_or_batch_size_is_refused(bad: int) -> None:
    perm, lengths = np.arange(4), np.ones(4, dtype=np.int64)
    with pytest.raises(ValueError, match="pool_batches"):
        epoch_batches(perm, lengths, 2, bad, np.random.default_rng(0))
    with pytest.raises(ValueError, match="batch_size"):
        epoch_batches(perm, lengths, bad, 2, np.random.default_rng(0))


def test_eval_batches_by_length_and_returns_the_examples_order(tiny_params) -> None:
    torch.manual_seed(0)
    spec = TASKS["sst2"]
    model = TaskModel(GPT(tiny_params.model, 40), spec, 0.1, 0.02)
    seqs = [[[int(t) % 37 + 1 for t in s[0][:30]]] for s in _seqs(23, seed=2)]
    data = Encoded(seqs, np.zeros(len(seqs), dtype=np.int64), [str(i) for i in range(23)],
                   [""] * 23, [False] * 23)
    together = infer(model, data, 8, "fp32", torch.device("cpu"), "eval")
    one_by_one = np.stack([infer(model, data.subset([i]), 1, "fp32", torch.device("cpu"),
                                 "eval")[0] for i in range(len(seqs))])
    assert np.allclose(together, one_by_one, atol=1e-5)
