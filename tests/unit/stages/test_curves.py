"""Where pre-training can show, end to end in-process on the tiny preset: the labelled-data
curve (each arm at each n, the floor at the same n) and the pre-training-compute curve
(fine-tuned from each kept checkpoint) run as their stages, and the report's curves, bands
and slope test are computed from the records they wrote."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from gpt1 import arms, bpe, checkpoint, names, networks
from gpt1.config import override, parse_params
from gpt1.data.clean import standardize_texts
from gpt1.errors import Gpt1Error
from gpt1.records import read_metrics
from gpt1.report import curves as report_curves
from gpt1.stages import curves
from gpt1.stages import data as data_stages
from gpt1.stages import lr_pilot as lr_pilot_stages

pytestmark = pytest.mark.usefixtures("one_thread")

STEPS = (0, 3, 12)
"""The kept zero-shot checkpoints of the stand-in pre-training run."""


@pytest.fixture(scope="module")
def curve_run(tmp_path_factory: pytest.TempPathFactory):
    import torch

    from tests.helpers.params import make_params_dict
    from tests.helpers.task_mirror import write_mirror

    threads = torch.get_num_threads()  # module-scoped: set before `one_thread` applies
    torch.set_num_threads(1)
    tmp_path = tmp_path_factory.mktemp("curves")
    write_mirror(tmp_path / "mirror", rows=40)
    params = parse_params(make_params_dict(tmp_path, {
        "device": "cpu",
        "finetune": {"seeds": [0, 1], "max_eval_examples": None},
        "ablations": {"tasks": ["sst2"], "pilot": {"variants": ["scratch"],
                                                   "lr_grid": [1e-4, 1e-3], "dev_examples": 8},
                      "floor": {"c_grid": [1.0], "cv_folds": 2}},  # the floor's CV: seconds
        "curves": {"tasks": ["sst2"], "ns": [8, 20], "arms": ["full", "scratch"],
                   "compute_n": 12, "checkpoints": [0, 1, 2]},
        "pretrain": {"warmup_steps": 3},  # the slope is fitted from step 3 on (STEPS)
        "bpe": {"n_merges": 20}}), "tiny")
    data_stages.prepare_task(params, "sst2")
    train = pd.read_parquet(Path(params.paths.tasks) / "sst2" / "train.parquet")
    tok = bpe.train_bpe(standardize_texts([" ".join(train["text_a"])] * 3), params.bpe,
                        params.paths.tokenizer)
    run_dir = checkpoint.pretrain_dir(params, names.TRANSFORMER)
    model = networks.build_model(names.TRANSFORMER, params, tok.vocab_size)
    for step in STEPS:  # stand-ins for the kept zero-shot checkpoints of seed 1234
        checkpoint.save_weights(checkpoint.zeroshot_path(run_dir, step), model)
    checkpoint.write_model(run_dir, model, {"kind": names.TRANSFORMER, "vocab_size": tok.vocab_size,
                                            "tokenizer_hash": tok.hash,
                                            "params": params.as_dict(), "step": STEPS[-1]})
    lr_pilot_stages.lr_pilot(params, "sst2", "scratch")
    for n in params.curves.ns:
        for arm in params.curves.arms:
            curves.curve_n(params, "sst2", n, arm)
        curves.curve_floor(params, "sst2", n)
    for k in params.curves.checkpoints:
        curves.curve_step(params, "sst2", k)
    torch.set_num_threads(threads)
    return params, read_metrics(params.paths.metrics)


def test_each_point_trains_on_its_n_and_records_where_it_started(curve_run) -> None:
    params, metrics = curve_run
    for n in params.curves.ns:
        full, scratch = (metrics[f"curve_n_sst2_{n}_{a}_p1234"] for a in ("full", "scratch"))
        floor = metrics[f"curve_floor_sst2_{n}"]
        assert full["n_train"] == scratch["n_train"] == floor["n_train"] == n
        assert (full["init"], scratch["init"], floor["body"]) == ("pretrained", "scratch", "bow")
        assert scratch["lr"] == metrics["lr_pilot_scratch_sst2"]["chosen_lr"]  # its pilot's lr
        for seed in params.finetune.seeds:  # the arms and the floor share each seed's sample
            ids = {m["train_ids"][seed] for m in (full, scratch, floor)}
            assert len({tuple(pd.read_parquet(p)["id"]) for p in ids}) == 1
    steps = [metrics[f"curve_step_sst2_{k}_p1234"]["pretrain_step"] for k in range(3)]
    assert steps == list(STEPS)
    assert all(metrics[f"curve_step_sst2_{k}_p1234"]["n_train"] == 12 for k in range(3))
    # no task model for `gpt1 predict` is kept by a curve point
    assert not list(Path(params.paths.finetuned).rglob("curve_*/**/model"))


def test_no_curve_point_trains_on_the_rows_the_pilot_scored(curve_run) -> None:
    """The pilot chose the lr the curve arms use: every curve sample (each arm and the floor at
    each n, each compute-curve point; every fine-tuning seed) lies outside the split it scored,
    the rows it wrote as its `test` table."""
    params, metrics = curve_run
    scored = Path(params.paths.finetuned) / "lr_pilot" / "scratch_sst2" / "tables" / "sst2"
    pilot = set(pd.read_parquet(scored / "test.parquet")["id"])
    assert pilot and arms.pilot_rows(params, "sst2")[0] == pilot
    stems = [*(f"curve_n_sst2_{n}_{a}_p1234" for n in params.curves.ns for a in params.curves.arms),
             *(f"curve_floor_sst2_{n}" for n in params.curves.ns),
             *(f"curve_step_sst2_{k}_p1234" for k in params.curves.checkpoints)]
    pool = len(pd.read_parquet(Path(params.paths.tasks) / "sst2" / "train.parquet"))
    for stem in stems:
        for path in metrics[stem]["train_ids"]:
            ids = set(pd.read_parquet(path)["id"])
            assert ids and not ids & pilot, stem
        assert f"of {pool - len(pilot)} outside the pilot's split of {len(pilot)}" in (
            metrics[stem]["train_split"])


def test_a_curve_n_larger_than_the_pool_outside_the_pilot_split_is_refused(curve_run) -> None:
    params = curve_run[0]
    held, size = arms.pilot_rows(params, "sst2")
    too_many = size - len(held) + 1
    wide = override(params, curves={"ns": [*params.curves.ns, too_many]})
    words = (f"curves.ns asks for {too_many} training examples of sst2, but only "
             f"{size - len(held)} of its {size}-row training pool lie outside the pilot's split "
             f"of {len(held)}")
    with pytest.raises(Gpt1Error, match=words):
        curves.curve_n(wide, "sst2", too_many, "full")
    with pytest.raises(Gpt1Error, match=words):
        curves.curve_floor(wide, "sst2", too_many)
    big = override(params, curves={"compute_n": too_many})
    with pytest.raises(Gpt1Error, match="curves.compute_n asks for"):
        curves.curve_step(big, "sst2", 0)


def test_the_figure_data_come_from_the_records(curve_run) -> None:
    params, metrics = curve_run
    labels = report_curves.label_curve(params, metrics, "sst2")
    assert list(labels) == ["full", "scratch", "bow"]
    for arm, points in labels.items():
        assert [p.x for p in points] == [8, 20]
        for p in points:
            stem = (f"curve_floor_sst2_{p.x}" if arm == "bow"
                    else f"curve_n_sst2_{p.x}_{arm}_p1234")
            assert p.mean == pytest.approx(metrics[stem]["scores"]["acc"]["mean"])
            assert p.runs == 2 and p.low is not None and p.high is not None
            assert p.low <= p.mean <= p.high
    compute = report_curves.compute_curve(params, metrics, "sst2")
    assert [p.x for p in compute] == list(STEPS)
    b, steps = report_curves.compute_slope(params, metrics, "sst2")
    # fitted after warm-up (not step 0) over unflagged points only: this tiny run learns
    # nothing, so every checkpoint is flagged and the slope is not run (its arithmetic is
    # tests/unit/report/test_curves_report.py's, on hand-made records)
    assert all(p.flags for p in compute) and steps == [] and b is None
    text = "\n".join(report_curves.curves_section(params, metrics))
    assert "| bow |" in text and "Slope test over" in text and "n = 20" in text
    assert "Slope test over the unflagged checkpoints" in text and ": not run (0 such" in text
    assert "Flags (compute curve" in text and "no point flagged" not in text
    assert "Step 0 (the random init) vs the final checkpoint (step 12)" in text
    out = Path(params.paths.reports) / report_curves.FIGURE
    report_curves.plot_curves(params, metrics, out)
    assert out.read_bytes()[:4] == b"\x89PNG"


def test_a_point_outside_the_params_is_refused(curve_run) -> None:
    params, _ = curve_run
    with pytest.raises(Gpt1Error, match="n = 9 not in curves.ns"):
        curves.curve_n(params, "sst2", 9, "full")
    with pytest.raises(Gpt1Error, match="arm 'lstm' not in curves.arms"):
        curves.curve_n(params, "sst2", 8, "lstm")
    with pytest.raises(Gpt1Error, match="checkpoint 5 not in curves.checkpoints"):
        curves.curve_step(params, "sst2", 5)


def test_the_compute_curve_records_why_it_does_not_run_on_imported_weights(
        curve_run, tmp_path: Path) -> None:
    params = override(curve_run[0], pretrain={"import_hf": "models/openai-gpt"},
                      paths={"metrics": str(tmp_path / "metrics"),
                             "finetuned": str(tmp_path / "finetuned")})  # not the module's
    out = curves.curve_step(params, "sst2", 0)
    assert out["not_run"].startswith("not run: pretrain.import_hf imports released final")
    assert read_metrics(params.paths.metrics)["curve_step_sst2_0_p1234"]["not_run"]
    assert not list((Path(params.paths.finetuned) / "p1234" / "curve_step" / "sst2_0").iterdir())


def _dose_params(params):
    """The module's params with a dose curve of two budgets (4 and 6 updates of 128 tokens,
    past the 3 of warm-up, below the main run's 32) on SST-2, whose full and scratch rows are
    piloted."""
    pilot = {**params.as_dict()["ablations"]["pilot"], "variants": ["full", "scratch"]}
    assert params.pretrain.max_tokens == 4096
    return override(params, curves={"dose_tokens": [512, 768], "dose_tasks": ["sst2"]},
                    ablations={"pilot": pilot})


def test_each_dose_fine_tunes_its_own_run_at_its_own_pilots_choice(curve_run) -> None:
    """pilot_dose pilots the full row on a budget's own run (the full row's grid and carved
    split); curve_dose fine-tunes that run as Table 5's full row at that choice; a budget
    without its run stops naming the run's folder."""
    import torch

    params = _dose_params(curve_run[0])
    tok = bpe.load_bpe(params.paths.tokenizer)
    for seed, tokens in enumerate((512, 768)):  # stand-ins for pretrain_dose's runs
        torch.manual_seed(seed)
        model = networks.build_model(names.TRANSFORMER, params, tok.vocab_size)
        run_dir = checkpoint.pretrain_dir(arms.dose_params(params, tokens), names.TRANSFORMER)
        checkpoint.write_model(run_dir, model, {"kind": names.TRANSFORMER, "step": tokens // 128,
                                                "vocab_size": tok.vocab_size,
                                                "tokenizer_hash": tok.hash,
                                                "params": params.as_dict()})
    assert str(run_dir).endswith(f"{Path('pretrain') / 'dose' / '768' / 'p1234'}")
    lr_pilot_stages.pilot_dose(params, "sst2", 512)
    curves.curve_dose(params, "sst2", 512)
    metrics = read_metrics(params.paths.metrics)
    pilot, point = metrics["pilot_dose_sst2_512"], metrics["curve_dose_sst2_512_p1234"]
    assert pilot["variant"] == "full" and pilot["chosen_lr"] in params.ablations.pilot.lr_grid
    assert (point["lr"], point["warmup_frac"]) == (pilot["chosen_lr"], pilot["chosen_warmup"])
    assert point["variant"] == "curve_dose" and point["init"] == "pretrained"
    assert point["n_train"] == params.finetune.max_train_examples  # Table 5's full row's sample
    scored = Path(params.paths.finetuned) / "pilot_dose" / "sst2_512" / "tables" / "sst2"
    pilot_rows = set(pd.read_parquet(scored / "test.parquet")["id"])
    assert pilot_rows == arms.pilot_rows(params, "sst2")[0]  # the full row's carved split
    for path in point["train_ids"]:
        assert not set(pd.read_parquet(path)["id"]) & pilot_rows
    missing = override(params, curves={"dose_tokens": [512, 1000]})
    with pytest.raises(Gpt1Error, match="no pilot record pilot_dose_sst2_1000"):
        curves.curve_dose(missing, "sst2", 1000)
    with pytest.raises(Gpt1Error) as info:
        lr_pilot_stages.pilot_dose(missing, "sst2", 1000)
    assert str(Path("dose") / "1000" / "p1234") in str(info.value)


def test_a_dose_is_a_complete_run_of_its_own_budget_not_a_mid_run_checkpoint(
        tmp_path: Path) -> None:
    """pretrain_dose trains its budget (8 updates) with the main run's warm-up (4 updates),
    then decays to 0 at its own end: its weights match the main run's (32 updates) through the
    warm-up and differ at update 8, where the main run is mid-schedule."""
    import torch

    from gpt1.stages import pretrain as pretrain_stages
    from tests.helpers.runs import prepare_run

    _, params = prepare_run(tmp_path, "dose", {
        "pretrain": {"max_tokens": 4096, "zero_shot_checkpoints": 5,  # both keep steps 4, 8
                     "checkpoint_interval_steps": 8, "eval_interval_steps": 8},
        "curves": {"dose_tokens": [1024, 2048], "dose_tasks": ["sst2"]},
        "ablations": {"pilot": {"variants": ["full", "scratch"]}}})
    out = pretrain_stages.pretrain_dose(params, 1024)
    assert (out["steps"], out["tokens"]) == (8, 1024)
    assert read_metrics(params.paths.metrics)["pretrain_dose_1024_p1234"]["steps"] == 8
    pretrain_stages.pretrain(params)
    tok = bpe.load_bpe(params.paths.tokenizer).hash
    dose_dir = Path(params.paths.dose_checkpoints) / "1024" / "p1234"
    main_dir = checkpoint.pretrain_dir(params, names.TRANSFORMER)
    final, meta = checkpoint.load_model(dose_dir, tok)
    assert meta["step"] == 8 and meta["params"]["pretrain"]["max_tokens"] == 1024
    for step, same in ((4, True), (8, False)):
        dose = checkpoint.load_model(dose_dir, tok, step=step)[0].state_dict()
        main = checkpoint.load_model(main_dir, tok, step=step)[0].state_dict()
        assert all(torch.equal(dose[k], main[k]) for k in dose) == same, step
    assert all(torch.equal(v, dose[k]) for k, v in final.state_dict().items())
