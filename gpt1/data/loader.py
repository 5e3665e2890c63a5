"""Contiguous training windows from the token shards (spec §1: each sequence "a randomly
sampled contiguous span of 512 tokens").

Stateless and seeded: the i-th sequence of the whole run is a pure function of (seed, i), so
the data position is one integer (sequences consumed), resuming equals not stopping, and
data-parallel ranks slice the same global stream. No worker processes (fork breaks inside
Prefect's worker processes); reading a window from a memmap is a memcpy.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from gpt1.errors import Gpt1Error


class WindowSampler:
    """Epochs over every window of seq_len + 1 tokens (input + next-token target).

    Each epoch draws one random phase in [0, seq_len) so window boundaries move between epochs,
    then visits all windows of every shard in a seeded random order. Windows never cross a
    shard boundary.
    """

    def __init__(self, arrays: Sequence[np.ndarray], seq_len: int, seed: int) -> None:
        self.arrays = list(arrays)
        self.seq_len = seq_len
        self.seed = seed
        # With any phase < seq_len, windows k = 0..count-1 fit: phase + k*T + T + 1 <= len.
        counts = np.array([max(0, (len(a) - seq_len) // seq_len) for a in self.arrays])
        if counts.sum() == 0:
            sizes = [len(a) for a in self.arrays]
            raise Gpt1Error(f"no window of {seq_len} + 1 tokens fits in shards of sizes {sizes}")
        self.starts = np.concatenate([[0], np.cumsum(counts)])
        self.windows_per_epoch = int(self.starts[-1])
        self._epoch: tuple[int, np.ndarray, int] | None = None

    def _order(self, epoch: int) -> tuple[np.ndarray, int]:
        if self._epoch is None or self._epoch[0] != epoch:
            rng = np.random.default_rng([self.seed, epoch])
            phase = int(rng.integers(self.seq_len))
            self._epoch = (epoch, rng.permutation(self.windows_per_epoch), phase)
        return self._epoch[1], self._epoch[2]

    def window(self, index: int) -> np.ndarray:
        """Tokens of the index-th sequence of the run (0-based, across epochs)."""
        epoch, pos = divmod(index, self.windows_per_epoch)
        order, phase = self._order(epoch)
        w = int(order[pos])
        shard = int(np.searchsorted(self.starts, w, side="right")) - 1
        start = phase + (w - int(self.starts[shard])) * self.seq_len
        return np.asarray(self.arrays[shard][start : start + self.seq_len + 1])

    def batch(self, first: int, count: int) -> torch.Tensor:
        """Sequences first .. first+count-1 as a (count, seq_len + 1) int64 tensor."""
        rows = [self.window(i).astype(np.int64) for i in range(first, first + count)]
        return torch.from_numpy(np.stack(rows))


def eval_windows(arrays: Sequence[np.ndarray], seq_len: int, count: int) -> torch.Tensor:
    """A fixed validation set: `count` windows evenly spaced over all shards (phase 0)."""
    counts = [max(0, (len(a) - 1) // seq_len) for a in arrays]
    total = sum(counts)
    if total == 0:
        sizes = [len(a) for a in arrays]
        raise Gpt1Error(f"no validation window of {seq_len} + 1 tokens in shards of sizes {sizes}")
    starts = np.concatenate([[0], np.cumsum(counts)])
    picks = np.unique(np.linspace(0, total - 1, min(count, total)).round().astype(np.int64))
    rows = []
    for w in picks:
        shard = int(np.searchsorted(starts, w, side="right")) - 1
        offset = int(w - starts[shard]) * seq_len
        rows.append(np.asarray(arrays[shard][offset : offset + seq_len + 1]).astype(np.int64))
    return torch.from_numpy(np.stack(rows))
