"""A model location (`--model` of predict, generate and export-hf) -> a gpt1 model folder.

A location is a pre-training run or fine-tuned model folder (model.json; its tokenizer is the
first of: the folder itself, its `tokenizer/` (where `gpt1 import-hf` writes it),
params.paths.tokenizer, the paths.tokenizer the model recorded (relative to the repository the
folder is in) whose sha256 is the one the model was trained with), an export-hf folder
(gpt1_model.json beside transformers' files; self-contained), or an MLflow model URI
(models:/name/version, models:/name@alias, runs:/id/model; self-contained: the registered
pyfunc model carries the weights and the tokenizer). `located` yields what the tools read: a
folder with model.json + model.safetensors and the tokenizer folder, written to a temp folder
when the location is not one already, removed afterwards. `run_tool` runs a CLI tool on its
located model and the params it runs with (the model's own where there is no params file).
"""

from __future__ import annotations

import contextlib
import hashlib
import tempfile
from argparse import Namespace
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from gpt1.config import load_params
from gpt1.errors import Gpt1Error
from gpt1.repo import repo_root

MLFLOW_SCHEMES = ("models:/", "runs:/")
TOKENIZER_DIR = "tokenizer"
"""Where `gpt1 import-hf` writes the imported run's tokenizer (gpt1.hf_import.TOKENIZER_DIR)."""


def _has_tokenizer(folder: Path) -> bool:
    from gpt1.bpe import META_FILE, TOKENIZER_FILE

    return (folder / TOKENIZER_FILE).is_file() and (folder / META_FILE).is_file()


def _recorded_tokenizer(folder: Path, meta: dict[str, Any]) -> Path | None:
    """The paths.tokenizer a model recorded: absolute, or relative to the repository holding
    the model folder (None when it names none, or the folder is in no repository)."""
    raw = (meta.get("params") or {}).get("paths", {}).get("tokenizer")
    if not isinstance(raw, str):
        return None
    if Path(raw).is_absolute():
        return Path(raw)
    root = repo_root(folder)
    return root / raw if (root / "dvc.yaml").is_file() else None


def run_tokenizer(folder: Path, tokenizer: str | Path | None) -> Path:
    """The tokenizer folder of run / fine-tuned model folder `folder`: the first candidate
    (module docstring) holding the tokenizer the model was trained with; Gpt1Error naming
    what was found otherwise."""
    from gpt1 import checkpoint
    from gpt1.bpe import TOKENIZER_FILE

    meta = checkpoint.read_model_meta(folder)
    want = meta.get("tokenizer_hash")
    candidates = [folder, folder / TOKENIZER_DIR, *([Path(tokenizer)] if tokenizer else []),
                  *filter(None, [_recorded_tokenizer(folder, meta)])]
    others = []
    for cand in dict.fromkeys(candidates):
        if _has_tokenizer(cand):
            digest = hashlib.sha256((cand / TOKENIZER_FILE).read_bytes()).hexdigest()
            if digest == want:
                return cand
            others.append(f"{cand} ({digest[:12]})")
    if others:
        raise Gpt1Error(f"trained with tokenizer {str(want)[:12]}, and the tokenizers found "
                        f"are others: {'; '.join(others)}; point params paths.tokenizer at its "
                        "own (an imported run holds it in tokenizer/)",
                        folder / checkpoint.MODEL_META)
    raise Gpt1Error("this model folder holds no tokenizer (nor tokenizer/), and there is no "
                    "params file naming one (paths.tokenizer); run it in the repository or "
                    "give an export-hf folder or models:/name/version", folder)


@contextlib.contextmanager
def located(location: str, tokenizer: str | Path | None, tracking_uri: str | None
            ) -> Iterator[tuple[Path, Path]]:
    """(model folder, tokenizer folder) of `location`; `tokenizer` (params.paths.tokenizer,
    None outside a repository) serves a run folder that holds none; `tracking_uri` is the
    store a models:/ URI is read from (None: MLflow's default)."""
    from gpt1 import checkpoint

    if location.startswith(MLFLOW_SCHEMES):
        from gpt1 import tracking

        with tempfile.TemporaryDirectory(prefix="gpt1-model-") as tmp, _named(tmp, location):
            yield tracking.download_model(location, tracking_uri, Path(tmp))
        return
    folder = Path(location)
    if (folder / checkpoint.MODEL_META).is_file():
        yield folder, run_tokenizer(folder, tokenizer)
        return
    from gpt1 import export

    if not (folder / export.GPT1_META).is_file():
        what = "no such folder" if not folder.exists() else (
            "not a gpt1 model: no model.json (a run or fine-tuned model) and no "
            f"{export.GPT1_META} (an export-hf folder)")
        raise Gpt1Error(f"--model: {what}; give a run directory, an export-hf folder or "
                        "models:/name/version", folder)
    model, meta = export.load_export(folder)
    with tempfile.TemporaryDirectory(prefix="gpt1-model-") as tmp, _named(tmp, location):
        checkpoint.write_model(Path(tmp), model, meta)
        yield Path(tmp), export.own_tokenizer(folder, Path(tmp) / "tokenizer")


def run_tool(tool: Any, args: Namespace, default_params: str) -> Any:
    """Run a CLI tool (`tool.run(args, params)`). With `--model` its location is resolved
    first and the params file is optional: without one (`default_params` absent), the model's
    own recorded params stand in, so a self-contained model works outside the repository. A
    tool declaring PARAMS_OPTIONAL gets None without a params file."""
    from gpt1 import checkpoint

    given = Path(args.params).is_file() or args.params != default_params
    if not getattr(args, "model", None):
        optional = getattr(tool, "PARAMS_OPTIONAL", False)  # the tool can do without (None)
        return tool.run(args, load_params(args.params) if given or not optional else None)
    params = load_params(args.params) if given else None
    uri = None
    if params is not None and args.model.startswith(MLFLOW_SCHEMES):
        from gpt1 import tracking

        uri = tracking.tracking_uri(params)
    with located(args.model, None if params is None else params.paths.tokenizer,
                 uri) as (model_dir, tok_dir):
        args.model, args.tokenizer = str(model_dir), str(tok_dir)
        if params is None:
            params = checkpoint.recorded_params(checkpoint.read_model_meta(model_dir),
                                                model_dir / checkpoint.MODEL_META)
        return tool.run(args, params)


@contextlib.contextmanager
def _named(tmp: str, location: str) -> Iterator[None]:
    """A refusal about a file of the temp copy names the location the user gave instead."""
    try:
        yield
    except Gpt1Error as err:
        if err.path is None or not Path(err.path).is_relative_to(tmp):
            raise
        raise Gpt1Error(err.problem, location) from None
