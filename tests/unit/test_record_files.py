"""The metrics folder has one owner (gpt1/records.py): records and curve files are written and
read through it, curves told from records by their name (`.curve.json`, earlier `_val.json`),
never by what they hold."""

from __future__ import annotations

import json

import pytest

from gpt1 import records
from gpt1.errors import Gpt1Error


def test_curves_are_their_own_files_and_no_reader_takes_them_for_records(tiny_params) -> None:
    metrics = tiny_params.paths.metrics
    records.write_metrics(tiny_params, "pretrain_p1", {"val_loss": 2.0, "steps": 3},
                          ("val_loss",))
    curve = records.write_curve(tiny_params, "pretrain_p1", [{"step": 0, "val_ppl": 9.0}])
    assert curve.name == "pretrain_p1.curve.json"
    old = curve.with_name("pretrain_lstm_p1_val.json")  # a committed run's curve, old name
    old.write_text(json.dumps([{"step": 0, "val_ppl": 7.0}]))
    assert set(records.read_metrics(metrics)) == {"pretrain_p1"}
    assert records.read_metrics(metrics)["pretrain_p1"]["steps"] == 3  # scores + sidecar
    assert records.read_curve(metrics, "pretrain_p1") == [{"step": 0, "val_ppl": 9.0}]
    assert records.read_curve(metrics, "pretrain_lstm_p1") == [{"step": 0, "val_ppl": 7.0}]
    assert records.read_curve(metrics, "zeroshot_p1") is None
    assert records.read_scores_file(curve) is None and records.read_scores_file(old) is None
    assert records.read_record(metrics, "pretrain_p1") == records.read_metrics(metrics)[
        "pretrain_p1"]
    assert records.read_record(metrics, "finetune_cola_p1") is None


def test_a_record_that_is_not_an_object_is_named_not_skipped(tiny_params) -> None:
    metrics = tiny_params.paths.metrics
    records.write_metrics(tiny_params, "train_bpe", {"vocab_size": 5}, ("vocab_size",))
    bad = records.record_paths(metrics, "shard_corpus")[0]
    bad.write_text("[1, 2]")  # not a curve's name: a damaged record
    with pytest.raises(Gpt1Error, match=r"shard_corpus\.json: not a JSON object"):
        records.read_metrics(metrics)


@pytest.mark.parametrize("stem", ["finetune_sst2_p1", "layers_mnli_2_p1",
                                  "curve_n_sst2_100_full_p1", "curve_floor_sst2_100",
                                  "curve_step_sst2_0_p1"])
def test_a_damaged_score_of_any_scored_record_is_one_error_naming_its_file(tmp_path, stem
                                                                           ) -> None:
    """The report reads `mean` and `per_seed` of every fine-tuning record, the curves' points
    included: a damaged score is the usual one-line error naming the file, not a KeyError."""
    (tmp_path / f"{stem}.json").write_text(json.dumps({"scores": {"acc": {"sd": 0.1}}}))
    with pytest.raises(Gpt1Error, match=f"{stem}.json") as info:
        records.read_metrics(tmp_path)
    assert "'scores'" in str(info.value) and "\n" not in str(info.value)
    (tmp_path / f"{stem}.json").write_text(json.dumps(
        {"scores": {"acc": {"mean": 0.5, "sd": 0.1, "per_seed": [0.4, 0.6]}}}))
    assert records.read_metrics(tmp_path)[stem]["scores"]["acc"]["mean"] == 0.5
