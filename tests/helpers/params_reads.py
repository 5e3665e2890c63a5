"""Which params keys code reads: every attribute read on the typed params (gpt1/config.py
sections) while a recorder is on, as the dotted key of params.yaml it stands for
(`pretrain.lr_max`, `finetune.overrides`), and the params keys each stage declares in dvc.yaml
as DVC renders them."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from gpt1 import config

_state = threading.local()


class _Listed(tuple):  # type: ignore[type-arg]
    """A list of params.yaml read by attribute: `item in it` records a membership test of
    `key`, anything else (iterating, indexing, its length) a read."""

    key: str
    seen: tuple[set[str], set[str]]

    def __contains__(self, item: object) -> bool:
        self.seen[1].add(self.key)
        return tuple.__contains__(self, item)

    def __iter__(self) -> Iterator[Any]:
        self.seen[0].add(self.key)
        return tuple.__iter__(self)

    def __getitem__(self, index: Any) -> Any:
        self.seen[0].add(self.key)
        return tuple.__getitem__(self, index)

    def __len__(self) -> int:
        self.seen[0].add(self.key)
        return tuple.__len__(self)


def _owner_key(obj: Any) -> str | None:
    """The key of params.yaml a section object stands for ("" for the whole params)."""
    if isinstance(obj, config.Params):
        return ""
    held = getattr(_state, "sections", {}).get(id(obj))
    return held[1] if held is not None else None


@contextlib.contextmanager
def recording() -> Iterator[tuple[set[str], set[str]]]:
    """Yield (keys read, keys tested for membership) while the block runs: each field of the
    params, or of a section reached from them, read by attribute; `item in params.<key>` of a
    list field is a membership test, any other use of it a read. Validation (a Params built from a
    mapping, as gpt1.config.override does) reads nothing: it checks values, it uses
    none."""
    reads: set[str] = set()
    members: set[str] = set()
    original = config.Section.__getattribute__  # BaseModel's
    validate = config.Params.model_validate.__func__  # type: ignore[attr-defined]
    _state.sections, _state.validating = {}, 0

    def traced(self: Any, name: str) -> Any:
        value = original(self, name)
        if getattr(_state, "validating", 0) or name.startswith("_") or name not in type(
                self).model_fields:
            return value
        owner = _owner_key(self)
        if owner is None:
            return value
        key = f"{owner}.{name}" if owner else name
        if isinstance(value, config.Section):
            _state.sections[id(value)] = (value, key)  # held: its id is never reused meanwhile
            return value
        if isinstance(value, tuple):
            listed = _Listed(value)
            listed.key, listed.seen = key, (reads, members)
            return listed
        reads.add(key)
        return value

    def validating(cls: type, *args: Any, **kwargs: Any) -> Any:
        _state.validating += 1
        try:
            return validate(cls, *args, **kwargs)
        finally:
            _state.validating -= 1

    config.Section.__getattribute__ = traced  # type: ignore[method-assign]
    config.Params.model_validate = classmethod(validating)  # type: ignore[method-assign,assignment]
    try:
        yield reads, members
    finally:
        del config.Section.__getattribute__, config.Params.model_validate
        _state.sections = {}


def rendered_params(root: Path) -> dict[str, tuple[str, ...]]:
    """Stage address -> the params.yaml keys it declares, as DVC renders dvc.yaml at `root`."""
    from dvc.dependency.param import ParamsDependency
    from dvc.repo import Repo

    with Repo(str(root)) as repo:
        return {stage.addressing: tuple(sorted(key for dep in stage.deps
                                               if isinstance(dep, ParamsDependency)
                                               for key in dep.params))
                for stage in repo.index.stages}
