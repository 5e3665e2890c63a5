"""The pilot's orchestration without training (the fine-tuning loop replaced by a scorer of
each configuration): every arm runs the one lr x warm-up grid, the rule picks the best
configuration, the recipe is its own row, and the confirmatory params carry the choice. The
tiny real runs (tests/unit/test_selection.py) check the same on trained models."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from gpt1 import arms
from gpt1.arms import pilot
from gpt1.config import Params, load_params, override
from gpt1.errors import Gpt1Error
from gpt1.finetune import resolve_hparams, train_subset_seed
from gpt1.report.pilots import CLEARS, FAILS, gate
from gpt1.stages import lr_pilot as lr_pilot_stages
from gpt1.tasks import load
from gpt1.tasks.registry import TASKS
from tests.helpers.repo import REPO

ARMS = ("full", "scratch", "no_aux", "lstm")
LRS, WARMUPS = (1e-4, 5e-4, 1e-3), (0.0, 0.1)
BEST = (5e-4, 0.1)  # the fake scorer's best non-constant configuration


def _pool(n: int) -> pd.DataFrame:
    labels = np.arange(n) % 3 == 0  # one third positive: the training part's majority is 0
    return pd.DataFrame({"id": [f"r{i}" for i in range(n)], "text_a": ["a b"] * n,
                         "text_b": [""] * n, "choices": [[] for _ in range(n)],
                         "label": labels.astype(int), "group": [""] * n,
                         "source": [f"train:{i}" for i in range(n)]})


@pytest.fixture
def pilot_params(make_params, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    params = make_params({
        "finetune": {"seeds": [0, 1], "max_train_examples": 20},
        "ablations": {"tasks": ["sst2"], "variants": ["scratch", "no_aux", "lstm"],
                      "pilot": {"variants": list(ARMS), "lr_grid": list(LRS),
                                "warmup_grid": list(WARMUPS), "dev_examples": 30, "seed": 0}}})
    pool = _pool(100)
    load.write_tables({"train": pool, "dev": pool[:5], "test": pool[:5]},
                      Path(params.paths.tasks) / "sst2")
    calls: list[tuple[str, str, float, float, float]] = []

    def fake_finetune(run: Params, task: str, variant: str, kind: str, pretrain_seed: int,
                      out: str, stem: str, held_out: Any, context: Any) -> dict[str, Any]:
        assert held_out == ()  # a pilot's own tables hold no pilot split
        hp = resolve_hparams(run, task)
        dev = load.read_tables(Path(run.paths.tasks) / task)["test"]
        calls.append((variant, kind, hp.lr, hp.warmup_frac, run.finetune.lm_coef))
        # 1e-3 answers one class (the best raw accuracy: excluded by the rule); else the
        # accuracy rises with warm-up and peaks at lr 5e-4
        constant = hp.lr == 1e-3
        pred = np.zeros(len(dev), int) if constant else dev["label"].to_numpy().copy()
        wrong = 0 if constant else {1e-4: 8, 5e-4: 4}.get(hp.lr, 12) - int(10 * hp.warmup_frac)
        pred[:wrong] = 1 - pred[:wrong]
        path = Path(run.paths.finetuned) / out / "pred.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        pd.DataFrame({"id": dev["id"], "prediction": pred}).to_parquet(path)
        acc = 1.0 if constant else float((pred == dev["label"].to_numpy()).mean())
        return {"predictions": {"test": [str(path)]}, "scores": {"acc": {"mean": acc}},
                "log_loss": [1.0 - hp.warmup_frac]}

    monkeypatch.setattr(pilot, "run_arm", fake_finetune)
    return params, pool, calls


def test_every_arm_is_piloted_over_the_same_grid_and_its_runs_use_the_choice(
        pilot_params) -> None:
    params, pool, calls = pilot_params
    grid = {(lr, w) for lr in LRS for w in WARMUPS}
    for arm in ARMS:
        calls.clear()
        out = lr_pilot_stages.lr_pilot(params, "sst2", arm)
        tried = {(lr, w) for _, _, lr, w, _ in calls}
        paper = (params.finetune.lr, params.finetune.warmup_frac)
        assert tried == grid | {paper} and len(calls) == len(grid) + 1  # + the recipe row
        assert {c[1] for c in calls} == {"lstm" if arm == "lstm" else "transformer"}
        lam = params.ablations.presets[arm].lm_coef if arm in params.ablations.presets else None
        assert {c[4] for c in calls} == {params.finetune.lm_coef if lam is None else lam}
        assert len(out["dev_scores"]) == len(grid)
        assert (out["chosen_lr"], out["chosen_warmup"]) == BEST  # 1e-3 is one class
        assert out["paper_recipe"]["lr"] == paper[0] and not out["paper_recipe"]["in_grid"]
        assert out["chosen_score"] == out["dev_scores"]["lr 0.0005, warm-up 0.1"]
        assert out["chosen_accuracy"] == pytest.approx(1 - 3 / 30)  # its 3 wrong of 30, by id
        assert (out["lr_at_edge"], out["warmup_at_edge"]) == (False, True)  # 0.1 = max warm-up
        assert arms.pilot_choice(params, arm, "sst2") == BEST  # read back from its choice file
        choice = json.loads(arms.choice_path(params, arm, "sst2").read_text())
        assert choice["scores"] == out["dev_scores"] and choice["lr_grid"] == list(LRS)
        assert (choice["lr_at_edge"], choice["warmup_at_edge"]) == (False, True)
        confirmatory = resolve_hparams(arms.ablation_params(params, arm, *BEST), "sst2")
        assert (confirmatory.lr, confirmatory.warmup_frac) == BEST


def test_figure_2_left_and_the_compute_curve_run_the_full_rows_choice(
        pilot_params, monkeypatch: pytest.MonkeyPatch) -> None:
    """transfer_layers and curve_step fine-tune at the (lr, warm-up) the full row's pilot
    chose, as finetune does (not at the recipe's lr)."""
    from gpt1.stages import curves as curve_stages
    from gpt1.stages import finetune as finetune_stages

    params, _, _ = pilot_params
    lr_pilot_stages.lr_pilot(params, "sst2", "full")
    seen: list[tuple[float, float]] = []

    def record_hparams(run: Params, task: str, *args: Any, **kwargs: Any) -> dict[str, Any]:
        hp = resolve_hparams(run, task)
        seen.append((hp.lr, hp.warmup_frac))
        return {}

    monkeypatch.setattr(finetune_stages, "run_arm", record_hparams)
    monkeypatch.setattr(curve_stages, "run_arm", record_hparams)
    monkeypatch.setattr(curve_stages, "kept_steps", lambda params, pretrain_seed: [0, 5])
    layers = params.as_dict()["layers"]
    run = override(params, layers={**layers, "tasks": ["sst2"]},
                            curves={"tasks": ["sst2"], "checkpoints": [0, 1], "compute_n": 20})
    finetune_stages.transfer_layers(run, "sst2", 1)
    curve_stages.curve_step(run, "sst2", 1)
    assert seen == [BEST, BEST]


def test_the_pilot_split_is_outside_every_fine_tuning_sample(pilot_params) -> None:
    params, pool, _ = pilot_params
    train, dev, words = arms.pilot_split(params, "scratch", "sst2", pool)
    hp = resolve_hparams(params, "sst2")
    rest = load.without_ids(pool, set(dev["id"]))  # carved first: the samples come from the rest
    samples = [set(load.cap_table(rest, 20, train_subset_seed(hp.data_seed, f))["id"])
               for f in (0, 1)]
    assert len(dev) == 30 and not set(dev["id"]) & (samples[0] | samples[1])
    assert arms.pilot_carve(params, "sst2", pool)[1]["id"].tolist() == dev["id"].tolist()
    assert set(train["id"]) == samples[0]  # the pilot trains on seed 0's sample
    for arm in ARMS:  # every arm is chosen on the same split, trained on the same sample
        other = arms.pilot_split(params, arm, "sst2", pool)
        assert other[0]["id"].tolist() == train["id"].tolist()
        assert other[1]["id"].tolist() == dev["id"].tolist()
    top = train["label"].value_counts().idxmax()
    assert pilot.majority_share(TASKS["sst2"], train, dev) == pytest.approx(
        float((dev["label"] == top).mean()))
    record = lr_pilot_stages.lr_pilot(params, "sst2", "full")
    assert record["dev_majority"] == pytest.approx(float((dev["label"] == top).mean()))
    assert "before any fine-tuning sample is drawn" in words
    decided = gate(params, {"lr_pilot_full_sst2": record}, "full", "sst2")  # the gate's inputs
    assert decided.status in (CLEARS, FAILS), decided.text


def test_a_pool_too_small_for_the_split_is_refused(make_params) -> None:
    params = make_params({"finetune": {"seeds": [0, 1], "max_train_examples": 60},
                          "ablations": {"tasks": ["sst2"],
                                        "pilot": {"dev_examples": 30}}})
    with pytest.raises(Gpt1Error, match="pool of 59 is too small to carve ablations.pilot"):
        arms.pilot_split(params, "scratch", "sst2", _pool(59))
    assert len(arms.pilot_split(params, "scratch", "sst2", _pool(60))[1]) == 30


def test_the_grid_and_its_arms_are_validated(make_params) -> None:
    with pytest.raises(Exception, match="warmup_grid"):
        make_params({"ablations": {"pilot": {"warmup_grid": []}}})
    with pytest.raises(Exception, match="not in ablations.variants or full"):
        make_params({"ablations": {"variants": ["scratch"],
                                   "pilot": {"variants": ["full", "lstm"]}}})
    demo, study = (load_params(REPO / p) for p in ("params.yaml", "configs/cpu-study.yaml"))
    for params in (demo, study):  # every arm piloted over one grid
        assert set(params.ablations.pilot.variants) == {"full", *params.ablations.variants}
    assert len(study.ablations.pilot.warmup_grid) >= 2
    # the demo's grid is the study's, cut to its budget
    assert set(demo.ablations.pilot.lr_grid) <= set(study.ablations.pilot.lr_grid)
    assert set(demo.ablations.pilot.warmup_grid) <= set(study.ablations.pilot.warmup_grid)
