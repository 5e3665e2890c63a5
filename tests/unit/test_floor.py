"""Table 5's bag-of-words floor: C by cross-validation on the training sample only, the same
per-seed training samples and prediction files as the neural arms, its Table 5 row with a CI
and flags, and the line saying which arms clear it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from gpt1 import arms, floor, records
from gpt1.arms import run as arm_run
from gpt1.errors import Gpt1Error
from gpt1.finetune import resolve_hparams, train_subset_seed
from gpt1.report import tables
from gpt1.stages import finetune as finetune_stages
from gpt1.tasks import load
from gpt1.tasks.registry import TASKS

GOOD = ["good", "great", "fine", "lovely", "superb", "warm"]
BAD = ["bad", "awful", "dull", "poor", "weak", "cold"]
FILLER = ["the", "film", "a", "plot", "story", "it", "was", "and", "cast", "music"]


def _sentiment_table(n: int, seed: int, prefix: str, misleading: float = 0.0) -> pd.DataFrame:
    """n rows of filler words plus two cue words of the row's label (a linear model learns
    them), in a `misleading` share of rows the other label's cue words."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 2, size=n)
    cue = labels ^ (rng.random(n) < misleading)
    text = [" ".join([*rng.choice(FILLER, size=6), *rng.choice(GOOD if c else BAD, size=2)])
            for c in cue]
    return pd.DataFrame({"id": [f"{prefix}{i}" for i in range(n)], "text_a": text,
                         "text_b": [""] * n, "choices": [[] for _ in range(n)],
                         "label": labels.astype(np.int64), "group": [""] * n,
                         "source": ["fixture"] * n})


def test_pair_texts_keep_the_second_text_apart() -> None:
    df = pd.DataFrame({"text_a": ["is it raining ?"], "text_b": ["it is raining ."]})
    assert floor.texts(df) == ["is it raining ? b_it b_is b_raining b_."]


def test_c_is_chosen_by_cross_validation_on_the_training_sample(tiny_params) -> None:
    train = _sentiment_table(120, 0, "tr")
    y = train["label"].to_numpy()
    c, cv = floor.choose_c(floor.texts(train), y, tiny_params.ablations.floor, seed=0)
    assert set(cv) == {f"{g:g}" for g in tiny_params.ablations.floor.c_grid}
    assert cv[f"{c:g}"] == max(cv.values())
    assert max(cv.values()) > 0.9  # the cue words are learnt


def _write_arm(params, task: str, variant: str, predict, seeds: list[int],
               pretrain_seed: int) -> None:
    """A neural arm's record + prediction files (as gpt1.arms.run.run_arm writes them)."""
    test = load.read_tables(Path(params.paths.tasks) / task)["test"]
    out = Path(params.paths.finetuned) / f"p{pretrain_seed}" / variant / task
    out.mkdir(parents=True)
    files, accs = [], []
    for s in seeds:
        pred = predict(test["label"].to_numpy())
        path = out / f"predictions_seed{s}.parquet"
        pd.DataFrame({"id": test["id"], "group": test["group"], "label": test["label"],
                      "prediction": pred}).to_parquet(path, index=False)
        files.append(str(path))
        accs.append(float(np.mean(pred == test["label"].to_numpy())))
    rec = {"task": task, "variant": variant, "metric": "acc",
           "scores": {"acc": {"mean": float(np.mean(accs)), "sd": 0.0, "per_seed": accs}},
           "baselines": {"acc": {"chance": 0.5, "majority": 0.5}},
           "predictions": {"test": files}, "seeds": seeds, "pretrain_seed": pretrain_seed,
           "n_train": 80, "n_eval": len(test)}
    records.write_metrics(params, f"finetune_{variant}_{task}_p{pretrain_seed}", rec, ("scores",))


def test_floor_stage_row_and_which_arms_clear_it(make_params) -> None:
    params = make_params({"finetune": {"seeds": [0, 1, 2], "max_train_examples": 80,
                                       "max_eval_examples": 60},
                          "ablations": {"floor": {"c_grid": [1.0, 4.0], "cv_folds": 3}}})
    task = "sst2"
    pool, test = _sentiment_table(200, 1, "tr"), _sentiment_table(60, 2, "te", misleading=0.3)
    load.write_tables({"train": pool, "dev": _sentiment_table(10, 3, "dv"), "test": test},
                      Path(params.paths.tasks) / task)
    rec = finetune_stages.floor_stage(params, task)
    hp = resolve_hparams(params, task)
    held = arms.pilot_ids(params, task)  # the pilot split: no sample of any arm holds a row of it
    assert len(held) == params.ablations.pilot.dev_examples
    for f, path in zip(hp.seeds, rec["predictions"]["test"], strict=True):
        preds = pd.read_parquet(path)
        assert list(preds["id"]) == list(test["id"])  # the scored split, in its order
        used = pd.read_parquet(Path(path).with_name(f"train_ids_seed{f}.parquet"))["id"]
        expected = load.cap_table(load.without_ids(pool, held), hp.max_train_examples,
                                  train_subset_seed(hp.data_seed, f))
        assert list(used) == list(expected["id"])  # the neural arms' sample of seed f
    assert rec["variant"] == "bow" and "pretrain_seed" not in rec
    assert 0.55 < rec["scores"]["acc"]["mean"] < 0.9 and len(rec["chosen_c"]) == 3
    # a perfect arm clears the floor; an always-negative arm is flagged and falls below it (3
    # seeds: with 2, the t term of the seed error has 1 df and a 97.5 % quantile of 12.7)
    for pretrain_seed in (1234, 1235):
        _write_arm(params, task, "full", lambda y: y, hp.seeds, pretrain_seed)
        _write_arm(params, task, "scratch", np.zeros_like, hp.seeds, pretrain_seed)
    table = tables.render_ablations(params, records.read_metrics(params.paths.metrics))
    row = [line for line in table.splitlines() if line.startswith("| Bag-of-words")]
    assert len(row) == 1 and "| ours |" in row[0]
    ci_line = table.splitlines()[table.splitlines().index(row[0]) + 1]
    assert ci_line.startswith("| | 95 % CI |") and "[" in ci_line
    verdict = [line for line in table.splitlines() if line.startswith("Against the bag")]
    assert len(verdict) == 1
    assert "SST2: clear it: Transformer w/ aux LM (full)" in verdict[0]
    assert "are below it: Transformer w/o pre-training" in verdict[0]


def test_floor_refuses_a_task_outside_ablations_and_skips_a_regression_task(make_params) -> None:
    params = make_params({"ablations": {"tasks": ["sst2", "stsb"]}})
    with pytest.raises(Gpt1Error, match="not in ablations.tasks"):
        arm_run.floor_record(params, "rte")
    rec = finetune_stages.floor_stage(params, "stsb")  # recorded as not run: outputs exist
    assert "regression" in rec["not_run"] and "scores" not in rec
    assert (Path(params.paths.finetuned) / "bow" / "stsb" / "not_run.json").is_file()
    assert "finetune_bow_stsb" in records.read_metrics(params.paths.metrics)
    with pytest.raises(Gpt1Error, match="regression"):
        floor.fit_and_score(TASKS["stsb"], params.ablations.floor, {}, pd.DataFrame(),
                            Path("unused"))


def test_a_tiny_sample_still_gets_a_floor(tiny_params) -> None:
    """A class of one example: no CV (the strongest regulariser); one class: that class."""
    cfg = tiny_params.ablations.floor
    c, cv = floor.choose_c(["good", "bad", "bad"], np.array([1, 0, 0]), cfg, seed=0)
    assert (c, cv) == (min(cfg.c_grid), {})
    assert floor.predict(["dull", "bad"], np.array([0, 0]), ["good"], cfg, c, 0).tolist() == [0]


@pytest.mark.parametrize(("min_df", "needle"), [
    (100, "ablations.floor.min_df: 100 exceeds the 32 texts of the floor's 5-fold "
          "cross-validation"),
    (30, "ablations.floor.min_df: 30 leaves no n-gram of the 32 texts of the floor's 5-fold "
         "cross-validation (none is in that many)"),
])
def test_a_min_df_no_n_gram_reaches_names_the_key(tiny_params, min_df: int,
                                                  needle: str) -> None:
    """More than the training texts, or more than any n-gram is in: one line naming the key,
    not scikit-learn's ValueError."""
    cfg = tiny_params.ablations.floor.model_copy(update={"min_df": min_df, "cv_folds": 5})
    train = _sentiment_table(40, 0, "tr")
    with pytest.raises(Gpt1Error, match=needle.replace("(", r"\(").replace(")", r"\)")):
        floor.choose_c(floor.texts(train), train["label"].to_numpy(), cfg, seed=0)
