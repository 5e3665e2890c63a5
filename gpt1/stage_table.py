"""Every pipeline stage as one row, and every run of one as a `StageRun`: what the CLI, the
Prefect flow, the run names, the records and the report read.

A row names the stage as dvc.yaml does, the function that runs it (a dotted path, so nothing
here imports torch), its CLI arguments, whether it runs a model on params `device`, whether its
command launches pretrain.nproc ranks (torchrun), whether it runs once per pre-training seed,
the keys of its DVC address (the foreach / matrix keys, in dvc.yaml's order), the params lists
they range over and its record's stem. `StageRun` is the one name-giver of a run: its DVC
address (the run's name for the CLI, the flow and MLflow), record stem, command line and lock
name; `runs_of(params)` lists every run the params define. tests/unit/test_stage_table.py
checks both against every stage DVC renders from dvc.yaml, stems included. `docstrings` reads
a module's docstrings from its source, the CLI's help text (`summary`, `first_paragraph`) for
the stages and the tools alike."""

from __future__ import annotations

import ast
import functools
import itertools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpt1 import names
from gpt1.errors import Gpt1Error

if TYPE_CHECKING:
    from gpt1.config import Params

PRETRAIN_SEED = "pretrain_seed"
"""The argument of the stages run once per pre-training seed (a value of pretrain.seeds)."""

ARGUMENTS: dict[str, tuple[type, str]] = {
    "task": (str, "one of the paper's 12 tasks or of params tasks.custom (finetune.tasks says "
                  "which ones run)"),
    "layers": (int, "blocks transferred: a value of params layers.layers_transferred"),
    "n": (int, "training examples per run: a value of params curves.ns"),
    "arm": (str, "an arm: full or a name in params ablations.presets (e.g. scratch, no_aux, "
                 "lstm); lr_pilot and ablation: a row of ablations.variants, curve_n: a value "
                 "of curves.arms"),
    "checkpoint": (int, "a kept zero-shot checkpoint, by index in step order: a value of "
                        "params curves.checkpoints"),
    "tokens": (int, "a pre-training budget of the dose curve: a value of params "
                    "curves.dose_tokens"),
    PRETRAIN_SEED: (int, "pre-training run: a value of params pretrain.seeds (default: the "
                         "first)"),
}
"""A stage argument -> (its type, its help). `--task` takes the task names as its choices."""


@dataclass(frozen=True)
class Stage:
    """One dvc.yaml stage (all the items of a foreach / matrix stage)."""

    name: str
    function: str
    """`module:function` that runs it: (params, **arguments) -> the record's metrics."""
    arguments: tuple[str, ...] = ()
    """Its required CLI arguments (ARGUMENTS), besides --pretrain-seed."""
    address: tuple[str, ...] = ()
    """The arguments DVC's address joins, in dvc.yaml's foreach / matrix order."""
    device: bool = False
    """Runs a model on params `device` (a GPU slot in the flow); else CPU only."""
    launched: bool = False
    """Its command launches pretrain.nproc ranks (DDP) and waits for them."""
    seeded: bool = False
    """Runs once per pre-training seed: takes --pretrain-seed (default: the first)."""
    tracked: bool = True
    """Opens its MLflow run around the work (scan_mirror and data_docs log nothing)."""
    over: tuple[str, ...] = ()
    """The params lists its address keys range over (dvc.yaml's `${...}`), key by key."""
    stem: str | None = ""
    """Its record's stem: a template over its arguments (`finetune_{task}`; empty: the stage's
    name), a seeded stage's suffixed with the pre-training run (gpt1.names.record_stem);
    None for a stage that writes no record."""

    @property
    def module(self) -> str:
        return self.function.partition(":")[0]

    @property
    def attribute(self) -> str:
        return self.function.partition(":")[2]


_SEED = (PRETRAIN_SEED,)
_SEEDS = ("pretrain.seeds",)
STAGES: dict[str, Stage] = {s.name: s for s in (
    Stage("scan_mirror", "gpt1.stages.data:scan_mirror", tracked=False, stem=None),
    Stage("download_corpus", "gpt1.stages.data:download_corpus"),
    Stage("clean_corpus", "gpt1.stages.data:clean_corpus"),
    Stage("check_corpus", "gpt1.stages.data:check_corpus"),
    Stage("train_bpe", "gpt1.stages.data:train_bpe"),
    Stage("shard_corpus", "gpt1.stages.data:shard_corpus"),
    Stage("pretrain", "gpt1.stages.pretrain:pretrain", address=_SEED, over=_SEEDS,
          device=True, launched=True, seeded=True),
    Stage("pretrain_lstm", "gpt1.stages.pretrain:pretrain_lstm", address=_SEED, over=_SEEDS,
          device=True, launched=True, seeded=True),
    Stage("prepare_task", "gpt1.stages.data:prepare_task", ("task",), ("task",),
          over=("finetune.tasks",), stem="prepare_task_{task}"),
    Stage("data_docs", "gpt1.stages.data:data_docs", tracked=False, stem=None),
    Stage("lr_pilot", "gpt1.stages.lr_pilot:lr_pilot", ("task", "arm"), ("arm", "task"),
          over=("ablations.variants", "ablations.tasks"), device=True,
          stem="lr_pilot_{arm}_{task}"),
    Stage("lr_pilot_full", "gpt1.stages.lr_pilot:lr_pilot_full", ("task",), ("task",),
          over=("finetune.tasks",), device=True, stem="lr_pilot_full_{task}"),
    Stage("finetune", "gpt1.stages.finetune:finetune", ("task",), ("task", PRETRAIN_SEED),
          over=("finetune.tasks", *_SEEDS), device=True, seeded=True, stem="finetune_{task}"),
    Stage("ablation", "gpt1.stages.finetune:ablation", ("task", "arm"),
          ("arm", "task", PRETRAIN_SEED),
          over=("ablations.variants", "ablations.tasks", *_SEEDS), device=True, seeded=True,
          stem="finetune_{arm}_{task}"),
    Stage("floor", "gpt1.stages.finetune:floor_stage", ("task",), ("task",),
          over=("ablations.tasks",), stem="finetune_bow_{task}"),
    Stage("transfer_layers", "gpt1.stages.finetune:transfer_layers", ("task", "layers"),
          ("task", "layers", PRETRAIN_SEED),
          over=("layers.tasks", "layers.layers_transferred", *_SEEDS), device=True,
          seeded=True, stem="layers_{task}_{layers}"),
    Stage("curve_n", "gpt1.stages.curves:curve_n", ("task", "n", "arm"),
          ("task", "n", "arm", PRETRAIN_SEED),
          over=("curves.tasks", "curves.ns", "curves.arms", *_SEEDS), device=True,
          seeded=True, stem="curve_n_{task}_{n}_{arm}"),
    Stage("curve_floor", "gpt1.stages.curves:curve_floor", ("task", "n"), ("task", "n"),
          over=("curves.tasks", "curves.ns"), stem="curve_floor_{task}_{n}"),
    Stage("curve_step", "gpt1.stages.curves:curve_step", ("task", "checkpoint"),
          ("task", "checkpoint", PRETRAIN_SEED),
          over=("curves.tasks", "curves.checkpoints", *_SEEDS), device=True, seeded=True,
          stem="curve_step_{task}_{checkpoint}"),
    Stage("pretrain_dose", "gpt1.stages.pretrain:pretrain_dose", ("tokens",),
          ("tokens", PRETRAIN_SEED), over=("curves.dose_tokens", *_SEEDS), device=True,
          launched=True, seeded=True, stem="pretrain_dose_{tokens}"),
    Stage("pilot_dose", "gpt1.stages.lr_pilot:pilot_dose", ("task", "tokens"),
          ("task", "tokens"), over=("curves.dose_tasks", "curves.dose_tokens"), device=True,
          stem="pilot_dose_{task}_{tokens}"),
    Stage("curve_dose", "gpt1.stages.curves:curve_dose", ("task", "tokens"),
          ("task", "tokens", PRETRAIN_SEED),
          over=("curves.dose_tasks", "curves.dose_tokens", *_SEEDS), device=True, seeded=True,
          stem="curve_dose_{task}_{tokens}"),
    Stage("zeroshot", "gpt1.stages.zeroshot:zeroshot", address=_SEED, over=_SEEDS,
          device=True, seeded=True),
    Stage("zeroshot_lstm", "gpt1.stages.zeroshot:zeroshot_lstm", address=_SEED, over=_SEEDS,
          device=True, seeded=True),
    Stage("report", "gpt1.stages.report:report", stem=None),
)}
"""Stage name (as in dvc.yaml) -> its row, in dvc.yaml's order: upstream first (each stage
after every stage it reads from; tests/unit/test_stage_table.py checks it against DVC's graph)."""


def stage_of(address: str) -> Stage:
    """The row of a stage address (`finetune@cola-1234` -> finetune) or name."""
    name = address.split("@", 1)[0]
    if name not in STAGES:
        raise Gpt1Error(f"unknown stage {name!r}; the stages are {', '.join(STAGES)}")
    return STAGES[name]


def resolve_pretrain_seed(seeds: Sequence[int], seed: int | None) -> int:
    """The pre-training seed a stage runs for: `seed`, a value of pretrain.seeds `seeds` (None:
    the first)."""
    if seed is None:
        return seeds[0]
    if seed not in seeds:
        raise Gpt1Error(f"pre-training seed {seed} not in pretrain.seeds {list(seeds)}")
    return seed


def stage_arguments(name: str, values: Mapping[str, Any], seeds: Sequence[int],
                    tasks: Sequence[str]) -> dict[str, Any]:
    """The keyword arguments stage `name` runs with, from `values` (parsed CLI arguments): its
    arguments, a task checked against `tasks` (the params' tasks.names), and for a seeded stage
    the pre-training seed resolved against `seeds`."""
    stage = STAGES[name]
    kwargs = {arg: values[arg] for arg in stage.arguments}
    if "task" in kwargs and kwargs["task"] not in tasks:
        raise Gpt1Error(f"--task: unknown task {kwargs['task']!r}; choose from "
                        f"{', '.join(map(repr, tasks))}")
    if stage.seeded:
        kwargs[PRETRAIN_SEED] = resolve_pretrain_seed(seeds, values.get(PRETRAIN_SEED))
    return kwargs


@dataclass(frozen=True)
class StageRun:
    """One run of a stage: its row and the values of its arguments (a seeded stage's
    pre-training seed included). Every name the run goes by comes from here."""

    stage: Stage
    values: tuple[tuple[str, Any], ...]
    """(argument, value) in the row's order: its arguments, then the pre-training seed."""

    @classmethod
    def of(cls, name: str, **arguments: Any) -> StageRun:
        """The run of stage `name` with `arguments` (every one its row takes)."""
        stage = STAGES[name]
        keys = (*stage.arguments, *(_SEED if stage.seeded else ()))
        if set(arguments) != set(keys):
            raise ValueError(f"stage {name} takes {keys}, not {tuple(arguments)}")
        return cls(stage, tuple((k, arguments[k]) for k in keys))

    @property
    def kwargs(self) -> dict[str, Any]:
        """The keyword arguments its function runs with."""
        return dict(self.values)

    @property
    def address(self) -> str:
        """Its DVC address, as dvc.yaml's foreach / matrix keys make it (`pretrain@1234`,
        `finetune@cola-1234`, `lr_pilot@scratch-sst2`, `report`): the run's name for the CLI,
        the flow and MLflow."""
        keys, kwargs = self.stage.address, self.kwargs
        return "@".join([self.stage.name,
                         *(["-".join(str(kwargs[k]) for k in keys)] if keys else [])])

    @property
    def stem(self) -> str:
        """Its record's stem (`finetune_cola_p1234`, `lr_pilot_scratch_sst2`; a ValueError for
        a stage that writes no record)."""
        kwargs = self.kwargs
        prefix = record_prefix(self.stage.name, **kwargs)
        return names.record_stem(prefix, kwargs[PRETRAIN_SEED]) if self.stage.seeded else prefix

    @property
    def argv(self) -> list[str]:
        """Its command line after `python -m gpt1` (`finetune --task cola --pretrain-seed 1234`)."""
        return [self.stage.name, *(a for k, v in self.values
                                   for a in (f"--{k.replace('_', '-')}", str(v)))]

    @property
    def lock_name(self) -> str:
        """What its workspace lock is named by (gpt1.stage_lock adds params' paths) and a
        refusal names: `gpt1 finetune --task cola --pretrain-seed 1234`."""
        return " ".join(["gpt1", self.stage.name.replace("_", "-"),
                         *(f"--{k.replace('_', '-')} {v}" for k, v in self.values)])


def record_prefix(name: str, **arguments: Any) -> str:
    """The record stem of stage `name` with `arguments` before a pre-training run's suffix
    (`finetune_cola`: a seeded stage's records extend it, `finetune_cola_p1234`, and the
    one-run layout's records are named by it)."""
    template = STAGES[name].stem
    if template is None:
        raise ValueError(f"stage {name} writes no record")
    return template.format(**arguments) if template else name


def runs_of(params: Params) -> list[StageRun]:
    """Every stage run the params define, as dvc.yaml's foreach / matrix lists render them, in
    its order: made in this order, each run comes after the runs it reads from
    (tests/unit/test_stage_table.py checks them against DVC's own)."""
    runs = []
    for stage in STAGES.values():
        lists = [functools.reduce(getattr, key.split("."), params) for key in stage.over]
        runs += [StageRun.of(stage.name, **dict(zip(stage.address, values, strict=True)))
                 for values in itertools.product(*lists)]
    return runs


def function_doc(stage: Stage) -> str:
    """The docstring of a stage's function, read from its source without importing it (torch)."""
    return docstrings(stage.module).get(stage.attribute, "")


def module_doc(module: str) -> str:
    """The docstring of a gpt1 module (a tool's), read from its source without importing it."""
    return docstrings(module).get("", "")


def first_paragraph(doc: str) -> str:
    """A docstring's user-facing part (a command's description): the rest is notes for
    readers of the code."""
    return doc.split("\n\n", 1)[0]


def summary(doc: str) -> str:
    """A command's one-line help: the docstring's first sentence, whole (its wrapped lines
    joined), never a line cut mid-sentence."""
    text = " ".join(first_paragraph(doc).split())
    match = re.search(r"(?<![ .]e\.g)(?<![ .]i\.e)[.!?](?=\s)", text)
    return text[:match.end()] if match else text


@functools.cache
def docstrings(module: str) -> dict[str, str]:
    """The docstrings of a gpt1 module, by its source: function name -> its docstring, and ""
    -> the module's."""
    path = Path(__file__).parent.joinpath(*module.split(".")[1:]).with_suffix(".py")
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {"": ast.get_docstring(tree) or "",
            **{node.name: ast.get_docstring(node) or "" for node in tree.body
               if isinstance(node, ast.FunctionDef)}}
