"""Counters patched into torch and the training loops: host reads of a tensor, updates done."""

from __future__ import annotations

import torch


def patch_host_reads(record, names=("item", "tolist"), setter=setattr) -> None:
    """Call record() at every host read of a tensor (`names`, methods of torch.Tensor), patched
    in with `setter` (setattr: for the rest of this process; pytest's monkeypatch.setattr: for
    one test)."""
    for name in names:
        read = getattr(torch.Tensor, name)

        def counted_read(self, *args, _read=read, **kwargs):
            record()
            return _read(self, *args, **kwargs)

        setter(torch.Tensor, name, counted_read)


def count_updates(loop, setter=setattr) -> list[int]:
    """[updates done so far] of a loop module whose train_step is patched to count them."""
    done = [0]
    step = loop.train_step

    def counted_step(*args, **kwargs):
        out = step(*args, **kwargs)
        done[0] += 1
        return out

    setter(loop, "train_step", counted_step)
    return done
