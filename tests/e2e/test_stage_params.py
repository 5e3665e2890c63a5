"""Each dvc.yaml stage declares as params exactly the keys of params.yaml its function reads.

Every stage DVC renders for a tiny preset (upstream first, as `dvc repro` runs them) is run
in-process as the CLI runs it (gpt1/stage_table.py) with a recorder on the typed params
(tests/helpers/params_reads.py); the keys each stage family read are compared with the keys its
`params:` declare, as DVC renders them. A key read but not declared would leave the stage's
outputs stale when it changes; a key declared but never read re-runs the stage for nothing.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
import yaml

from tests.helpers.corpus import write_corpus
from tests.helpers.params import every_stage_params
from tests.helpers.params_reads import recording, rendered_params
from tests.helpers.repo import REPO
from tests.helpers.task_mirror import write_mirror
from tests.helpers.task_tables import write_dprd

pytestmark = pytest.mark.slow

NOT_PARAMS = ("device", "tracking.", "orchestrate.", "paths.")
"""Read, never declared: where a model stage computes and whether MLflow records (how a stage
runs, not what it writes), and paths, which dvc.yaml interpolates into the stage's deps and outs
(scan_mirror declares paths.mirror_dir: it reads the mirror outside DVC)."""

SUPERSETS = ("finetune.tasks", "pretrain.seeds")
"""Lists a stage only tests its own task or pre-training seed against: params validation
(gpt1/config.py) puts every task a stage is rendered for in finetune.tasks, and a stage's seed
comes from pretrain.seeds, so the test never changes what it writes (adding a task re-runs no
other task's stages)."""

LSTM = ("lstm.dropout", "lstm.hidden_size", "lstm.initializer_range", "lstm.n_embd",
        "lstm.n_layer")
BRANCHES = {
    "download_corpus": ("data.hub_dataset", "data.hub_split", "data.hub_text_field",
                        "data.download_retries"),                     # data.source: hub
    "pretrain": ("pretrain.epochs", "pretrain.ddp_bucket_mb",          # epochs set; DDP ranks
                 "pretrain.ddp_bf16_grads", "pretrain.nproc",          # (the launcher's);
                 "pretrain.cuda_graph_scope"),                         # CUDA graphs on
    "pretrain_lstm": ("pretrain.epochs", "pretrain.ddp_bucket_mb", "pretrain.ddp_bf16_grads",
                      "pretrain.nproc", "pretrain.cuda_graph_scope"),
    "pretrain_dose": ("pretrain.epochs", "pretrain.ddp_bucket_mb", "pretrain.ddp_bf16_grads",
                      "pretrain.nproc", "pretrain.cuda_graph_scope"),
    "prepare_task": ("tasks.test_frac",),                              # SciTail's carve
    "lr_pilot": LSTM, "curve_n": LSTM,                                 # the LSTM arm piloted
    "report": ("report.max_seeds", "report.declared_effect"),         # (a) on a fresh split
}
"""Keys a stage reads on a branch the tiny run does not take."""


def _tiny_repo(root: Path) -> None:
    """dvc.yaml, a tiny params.yaml reaching every stage family, and a generated mirror."""
    write_corpus(root / "mirror", n_books=3, n_paragraphs=12)
    write_mirror(root / "mirror", rows=40)
    write_dprd(root / "mirror")
    raw = every_stage_params({"paths": {"mirror_dir": "mirror"}, "clean": {"workers": 1}})
    (root / "params.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    (root / "dvc.yaml").write_bytes((REPO / "dvc.yaml").read_bytes())
    (root / ".dvc").mkdir()
    (root / ".dvc" / "config").write_text("[core]\n    no_scm = True\n")  # `dvc init --no-scm`


def _run_every_stage(root: Path) -> dict[str, set[str]]:
    """Stage family -> the keys its runs read (membership tests of SUPERSETS and of the lists
    its own foreach / matrix expands left out)."""
    from dvc.repo import Repo

    import gpt1.__main__ as cli
    from gpt1.config import load_params
    from gpt1.stage_table import STAGES, stage_arguments
    from gpt1.stages import curves, data, finetune, lr_pilot, pretrain, report, zeroshot
    from pipelines.dag import read_plan

    modules = {m.__name__: m for m in (curves, data, finetune, lr_pilot, pretrain, report,
                                       zeroshot)}

    params = load_params(root / "params.yaml")
    stages = yaml.safe_load((root / "dvc.yaml").read_text())["stages"]
    with Repo(str(root)) as repo:
        commands = {s.addressing: s.cmd for s in repo.index.stages}
    reads: dict[str, set[str]] = {}
    for plan in read_plan(root):
        argv = shlex.split(commands[plan.name])[3:]  # after `python -m gpt1`
        args = cli.build_parser(argv).parse_args(argv)
        name = args.command
        stage = STAGES[name]
        function = getattr(modules[stage.module], stage.attribute)
        arguments = stage_arguments(name, vars(args), params.pretrain.seeds,
                                    params.tasks.names)  # the CLI's work, before the stage's
        with recording() as (read, tested):
            function(params, **arguments)
        body = stages[name]
        own = [body.get("foreach"), *(body.get("matrix") or {}).values()]
        exempt = {v[2:-1] for v in own if isinstance(v, str)} | set(SUPERSETS)
        reads.setdefault(name, set()).update(read | (tested - exempt))
    return reads


def test_every_stage_declares_exactly_the_params_it_reads(tmp_path: Path, monkeypatch) -> None:
    _tiny_repo(tmp_path)
    monkeypatch.chdir(tmp_path)
    reads = _run_every_stage(tmp_path)
    declared: dict[str, set[str]] = {}
    for address, keys in rendered_params(tmp_path).items():
        declared.setdefault(address.split("@")[0], set()).update(keys)
    assert set(reads) == set(declared)
    undeclared, unread = {}, {}
    for name, keys in reads.items():
        used = {k for k in keys if not k.startswith(NOT_PARAMS)} | set(BRANCHES.get(name, ()))
        if used - declared[name]:
            undeclared[name] = sorted(used - declared[name])
        if declared[name] - keys - set(BRANCHES.get(name, ())):
            unread[name] = sorted(declared[name] - keys - set(BRANCHES.get(name, ())))
    assert not undeclared, f"params read but not declared in dvc.yaml: {undeclared}"
    assert not unread, f"params declared in dvc.yaml but never read: {unread}"
