"""Pre-flight per arm: each Table 5 arm (full, no aux LM, from scratch, the LSTM), built from the
params exactly as its stage builds it, fits 64 training examples with random labels to >= 95 %
train accuracy within 200 updates of the one fine-tuning loop (length buckets on). A model
that cannot memorise 64 examples has a bug (a head reading a padding position, a loss on the
wrong tokens, an lr that never reaches the weights), and it shows here, in seconds, not after
a study run. The pre-trained arms start from a stand-in LM (random weights) through the same
transfer path (body_factory, special rows reset) as a real checkpoint. The arms' own lr grids
are the study's business: here every arm gets lr 1e-3 with 10 % warm-up."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from gpt1 import arms, networks
from gpt1.config import Params, override
from gpt1.finetune import body_factory, finetune_task, resolve_hparams
from gpt1.tasks.formats import Encoded
from gpt1.tasks.registry import TASKS

V = 64
N, BATCH, EPOCHS = 64, 16, 50  # 4 updates per epoch: 200 updates
ARMS = ("full", "no_aux", "scratch", "lstm")


def _memorise_set(seed: int = 0) -> Encoded:
    """N examples `_start_ tokens _classify_` of lengths 4..28, balanced random labels."""
    rng = np.random.default_rng(seed)
    start, classify = V - 3, V - 1
    seqs = [[[start, *rng.integers(1, V - 3, size=int(rng.integers(4, 29))).tolist(),
              classify]] for _ in range(N)]
    labels = rng.permutation(np.arange(N) % 2).astype(np.int64)
    return Encoded(seqs, labels, [f"ex{i}" for i in range(N)], [""] * N, [False] * N)


def _arm_params(params: Params, arm: str) -> tuple[Params, str]:
    """(finetune params, body kind) of one arm, as its stage derives them."""
    arm_params = params if arm == "full" else arms.ablation_params(params, arm)
    return arm_params, "transformer" if arm == "full" else params.ablations.presets[arm].body


def _fit(params: Params, arm: str, out: Path, epochs: int = EPOCHS) -> tuple[float, int]:
    """(train accuracy, updates) of one arm trained and scored on the memorisation set."""
    arm_params, kind = _arm_params(params, arm)
    # the plain torch kernels in fp32: the same math as the fused bf16 ones, faster at this size
    arm_params = override(arm_params, model={"backend": "torch"},
                                   pretrain={"precision": "fp32"})
    arm_params = override(arm_params, finetune={
        "lr": 1e-3, "warmup_frac": 0.1, "batch_size": BATCH, "epochs": epochs,
        "max_train_examples": None, "max_eval_examples": None, "select": "final",
        "bucket_pool_batches": 2, "seeds": [0]})
    ft = arm_params.finetune
    hp = resolve_hparams(arm_params, "sst2")
    torch.manual_seed(0)
    stand_in = networks.build_model(kind, arm_params, V) if ft.init == "pretrained" else None
    make_body = body_factory(ft.init, ft.layers_transferred, stand_in,
                             lambda: networks.build_model(kind, arm_params, V), n_special=3)
    data = _memorise_set()
    result = finetune_task(TASKS["sst2"], hp, {"train": data, "test": data}, make_body, out,
                           lambda step, values: None, device=torch.device("cpu"))
    return float(result["scores"]["acc"]["mean"]), int(result["seeds"][0]["steps"])


@pytest.mark.parametrize("arm", ARMS)
def test_each_arm_memorises_64_examples_in_200_updates(tiny_params, tmp_path, arm) -> None:
    acc, steps = _fit(tiny_params, arm, tmp_path / arm)
    assert steps <= 200
    assert acc >= 0.95, f"{arm}: train accuracy {acc:.3f} after {steps} updates"


def test_bucketed_fine_tuning_is_deterministic(tiny_params, tmp_path) -> None:
    """The same seed gives the same predictions with length buckets on (2 short runs)."""
    preds = []
    for run in ("a", "b"):
        _fit(tiny_params, "full", tmp_path / run, epochs=3)
        preds.append(pd.read_parquet(tmp_path / run / "predictions_seed0.parquet"))
    pd.testing.assert_frame_equal(preds[0], preds[1])
