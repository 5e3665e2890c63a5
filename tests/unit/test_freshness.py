"""Freshness as DVC sees it: a record is current when the params its stage declares in dvc.yaml
are unchanged (gpt1.freshness), so a change no fine-tune declares keeps every ft.* score in the
headline; the report reads only the records of the stages the params define; the one DVC
metric is the headline."""

from __future__ import annotations

import json
import time
from pathlib import Path

import yaml

from gpt1 import freshness, records
from gpt1.config import load_params, override
from gpt1.records import StageContext
from gpt1.report.headline import headline
from gpt1.tasks.registry import TASKS
from tests.helpers.repo import REPO


def _write_finetune_records(params) -> None:
    """Each fine-tune's record as the finetune stage writes it (stamped with its context's
    stage hash)."""
    stamp = StageContext.of("finetune", "finetune", params, time.perf_counter(), None).stamp()
    for task in params.finetune.tasks:
        metric = TASKS[task].metric
        records.write_metrics(params, f"finetune_{task}_p{params.pretrain.seeds[0]}",
                              {"task": task, "variant": "full", "pretrain_seed":
                               params.pretrain.seeds[0], "seeds": [0],
                               "scores": {metric: {"mean": 0.5, "per_seed": [0.5]}}},
                              ("scores",), stamp)


def test_a_param_no_finetune_declares_keeps_every_ft_score(tiny_params) -> None:
    _write_finetune_records(tiny_params)
    every = {t: 50.0 for t in tiny_params.finetune.tasks}
    metrics = records.read_metrics(tiny_params.paths.metrics)
    assert headline(tiny_params, metrics)["ft"] == every
    assert all("stage_hash" in m for m in metrics.values())

    # `dvc exp run -S zeroshot.max_examples=8`: no fine-tune declares `zeroshot`, DVC keeps
    # them up to date, and so does the headline (the whole-params hash changed).
    zs = override(tiny_params, zeroshot={"max_examples": 8})
    assert zs.digest() != tiny_params.digest()
    assert headline(zs, freshness.current_records(zs, metrics))["ft"] == every

    # `-S finetune.lr=...` is declared by every fine-tune: until they re-run, none is current.
    lr = override(tiny_params, finetune={"lr": 3e-4})
    assert headline(lr, freshness.current_records(lr, metrics))["ft"] == {}


def test_the_report_reads_only_the_records_of_the_current_stages(tiny_params) -> None:
    seed = tiny_params.pretrain.seeds[0]
    task = tiny_params.finetune.tasks[0]
    metrics = {f"finetune_{task}_p{seed}": {"stage_hash": "x"},
               f"finetune_mnli_p{seed + 1}": {"stage_hash": "x"},  # another pre-training seed
               "finetune_qqp_p9": {"config_hash": "y"},              # another config's leftover
               f"finetune_{task}": {"config_hash": "y"}}             # the one-run layout
    assert set(freshness.current_records(tiny_params, metrics)) == {
        f"finetune_{task}_p{seed}", f"finetune_{task}"}


def test_a_stage_hash_covers_exactly_the_params_its_stage_declares(tiny_params) -> None:
    declared = freshness.declared_params("pretrain_lstm")  # keys, no whole section
    assert {"model.backend", "lstm.hidden_size", "pretrain.lr_max"} <= set(declared)
    assert "model.n_embd" not in declared and not {"lstm", "model", "pretrain"} & set(declared)
    base = freshness.stage_hash(tiny_params, "pretrain_lstm")
    wider = override(tiny_params, model={"n_embd": 64})  # undeclared: the Transformer's
    assert freshness.stage_hash(wider, "pretrain_lstm") == base
    torch_backend = override(tiny_params, model={"backend": "torch"})
    assert freshness.stage_hash(torch_backend, "pretrain_lstm") != base
    assert freshness.stage_hash(wider, "pretrain") != freshness.stage_hash(tiny_params,
                                                                           "pretrain")


def test_current_stems_are_the_records_of_dvcs_own_stages() -> None:
    """The stems gpt1.freshness expands from params are the records (`<stem>.info.json`
    outputs) of the stages DVC resolves from dvc.yaml and params.yaml."""
    from dvc.repo import Repo

    params = load_params(REPO / "params.yaml")
    with Repo(str(REPO)) as repo:
        dvc_stems = {Path(o.fs_path).name.removesuffix(records.INFO_SUFFIX): s.name
                     for s in repo.index.stages for o in s.outs
                     if o.fs_path.endswith(records.INFO_SUFFIX)}
    assert freshness.stage_addresses(params) == dvc_stems  # stem -> `finetune@sst2-1234`
    assert set(freshness.current_stems(params).values()) == {
        name.split("@")[0] for name in dvc_stems.values()}


def test_the_headline_is_the_one_dvc_metric() -> None:
    """`dvc metrics show` (no arguments) shows the headline only: test_dvc_views checks that
    it fits 160 columns with all 12 tasks."""
    stages = yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]
    declared = [m for body in stages.values() for m in body.get("do", body).get("metrics", [])]
    assert [next(iter(m)) for m in declared] == ["${paths.reports}/headline.json"]


def _value(raw: dict, key: str) -> object:
    for part in key.split("."):
        raw = raw[part]
    return raw


def test_a_record_without_a_stage_hash_is_judged_by_its_dvc_lock_entry(
        tmp_path: Path, monkeypatch) -> None:
    """Records written before stage hashes (the committed demo's): the params DVC recorded
    for their stage in dvc.lock, against params.yaml now."""
    from gpt1.config import parse_params
    from tests.helpers.params import make_params_dict

    (tmp_path / "dvc.yaml").write_bytes((REPO / "dvc.yaml").read_bytes())
    raw = make_params_dict(tmp_path)
    seed, task = raw["pretrain"]["seeds"][0], "sst2"
    declared = freshness.declared_params("finetune", REPO)
    lock = {"schema": "2.0", "stages": {f"finetune@{task}-{seed}": {"params": {"params.yaml": {
        key: _value(raw, key) for key in declared}}}}}  # DVC records a key as `finetune.lr`
    (tmp_path / "dvc.lock").write_text(yaml.safe_dump(lock))
    record = {"task": task, "variant": "full", "config_hash": "written-long-ago",
              "scores": {"acc": {"mean": 0.5, "per_seed": [0.5]}}}
    metrics = {f"finetune_{task}_p{seed}": record}
    monkeypatch.chdir(tmp_path)

    def headline_with(section: str, key: str, value: object) -> dict:
        edited = {**raw, section: {**raw[section], key: value}}
        (tmp_path / "params.yaml").write_text(yaml.safe_dump(edited))
        return headline(parse_params(edited, "params.yaml"), metrics)["ft"]

    assert headline_with("zeroshot", "max_examples", 8) == {task: 50.0}  # undeclared
    assert headline_with("finetune", "lr", 3e-4) == {}  # declared: the stage is stale


def test_an_own_task_leaves_every_other_stage_hash_as_it_was(tiny_params) -> None:
    """Adding a task of one's own (finetune.tasks, tasks.custom) changes the params of no stage
    but those that read every task: the data docs' home and the report."""
    own = override(tiny_params, finetune={"tasks": [*tiny_params.finetune.tasks, "questions"]},
                   tasks={"custom": {"questions": {"file": "questions.csv", "text": "text",
                                                   "label": "label", "labels": ["a", "b"]}}})
    stages = yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]
    changed = {stage for stage in stages
               if freshness.stage_hash(own, stage) != freshness.stage_hash(tiny_params, stage)}
    assert changed == {"data_docs", "report"}


def test_a_record_hashed_under_other_declarations_is_judged_as_dvc_judges_its_stage(
        tmp_path: Path, monkeypatch) -> None:
    """A record whose stage hash was taken over other `params:` lists (the committed runs',
    before key-level declarations): current when dvc.lock recorded its files as they are and
    the params its stage declares as they are now; not once either changed."""
    import hashlib
    import os

    from gpt1.config import parse_params
    from tests.helpers.params import make_params_dict

    (tmp_path / "dvc.yaml").write_bytes((REPO / "dvc.yaml").read_bytes())
    raw = make_params_dict(tmp_path)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(raw))
    monkeypatch.chdir(tmp_path)
    params = parse_params(raw, "params.yaml")
    seed, task = params.pretrain.seeds[0], "sst2"
    stem = f"finetune_{task}_p{seed}"
    record = {"task": task, "variant": "full", "pretrain_seed": seed, "seeds": [0],
              "scores": {"acc": {"mean": 0.5, "per_seed": [0.5]}}}
    files = records.write_metrics(params, stem, record, ("scores",))
    info = json.loads(files[1].read_text())
    files[1].write_text(json.dumps({**info, "stage_hash": "other-lists"}))
    outs = [{"path": os.path.relpath(f, tmp_path), "md5": hashlib.md5(f.read_bytes()).hexdigest()}
            for f in files]
    lock = {"schema": "2.0", "stages": {f"finetune@{task}-{seed}": {"outs": outs, "params": {
        "params.yaml": {k: _value(raw, k) for k in freshness.declared_params("finetune")}}}}}
    (tmp_path / "dvc.lock").write_text(yaml.safe_dump(lock))

    def ft() -> dict:
        now = parse_params(yaml.safe_load((tmp_path / "params.yaml").read_text()), "p")
        return headline(now, records.read_metrics(params.paths.metrics))["ft"]

    assert ft() == {task: 50.0}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(
        {**raw, "finetune": {**raw["finetune"], "lr": 3e-4}}))  # a key finetune declares
    assert ft() == {}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(raw))
    files[0].write_text(json.dumps({"scores": {"acc": {"mean": 0.9, "per_seed": [0.9]}}}))
    assert ft() == {}  # not the file dvc.lock recorded: written by another run
