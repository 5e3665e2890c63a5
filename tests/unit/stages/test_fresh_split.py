"""The fresh split (tasks.fresh_examples): carved from the training pool before anything is drawn
from it, so no training sample, pilot split or curve sample of any arm ever holds one of its
rows (checked over the real drawing functions of gpt1/arms/ on a pool built in code), and
scored by every fine-tuning arm beside the test split (a tiny run of the real stages)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from gpt1 import arms
from gpt1.config import Params, load_params, override, parse_params
from gpt1.errors import Gpt1Error
from gpt1.finetune import resolve_hparams
from gpt1.records import read_metrics
from gpt1.stages import data as data_stages
from gpt1.stages import finetune as finetune_stages
from gpt1.stages import lr_pilot as lr_pilot_stages
from gpt1.tasks import load
from gpt1.tasks.mirror_formats import row
from gpt1.tasks.registry import FRESH, TASKS
from tests.helpers.params import make_params_dict
from tests.helpers.runs import stand_in_lms
from tests.helpers.task_mirror import write_mirror

ARMS = ("full", "scratch", "no_aux", "lstm")


def _qnli_pool(n_rows: int) -> pd.DataFrame:
    """A QNLI-like training pool: each question asked of two sentences."""
    return load.to_table([row(f"tr{i}", f"question {i // 2}?", f"sentence {i}.", i % 2,
                              f"train.json:{i}") for i in range(n_rows)], TASKS["qnli"])


@pytest.fixture
def study(make_params) -> Params:
    """Every arm piloted on QNLI, five fine-tuning seeds, two curve sizes and the fresh split."""
    return make_params({
        "finetune": {"seeds": [0, 1, 2, 3, 4], "max_train_examples": 60},
        "tasks": {"fresh_examples": {"qnli": 100}},
        "ablations": {"tasks": ["qnli"], "variants": ["scratch", "no_aux", "lstm"],
                      "pilot": {"variants": list(ARMS), "dev_examples": 40, "seed": 0}},
        "curves": {"tasks": ["qnli"], "ns": [20, 40], "compute_n": 40},
        "layers": {"tasks": ["qnli"], "max_train_examples": 50},
        "report": {"confirmatory_tasks": ["qnli"]}})


def _draws(params: Params, pool: pd.DataFrame) -> tuple[set[str], set[str]]:
    """(every row any arm trains on from `pool`, every row a pilot scores), drawn as the stages
    draw them: each arm's training samples (Table 5, finetune, the floor), Figure 2 left's and
    each curve point's outside the pilot split (arms.pilot_rows / outside_pilot: gpt1.arm_run
    `held_out`), and every arm's pilot sample and split (arms.pilot_split)."""
    trained: set[str] = set()
    pilot: set[str] = set()
    held = arms.pilot_rows(params, "qnli")[0]
    runs = [arms.ablation_params(params, arm) for arm in ARMS]
    runs.append(arms.layers_caps(params, "qnli"))
    for run in runs:
        hp = resolve_hparams(run, "qnli")
        for sample in arms.training_samples(load.without_ids(pool, held), hp).values():
            trained |= set(sample["id"])
    for arm in ARMS:
        train, split, _ = arms.pilot_split(params, arm, "qnli", pool)
        trained |= set(train["id"])
        pilot |= set(split["id"])
    for n in (*params.curves.ns, params.curves.compute_n):
        outside = arms.outside_pilot(params, "qnli", n, "curves.ns")
        hp = resolve_hparams(arms.with_caps(params, "qnli", n, None), "qnli")
        for sample in arms.training_samples(load.without_ids(pool, outside), hp).values():
            trained |= set(sample["id"])
    return trained, pilot


def _drawn(params: Params, pool: pd.DataFrame) -> set[str]:
    """Every row any arm draws from `pool` (`_draws`: trained on or scored by a pilot)."""
    trained, pilot = _draws(params, pool)
    return trained | pilot


def test_no_arm_draws_a_row_of_the_fresh_split(study) -> None:
    pool = _qnli_pool(400)
    tables = load.carve_fresh({"train": pool, "dev": pool[:4], "test": pool[:4]},
                              study.tasks.fresh_examples["qnli"], study.tasks.carve_seed)
    folder = Path(study.paths.tasks) / "qnli"
    load.write_tables(tables, folder, {FRESH: {"source": "carved (test)"}})
    train = load.read_tables(folder)["train"]
    fresh = load.read_fresh(folder)
    assert fresh is not None and fresh[1] == "carved (test)"
    fresh_ids = set(fresh[0]["id"])
    assert 100 <= len(fresh_ids) <= 101  # whole questions: about the declared size
    assert fresh_ids | set(train["id"]) == set(pool["id"]) and not fresh_ids & set(train["id"])
    assert not set(fresh[0]["text_a"]) & set(train["text_a"])  # no question on both sides
    trained, pilot = _draws(study, train)
    assert len(trained | pilot) > 250 and not (trained | pilot) & fresh_ids  # none of the split
    assert len(pilot) == study.ablations.pilot.dev_examples and not pilot & trained
    assert _drawn(study, pool) & fresh_ids  # uncarved, the same draws take fresh rows


def test_the_pilot_split_is_carved_first_so_twelve_seeds_fit_the_study_pool(study) -> None:
    """The study's sizes on a pool of the mirror's: 8,999 QNLI pairs, 3,000 carved fresh outside
    the scored ids, a 2,000-pair pilot split, 12 fine-tuning seeds of 1,000 pairs each. The
    split is carved before any sample is drawn, so all twelve fit; drawn outside the samples
    (the order before), they leave no room for it."""
    pool = _qnli_pool(8999)
    scored = set(pool["id"][::7])
    tables = load.carve_fresh({"train": pool, "dev": pool[:4], "test": pool[:4]}, 3000, 0,
                              scored)
    seeds = list(range(12))
    params = override(study, finetune={"seeds": seeds, "max_train_examples": 1000},
                    ablations={**study.as_dict()["ablations"],
                               "pilot": {**study.as_dict()["ablations"]["pilot"],
                                         "dev_examples": 2000}},
                    curves={"ns": [250, 1000], "compute_n": 1000},
                    layers={**study.as_dict()["layers"], "max_train_examples": 1000})
    load.write_tables(tables, Path(params.paths.tasks) / "qnli")
    train = tables["train"]
    assert len(train) + len(tables[FRESH]) == 8999 and 5998 <= len(train) <= 5999
    assert not set(tables[FRESH]["id"]) & scored
    trained, pilot = _draws(params, train)
    assert len(pilot) == 2000 and not pilot & trained and not trained & set(tables[FRESH]["id"])
    hp = resolve_hparams(params, "qnli")
    samples = arms.training_samples(load.without_ids(train, pilot), hp)
    assert sorted(samples) == seeds and all(len(t) == 1000 for t in samples.values())
    before = arms.training_samples(train, hp)  # the order before: samples of the whole pool
    taken = set().union(*(set(t["id"]) for t in before.values()))
    assert len(train) - len(taken) < 2000  # leave no room for the split outside them


def test_the_fresh_split_leaves_out_every_scored_row_and_its_question(tmp_path: Path) -> None:
    pool = _qnli_pool(400)
    listed = tmp_path / "qnli.txt"
    listed.write_text("# made by a test\n\n" + "\n".join(pool["id"][::5]) + "  # a comment\n")
    scored = load.read_scored_ids(listed)
    assert scored == set(pool["id"][::5])
    before = load.carve_fresh({"train": pool}, 100, 0)[FRESH]
    assert set(before["id"]) & scored  # without the list, the same carve takes scored rows
    after = load.carve_fresh({"train": pool}, 100, 0, scored)
    asked = set(pool.loc[pool["id"].isin(scored), "text_a"])
    assert 100 <= len(after[FRESH]) <= 101 and not set(after[FRESH]["id"]) & scored
    assert not set(after[FRESH]["text_a"]) & asked  # no question a scored row asked
    assert set(after["train"]["id"]) == set(pool["id"]) - set(after[FRESH]["id"])
    assert load.carve_fresh({"train": pool}, 100, 0, ())[FRESH].equals(before)
    with pytest.raises(Gpt1Error, match=r"not below half of the 200-row .* \(200 rows sharing"):
        load.carve_fresh({"train": pool}, 100, 0, set(pool["id"][::4]))
    with pytest.raises(Gpt1Error, match=r"missing.txt: cannot read the scored ids \(tasks"):
        load.read_scored_ids(tmp_path / "missing.txt")


def test_the_committed_scored_ids_are_the_earlier_studies_pilot_splits() -> None:
    """configs/scored/qnli.txt (its header says how it was recomputed): study v3's 2,000-row and
    study v2's 500-row QNLI pilot splits, 103 rows in both; the study preset reads it."""
    from tests.helpers.repo import REPO

    study = load_params(REPO / "configs" / "cpu-study.yaml")
    path = REPO / study.tasks.scored_ids["qnli"]
    text = path.read_text(encoding="utf-8")
    sections = text.split("# study v2 (180520d): 500 rows\n")
    v3 = load.read_scored_ids(path) - set(sections[1].split())
    assert len(sections) == 2 and len(set(sections[1].split())) == 500
    assert len(load.read_scored_ids(path)) == 2397 and len(v3) == 2397 - 500
    assert all(i.startswith("tr-") for i in load.read_scored_ids(path))
    for preset in ("params.yaml", "configs/paper.yaml", "configs/paper-finetune.yaml"):
        assert load_params(REPO / preset).tasks.scored_ids == {}


def test_the_fresh_split_is_deterministic_and_sized(study) -> None:
    pool = _qnli_pool(400)
    first = load.carve_fresh({"train": pool}, 100, 0)
    assert first[FRESH]["id"].tolist() == load.carve_fresh({"train": pool}, 100, 0)[FRESH][
        "id"].tolist()
    assert first[FRESH]["id"].tolist() != load.carve_fresh({"train": pool}, 100, 1)[FRESH][
        "id"].tolist()
    assert load.carve_fresh({"train": pool}, None, 0) == {"train": pool}  # off: unchanged
    with pytest.raises(Gpt1Error, match="tasks.fresh_examples: 200 is not below half"):
        load.carve_fresh({"train": pool}, 200, 0)


def test_an_unknown_or_bad_fresh_key_is_refused(make_params) -> None:
    with pytest.raises(ValueError, match="tasks.fresh_examples: 'bogus' is not in finetune.tasks"):
        make_params({"tasks": {"fresh_examples": {"bogus": 100}}})
    with pytest.raises(ValueError, match="tasks.fresh_examples"):
        make_params({"tasks": {"fresh_examples": {"qnli": 0}}})
    with pytest.raises(ValueError, match="tasks.scored_ids: 'sst2' has no tasks.fresh_examples"):
        make_params({"tasks": {"scored_ids": {"sst2": "configs/scored/qnli.txt"}}})
    with pytest.raises(ValueError, match="report.max_seeds"):
        make_params({"report": {"max_seeds": 1}})


# ---------------------------------------------------------------- the stages, tiny


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory: pytest.TempPathFactory):
    """prepare_task carves SST-2's fresh split outside a list of scored ids; the pilots,
    finetune, one Table 5 row and the floor run on it."""
    root = tmp_path_factory.mktemp("fresh")
    write_mirror(root / "mirror", rows=60)
    params = parse_params(make_params_dict(root, {
        "finetune": {"epochs": 1, "seeds": [0, 1], "max_train_examples": 12,
                     "max_eval_examples": 10},
        "ablations": {"tasks": ["sst2"], "variants": ["scratch"],
                      "pilot": {"variants": ["full", "scratch"], "lr_grid": [1e-4, 1e-3],
                                "warmup_grid": [0.002], "dev_examples": 8, "seed": 0}},
        "tasks": {"dev_examples": {"story_cloze": 6}, "fresh_examples": {"sst2": 10},
                  "scored_ids": {"sst2": str(root / "scored.txt")}},
        "bpe": {"n_merges": 20}}), "tiny")
    whole = load.load_task(TASKS["sst2"], params.tasks, params.paths.mirror_dir)["train"]
    (root / "scored.txt").write_text("\n".join(whole["id"][::4]) + "\n")  # an earlier run's
    prepared = data_stages.prepare_task(params, "sst2")
    train = load.read_tables(Path(params.paths.tasks) / "sst2")["train"]
    stand_in_lms(params, train["text_a"].tolist())  # pre-trained LMs of pre-training seed 1234
    lr_pilot_stages.lr_pilot_full(params, "sst2")
    lr_pilot_stages.lr_pilot(params, "sst2", "scratch")
    finetune_stages.finetune(params, "sst2")
    finetune_stages.ablation(params, "sst2", "scratch")
    finetune_stages.floor_stage(params, "sst2")
    return params, prepared, read_metrics(params.paths.metrics)


def test_prepare_task_writes_and_gates_the_fresh_split(tiny_run) -> None:
    params, prepared, _ = tiny_run
    folder = Path(params.paths.tasks) / "sst2"
    fresh = load.read_fresh(folder)
    assert fresh is not None and prepared["rows"][FRESH] == len(fresh[0]) >= 10
    assert prepared["rows"]["train"] + len(fresh[0]) == 54  # 60 less the carved dev of 6
    assert ("rows carved (seed 0, whole text_a groups, outside the 14 rows earlier runs scored "
            "(tasks.scored_ids)") in prepared["splits"][FRESH]
    scored = load.read_scored_ids(params.tasks.scored_ids["sst2"])
    assert len(scored) == 14 and not scored & set(fresh[0]["id"])
    assert fresh[1] == prepared["splits"][FRESH]
    checks = json.loads((folder / "checks.json").read_text())
    assert checks[FRESH]["success"] and checks[FRESH]["n_rows"] == len(fresh[0])


def test_every_arm_scores_the_fresh_split_and_trains_outside_it(tiny_run) -> None:
    params, _, metrics = tiny_run
    fresh = load.read_fresh(Path(params.paths.tasks) / "sst2")
    assert fresh is not None
    fresh_ids = fresh[0]["id"].tolist()
    for stem in ("finetune_sst2_p1234", "finetune_scratch_sst2_p1234", "finetune_bow_sst2"):
        record = metrics[stem]
        assert set(record["fresh_scores"]) == {"acc"}
        assert len(record["fresh_scores"]["acc"]["per_seed"]) == 2
        assert record["fresh"]["n_eval"] == len(fresh_ids)
        assert record["fresh"]["scored_on"].startswith(fresh[1])
        for path, acc in zip(record["predictions"][FRESH],
                             record["fresh_scores"]["acc"]["per_seed"], strict=True):
            pred = pd.read_parquet(path)
            assert pred["id"].tolist() == fresh_ids
            assert acc == pytest.approx(float(np.mean(pred["label"] == pred["prediction"])))
        for path in record["train_ids"]:
            assert not set(pd.read_parquet(path)["id"]) & set(fresh_ids)
    pilot = Path(params.paths.finetuned) / "lr_pilot" / "full_sst2" / "tables" / "sst2"
    assert load.read_fresh(pilot) is None  # the pilot scores its carved split only
    split = load.read_tables(pilot)["test"]
    assert not set(split["id"]) & set(fresh_ids)
    assert "fresh_scores" not in metrics["lr_pilot_full_sst2"]
