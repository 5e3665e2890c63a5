"""A model location (`--model` of predict, generate and export-hf) -> a gpt1 model folder.

A location is a pre-training run or fine-tuned model folder (model.json; its tokenizer is
params.paths.tokenizer unless the folder holds one), an export-hf folder (gpt1_model.json
beside transformers' files; self-contained), or an MLflow model URI (models:/name/version,
models:/name@alias, runs:/id/model; self-contained: the registered pyfunc model carries the
weights and the tokenizer). `located` yields what the tools read: a folder with model.json +
model.safetensors and the tokenizer folder, written to a temp folder when the location is not
one already, removed afterwards.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from pathlib import Path

from gpt1.errors import Gpt1Error

MLFLOW_SCHEMES = ("models:/", "runs:/")


def _has_tokenizer(folder: Path) -> bool:
    from gpt1.bpe import META_FILE, TOKENIZER_FILE

    return (folder / TOKENIZER_FILE).is_file() and (folder / META_FILE).is_file()


@contextlib.contextmanager
def located(location: str, tokenizer: str | Path | None, tracking_uri: str | None
            ) -> Iterator[tuple[Path, Path]]:
    """(model folder, tokenizer folder) of `location`; `tokenizer` (params.paths.tokenizer,
    None outside a repository) serves a run folder that holds none; `tracking_uri` is the
    store a models:/ URI is read from (None: MLflow's default)."""
    from gpt1 import checkpoint

    if location.startswith(MLFLOW_SCHEMES):
        from gpt1 import tracking

        with tempfile.TemporaryDirectory(prefix="gpt1-model-") as tmp:
            yield tracking.download_model(location, tracking_uri, Path(tmp))
        return
    folder = Path(location)
    if (folder / checkpoint.MODEL_META).is_file():
        if _has_tokenizer(folder):
            yield folder, folder
        elif tokenizer is None:
            raise Gpt1Error("this model folder holds no tokenizer and there is no params file "
                            "naming one (paths.tokenizer); run it in the repository or give an "
                            "export-hf folder or models:/name/version", folder)
        else:
            yield folder, Path(tokenizer)
        return
    from gpt1 import export

    if not (folder / export.GPT1_META).is_file():
        what = "no such folder" if not folder.exists() else (
            "not a gpt1 model: no model.json (a run or fine-tuned model) and no "
            f"{export.GPT1_META} (an export-hf folder)")
        raise Gpt1Error(f"--model: {what}; give a run directory, an export-hf folder or "
                        "models:/name/version", folder)
    model, meta = export.load_export(folder)
    with tempfile.TemporaryDirectory(prefix="gpt1-model-") as tmp:
        checkpoint.write_model(Path(tmp), model, meta)
        yield Path(tmp), export.own_tokenizer(folder, Path(tmp) / "tokenizer")
