"""The stage table (gpt1/stage_table.py) against dvc.yaml, and the one name-giver of a run
(`StageRun`): every stage DVC renders is a row, every row a dvc.yaml stage; `runs_of(params)` is
every stage DVC renders, with its record's stem; and a run's name is DVC's address whether the
CLI runs it (outside `dvc repro` too) or the flow schedules it."""

from __future__ import annotations

import ast
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

import gpt1.__main__ as cli
from gpt1 import records, stage_run
from gpt1.config import load_params
from gpt1.stage_table import (
    PRETRAIN_SEED,
    STAGES,
    StageRun,
    runs_of,
    stage_arguments,
    stage_of,
)
from pipelines.dag import read_plan
from pipelines.devices import DevicePool

REPO = Path(__file__).resolve().parents[2]


def test_every_dvc_stage_is_a_row_with_its_keys_and_function() -> None:
    dvc = yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]
    assert list(dvc) == list(STAGES), "the table lists dvc.yaml's stages, in its order"
    for name, body in dvc.items():
        stage = STAGES[name]
        if "matrix" in body:
            keys = tuple(body["matrix"])  # the matrix keys are the stage arguments' names
        else:
            keys = (PRETRAIN_SEED,) if body.get("foreach") == "${pretrain.seeds}" else (
                stage.arguments if "foreach" in body else ())
        assert stage.address == keys, name
        lists = (tuple(body["matrix"].values()) if "matrix" in body
                 else (body["foreach"],) if "foreach" in body else ())
        assert tuple(f"${{{key}}}" for key in stage.over) == lists, name
        assert set(stage.arguments) | ({PRETRAIN_SEED} if stage.seeded else set()) == set(keys) \
            or not keys, name
        cmd = body.get("do", body)["cmd"]
        assert cmd.startswith(f"python -m gpt1 {name}"), name
        for arg in [*stage.arguments, *([PRETRAIN_SEED] if stage.seeded else [])]:
            assert f"--{arg.replace('_', '-')} ${{item" in cmd, (name, arg)
        source = REPO.joinpath(*stage.module.split(".")).with_suffix(".py").read_text()
        defined = {n.name for n in ast.parse(source).body if isinstance(n, ast.FunctionDef)}
        assert stage.attribute in defined, stage.function
    assert STAGES["lr_pilot"].address == ("arm", "task")  # one pilot per row and task


def test_every_stage_function_takes_the_stage_context() -> None:
    """The CLI passes each stage function its context (gpt1.records.StageContext) as
    the keyword-only `context`, so every function of the table takes it."""
    for stage in STAGES.values():
        source = REPO.joinpath(*stage.module.split(".")).with_suffix(".py").read_text()
        (fn,) = [n for n in ast.parse(source).body
                 if isinstance(n, ast.FunctionDef) and n.name == stage.attribute]
        assert [a.arg for a in fn.args.kwonlyargs] == ["context"], stage.function


def test_one_function_reads_the_rank() -> None:
    """Whether this process is a launched rank, and which, is read from the environment in
    one place (gpt1.launcher.rank); the rest ask the stage context."""
    readers = []
    for path in sorted((REPO / "gpt1").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for fn in ast.walk(tree):
            if isinstance(fn, ast.FunctionDef) and any(
                    isinstance(n, ast.Constant) and n.value == "RANK" for n in ast.walk(fn)):
                readers.append(f"{path.relative_to(REPO)}:{fn.name}")
    assert readers == ["gpt1/launcher.py:rank"]


DOSE_STAGES = {"pretrain_dose", "pilot_dose", "curve_dose"}
"""The dose curve's stages: rendered only where curves.dose_tokens lists budgets."""


def _dose_repo(root: Path) -> Path:
    """A DVC repo at `root`: dvc.yaml, and the study preset (its dose curve on) as params."""
    (root / "dvc.yaml").write_bytes((REPO / "dvc.yaml").read_bytes())
    (root / "params.yaml").write_bytes((REPO / "configs" / "cpu-study.yaml").read_bytes())
    (root / ".dvc").mkdir()
    (root / ".dvc" / "config").write_text("[core]\n    no_scm = True\n")
    return root


@pytest.mark.parametrize("preset", ["params.yaml", "study"])
def test_runs_of_params_are_dvcs_stages_with_their_records(preset: str, tmp_path: Path) -> None:
    """`runs_of(params)`: every stage DVC renders from dvc.yaml and params.yaml, in its order,
    each run's stem the record (`<stem>.info.json`) its DVC stage writes; with the demo (no
    dose curve: its stages render to none) and the study preset (the dose curve's stages, no
    compute curve)."""
    from dvc.repo import Repo

    root = REPO if preset == "params.yaml" else _dose_repo(tmp_path)
    params = load_params(root / "params.yaml")
    rendered = {r.stage.name for r in runs_of(params)}
    assert rendered & DOSE_STAGES == (DOSE_STAGES if params.curves.dose_tokens else set())
    assert ("curve_step" in rendered) == bool(params.curves.checkpoints)
    with Repo(str(root)) as repo:
        dvc = {s.name: {Path(o.fs_path).name.removesuffix(records.INFO_SUFFIX) for o in s.outs
                        if o.fs_path.endswith(records.INFO_SUFFIX)}
               for s in repo.index.stages}
    runs = runs_of(params)
    assert sorted(r.address for r in runs) == sorted(dvc)
    assert len({r.address for r in runs}) == len(runs)
    for run in runs:
        assert dvc[run.address] == ({run.stem} if run.stage.stem is not None else set()), run
    assert [r.stage.name for r in runs] == sorted((r.stage.name for r in runs),
                                                  key=list(STAGES).index)


def test_a_run_gives_every_name_from_one_place() -> None:
    run = StageRun.of("ablation", arm="scratch", task="sst2", pretrain_seed=1235)
    assert run.address == "ablation@scratch-sst2-1235"
    assert run.stem == "finetune_scratch_sst2_p1235"  # committed records keep their stems
    assert run.argv == ["ablation", "--task", "sst2", "--arm", "scratch",
                        "--pretrain-seed", "1235"]
    assert run.lock_name == "gpt1 ablation --task sst2 --arm scratch --pretrain-seed 1235"
    assert StageRun.of("lr_pilot_full", task="rte").stem == "lr_pilot_full_rte"
    assert StageRun.of("floor", task="rte").stem == "finetune_bow_rte"
    assert StageRun.of("pretrain_lstm", pretrain_seed=7).stem == "pretrain_lstm_p7"
    assert StageRun.of("report").argv == ["report"]
    dose = StageRun.of("curve_dose", task="qnli", tokens=750000, pretrain_seed=1234)
    assert (dose.address, dose.stem) == ("curve_dose@qnli-750000-1234",
                                         "curve_dose_qnli_750000_p1234")
    assert dose.argv == ["curve_dose", "--task", "qnli", "--tokens", "750000",
                         "--pretrain-seed", "1234"]
    assert StageRun.of("pretrain_dose", tokens=750000, pretrain_seed=7).stem == \
        "pretrain_dose_750000_p7"
    with pytest.raises(ValueError, match="takes"):
        StageRun.of("finetune", task="rte")  # a seeded stage's run names its seed


def _plan_and_commands() -> tuple[list[str], dict[str, str]]:
    from dvc.repo import Repo

    with Repo(str(REPO)) as repo:
        commands = {s.name: s.cmd for s in repo.index.stages}
    return [s.name for s in read_plan(REPO)], commands


def test_runs_of_lists_every_stage_after_its_upstream() -> None:
    """Made in runs_of's order (the one-shot run, gpt1/one_shot.py, makes them so, without
    DVC), every stage comes after every stage DVC's graph puts upstream of it."""
    params = load_params(REPO / "params.yaml")
    order = {run.address: i for i, run in enumerate(runs_of(params))}
    late = [(stage.name, up) for stage in read_plan(REPO) for up in stage.upstream
            if order[up] > order[stage.name]]
    assert not late, late


def test_the_cli_names_every_stage_the_flow_runs_as_dvc_does() -> None:
    """Each stage of the flow's plan (DVC's addresses), its dvc.yaml command parsed by the CLI:
    the run name the CLI gives it is the flow's, for every stage family and item."""
    from gpt1.config import load_params

    params = load_params(REPO / "params.yaml")
    seeds = params.pretrain.seeds
    plan, commands = _plan_and_commands()
    assert set(plan) == set(commands)
    families = set()
    parser = cli.build_parser(["report"])  # one parser: the stages' arguments, no tool's
    for name in plan:
        argv = shlex.split(commands[name])[3:]  # after `python -m gpt1`
        args = parser.parse_args(argv)
        run = StageRun.of(args.command, **stage_arguments(args.command, vars(args), seeds,
                                                          params.tasks.names))
        assert run.address == name
        assert run.argv == argv, name  # the command the launcher re-runs for each rank
        assert stage_of(name).name == args.command
        families.add(args.command)
    # every family but the dose curve's, off in the demo (tests/e2e/test_stage_params.py runs
    # its commands as the CLI parses them)
    assert set(STAGES) - families == DOSE_STAGES and not params.curves.dose_tokens
    pilots = [n for n in plan if n.startswith("lr_pilot@")]
    assert len(pilots) == len(set(pilots)) > 1  # both variants of a task: two names


@pytest.mark.parametrize(("argv", "name"), [
    (["scan_mirror"], "scan_mirror"),
    (["pretrain"], "pretrain@1234"),  # no --pretrain-seed: the first seed, named
    (["pretrain-lstm", "--pretrain-seed", "1235"], "pretrain_lstm@1235"),
    (["prepare_task", "--task", "rte"], "prepare_task@rte"),
    (["finetune", "--task", "cola"], "finetune@cola-1234"),
    (["lr_pilot", "--task", "sst2", "--arm", "scratch"], "lr_pilot@scratch-sst2"),
    (["lr_pilot", "--task", "sst2", "--variant", "lstm"], "lr_pilot@lstm-sst2"),  # old flag
    (["ablation", "--task", "sst2", "--arm", "lstm", "--pretrain-seed", "1235"],
     "ablation@lstm-sst2-1235"),
    (["floor", "--task", "sst2"], "floor@sst2"),
    (["transfer_layers", "--task", "mnli", "--layers", "3"], "transfer_layers@mnli-3-1234"),
    (["zeroshot"], "zeroshot@1234"),
    (["zeroshot_lstm", "--pretrain-seed", "1235"], "zeroshot_lstm@1235"),
    (["report"], "report"),
])
def test_the_cli_names_a_run_outside_dvc_as_dvc_would(argv: list[str], name: str, tmp_path,
                                                      make_params, monkeypatch) -> None:
    """`gpt1 <stage> ...` run by hand: the started line and the run carry DVC's address."""
    params = make_params({"pretrain": {"seeds": [1234, 1235]}})
    params_file = tmp_path / "params.yaml"
    params_file.write_text(yaml.safe_dump(params.as_dict()))
    seen: dict[str, Any] = {}
    monkeypatch.delenv("DVC_STAGE", raising=False)
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.setattr(stage_run, "_run_stage", lambda stage, run_name, *a: seen.update(
        stage=stage, run=run_name, kwargs=a[-1]))
    assert cli.main(["--params", str(params_file), *argv]) == 0
    assert seen["run"] == name and seen["stage"] == name.split("@")[0]
    if STAGES[seen["stage"]].seeded:
        assert seen["kwargs"][PRETRAIN_SEED] == int(name.rsplit("-", 1)[-1].rsplit("@")[-1])


def test_a_seed_outside_pretrain_seeds_is_refused_before_the_stage_runs(tmp_path, tiny_params,
                                                                      capsys) -> None:
    params_file = tmp_path / "params.yaml"
    params_file.write_text(yaml.safe_dump(tiny_params.as_dict()))
    assert cli.main(["--params", str(params_file), "zeroshot", "--pretrain-seed", "9"]) == 2
    assert "pre-training seed 9 not in pretrain.seeds" in capsys.readouterr().err


def test_the_flow_gives_devices_by_the_table() -> None:
    pool = DevicePool(["0", "1", "2"])
    wanted = {name: pool.wanted(name) for name in STAGES}
    assert {n for n, w in wanted.items() if w == 3} == {"pretrain", "pretrain_lstm",
                                                          "pretrain_dose"}
    assert {n for n, w in wanted.items() if w == 0} == {
        n for n, s in STAGES.items() if not s.device}
    assert wanted["finetune"] == wanted["lr_pilot"] == 1
    assert DevicePool([]).wanted("pretrain") == 0
