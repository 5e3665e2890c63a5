"""The pipeline's stage graph, read from DVC (dvc.yaml + dvc.lock) — never written by hand.

`read_plan(root)` lists the stages in topological order (ties in DVC's own order) with the
stages each one depends on; `select(plan, wanted)` keeps some stages plus everything upstream
of them, as `dvc repro <target>` would; `to_run(root, plan)` names the ones `dvc repro` would
run now (`dvc status`), so a flow schedules only those. No Prefect here, so it is cheap to test.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpt1.errors import Gpt1Error
from gpt1.records import INFO_SUFFIX

ALWAYS = "always changed"  # `dvc status` of an always_changed stage (nothing else changed)


@dataclass(frozen=True)
class StagePlan:
    """One DVC stage: its name (`finetune@rte` for foreach items), its upstream stages and its
    metrics files: DVC metrics and stage records (relative to the repo root)."""

    name: str
    upstream: tuple[str, ...]
    metrics: tuple[str, ...] = ()
    always_changed: bool = False  # dvc.yaml `always_changed: true`: DVC runs it every time

    @property
    def base(self) -> str:
        """The dvc.yaml stage name (`finetune` for `finetune@rte`)."""
        return self.name.split("@", 1)[0]


def read_plan(root: str | Path) -> list[StagePlan]:
    """Every stage of the DVC repo at `root`, upstream first; ties keep DVC's stage order."""
    import networkx as nx
    from dvc.exceptions import DvcException
    from dvc.repo import Repo

    try:
        with Repo(str(root)) as repo:
            stages = list(repo.index.stages)
            graph = repo.index.graph  # edge: stage -> a stage it depends on
            name = {s: _address(s) for s in stages}
            position = {name[s]: i for i, s in enumerate(stages)}
            upstream = {
                name[s]: tuple(sorted((name[d] for d in graph.successors(s)),
                                      key=position.__getitem__))
                for s in stages
            }
            names = nx.relabel_nodes(graph, name).reverse()
            metrics = {name[s]: _records(s, repo.root_dir) for s in stages}
            always = {name[s] for s in stages if getattr(s, "always_changed", False)}
    except DvcException as err:
        raise Gpt1Error(f"cannot read the DVC pipeline ({err})", Path(root) / "dvc.yaml") from None
    order = nx.lexicographical_topological_sort(names, key=lambda n: f"{position[n]:09d}")
    return [StagePlan(n, upstream[n], metrics[n], n in always) for n in order]


def to_run(root: str | Path, plan: list[StagePlan]) -> set[str]:
    """The stages of `plan` that `dvc repro` would run now, once its always-changed stages
    have run: those `dvc status` finds changed (params, deps, outs, command; `always changed`
    alone does not count, as what such a stage changed shows in its outputs) and every stage
    downstream of one (its inputs change when it runs). The rest are up to date: a run need
    not schedule them."""
    from dvc.exceptions import DvcException
    from dvc.repo import Repo

    try:
        with Repo(str(root)) as repo, repo.lock:  # as `dvc status`, named from the root
            changed = {_address(s) for s in repo.index.stages
                       if any(c != ALWAYS for cs in s.status().values() for c in cs)}
    except DvcException as err:
        raise Gpt1Error(f"cannot read the DVC status ({err})", Path(root) / "dvc.lock") from None
    out: set[str] = set()
    for stage in plan:  # upstream first: one pass propagates a change downstream
        if stage.name in changed or any(u in out for u in stage.upstream):
            out.add(stage.name)
    return out


def _records(stage: Any, root: str) -> tuple[str, ...]:
    """A stage's metrics files: its DVC metrics plus its records (an output `<stem>.json`
    beside an output `<stem>.info.json`, gpt1/records.py), which dvc.yaml keeps out of
    `dvc metrics show`."""
    outs = [os.path.relpath(o.fs_path, root) for o in stage.outs]
    return tuple(rel for o, rel in zip(stage.outs, outs, strict=True)
                 if o.metric or rel[:-len(".json")] + INFO_SUFFIX in outs)


def _address(stage: Any) -> str:
    """The stage's name as `dvc dag` prints it from the repo root (not from the cwd)."""
    from dvc.stage import PipelineStage

    if isinstance(stage, PipelineStage):
        where = stage.path_in_repo
        return stage.name if where == "dvc.yaml" else f"{where}:{stage.name}"
    return str(stage.path_in_repo)


def select(plan: list[StagePlan], wanted: list[str] | None) -> list[StagePlan]:
    """The stages named in `wanted` (a name or a foreach base name) plus all their upstream.

    None = every stage. Unknown names raise Gpt1Error listing the known ones.
    """
    if wanted is None:
        return plan
    by_name = {s.name: s for s in plan}
    keep: set[str] = set()
    todo = []
    for want in wanted:
        hits = [s.name for s in plan if want in (s.name, s.base)]
        if not hits:
            known = ", ".join(s.name for s in plan)
            raise Gpt1Error(f"no DVC stage {want!r} (stages: {known})", "stages")
        todo.extend(hits)
    while todo:
        name = todo.pop()
        if name not in keep:
            keep.add(name)
            todo.extend(by_name[name].upstream)
    return [s for s in plan if s.name in keep]
