"""layers_transferred = k copies exactly the embeddings and the first k blocks, nothing
else (Figure 2 left, spec §3 and 5), through transfer_weights and the fine-tune body."""

from __future__ import annotations

import pytest
import torch

from gpt1.finetune import body_factory
from gpt1.model import GPT, transfer_weights

VOCAB = 40
EMBEDDINGS = {"tokens_embed.weight", "positions_embed.weight"}


def _expected(name: str, k: int, n_layer: int) -> bool:
    """Should `name` come from the pre-trained model when k blocks are transferred?"""
    if name in EMBEDDINGS:
        return True
    if name.startswith("h."):
        return int(name.split(".")[1]) < k
    return name.startswith("ln_f.") and k == n_layer  # gpt2 arch: final LN with all blocks


def _model(params, seed: int) -> GPT:
    torch.manual_seed(seed)
    return GPT(params.model, VOCAB)


@pytest.mark.parametrize("arch", ["gpt1", "gpt2"])
def test_transfer_copies_embeddings_and_first_k_blocks_only(make_params, arch: str) -> None:
    params = make_params({"model": {"n_layer": 3, "arch": arch}})
    src = _model(params, 1).state_dict()
    for k in (0, 1, 2, 3, None):
        dst = _model(params, 2)
        before = {n: t.clone() for n, t in dst.state_dict().items()}
        copied = transfer_weights(src, dst, k)
        kk = 3 if k is None else k
        after = dst.state_dict()
        for name, value in after.items():
            want_src = _expected(name, kk, 3)
            assert (name in copied) == want_src, (k, name)
            assert torch.equal(value, src[name] if want_src else before[name]), (k, name)
        # the randomly initialised source and target really differ everywhere they can
        # (the test can see a copy: source and target matrices differ before the transfer)
        assert all(not torch.equal(src[n], before[n]) for n in before if before[n].ndim > 1)


def test_transfer_rejects_k_beyond_the_model(tiny_params) -> None:
    src = _model(tiny_params, 1).state_dict()
    with pytest.raises(ValueError, match="outside"):
        transfer_weights(src, _model(tiny_params, 2), tiny_params.model.n_layer + 1)


def test_finetune_body_has_pretrained_first_k_blocks_and_fresh_rest(make_params) -> None:
    params = make_params({"model": {"n_layer": 3}})
    pretrained = _model(params, 7)
    make = body_factory("pretrained", 1, pretrained, lambda: GPT(params.model, VOCAB),
                        n_special=0)  # every embedding row transferred
    body, again = make(0), make(0)
    fresh = make(1)
    src = pretrained.state_dict()
    for name, value in body.state_dict().items():
        if _expected(name, 1, 3):
            assert torch.equal(value, src[name]), name
        elif name.endswith("attn.c_attn.weight") or name.endswith("mlp.c_fc.weight"):
            assert not torch.equal(value, src[name]), name  # re-initialised, not copied
            assert torch.equal(value, again.state_dict()[name]), name  # seeded
            assert not torch.equal(value, fresh.state_dict()[name]), name  # per seed
