"""One word per thing (gpt1.names): the network body is `transformer` | `lstm` everywhere, and
artifacts written before (`"gpt"`, the body under `kind` or `model`) are still read, by
gpt1.names alone."""

from __future__ import annotations

import ast
import hashlib
import json
from pathlib import Path

import pytest
import torch

from gpt1 import checkpoint, names, networks
from gpt1.export import GPT1_META, read_export_meta
from gpt1.model import GPT
from gpt1.pretraining import _NOT_TRAJECTORY, resume_key
from gpt1.report.document import banner
from gpt1.report.figure2 import zeroshot_curves
from gpt1.report.runs import first_run
from tests.helpers.repo import REPO

OLD = "gpt"
"""The transformer's word in artifacts written before the rename."""


def test_body_reads_the_old_word_and_refuses_unknown_ones() -> None:
    assert names.body(OLD) == names.body("transformer") == names.TRANSFORMER
    assert names.body("lstm") == names.LSTM
    with pytest.raises(ValueError, match="unknown network body 'gru'; known: transformer, lstm"):
        names.body("gru")


@pytest.mark.parametrize(("record", "body"), [
    ({"body": "transformer"}, "transformer"),                # any record written now
    ({"body": OLD, "variant": "full"}, "transformer"),       # an old fine-tuning record
    ({"kind": OLD, "steps": 10}, "transformer"),             # an old pre-training record
    ({"kind": "lstm"}, "lstm"),
    ({"model": "transformer", "checkpoints": []}, "transformer"),  # an old zero-shot record
    ({"body": "bow", "model": "TF-IDF + logistic regression"}, "bow"),  # the floor: no network
    ({"rows": 12}, None),                                    # a data stage's record
    ({"model": {"n_layer": 2}}, None),                       # params, not a body
])
def test_record_body_reads_every_layout(record: dict, body: str | None) -> None:
    assert names.record_body(record) == body


def test_the_report_reads_old_and_new_records_alike(tiny_params) -> None:
    def zeroshot(key: str, word: str, seed: int) -> dict:
        return {key: word, "pretrain_seed": seed, "checkpoints": [
            {"step": s, "normalised": {"sst2": 0.25 * s + seed % 2}} for s in (0, 4)]}

    old = {"pretrain_p7": {"kind": OLD, "pretrain_seed": 7, "tokens": 640},
           "zeroshot_p7": zeroshot("model", "transformer", 7),
           "zeroshot_p8": zeroshot("model", "transformer", 8)}
    new = {"pretrain_p7": {"body": "transformer", "pretrain_seed": 7, "tokens": 640},
           "zeroshot_p7": zeroshot("body", "transformer", 7),
           "zeroshot_p8": zeroshot("body", "transformer", 8)}
    for metrics in (old, new):
        assert first_run(metrics, "pretrain") == metrics["pretrain_p7"]
        assert first_run(metrics, "pretrain_lstm") is None
        assert zeroshot_curves(metrics) == {"transformer": {"sst2": [(0, 0.5), (4, 1.5)]}}
    assert banner(tiny_params, old) == banner(tiny_params, new)
    assert "640" in "\n".join(banner(tiny_params, old))


def _digest(body: dict) -> str:
    """model.json's digest, as the checkpoint format defines it (sha256 of the sorted JSON)."""
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def test_a_checkpoint_written_with_the_old_word_loads(tiny_params, tmp_path: Path) -> None:
    run_dir = checkpoint.pretrain_dir(tiny_params, OLD, 5)
    assert run_dir == checkpoint.pretrain_dir(tiny_params, names.TRANSFORMER, 5)
    assert run_dir.name == names.run_tag(5) == "p5"
    model = networks.build_model(OLD, tiny_params, 50)
    assert isinstance(model, GPT)
    checkpoint.write_model(run_dir, model, {"kind": OLD, "vocab_size": 50,
                                            "tokenizer_hash": "h" * 64,
                                            "params": tiny_params.as_dict()})
    path = run_dir / checkpoint.MODEL_META
    written = json.loads(path.read_text())
    assert written["kind"] == "transformer"  # what is written now
    old = {k: v for k, v in written.items() if k != "digest"} | {"kind": OLD}
    path.write_text(json.dumps({**old, "digest": _digest(old)}))  # as written before the rename
    loaded, meta = checkpoint.load_model(run_dir, "h" * 64)
    assert meta["kind"] == names.TRANSFORMER and isinstance(loaded, GPT)
    assert torch.equal(loaded.tokens_embed.weight, model.tokens_embed.weight)
    checkpoint.check_model_shape(run_dir, tiny_params)  # the shape table knows the body


def test_an_export_folder_with_the_old_word_reads(tiny_params, tmp_path: Path) -> None:
    meta = {"kind": OLD, "vocab_size": 50, "params": tiny_params.as_dict()}
    (tmp_path / GPT1_META).write_text(json.dumps(meta))
    assert read_export_meta(tmp_path)["kind"] == names.TRANSFORMER


def test_a_run_in_progress_resumes_across_the_rename(tiny_params) -> None:
    """The resume key hashes the body as checkpoints were keyed before: a checkpoint written
    then still resumes (a changed key would delete it as a changed run)."""
    pretrain = {k: v for k, v in tiny_params.pretrain.model_dump(mode="json").items()
                if k not in _NOT_TRAJECTORY}
    before = hashlib.sha256(json.dumps(
        [OLD, tiny_params.model.model_dump(mode="json"), pretrain, tiny_params.seed,
         "t" * 64, "fp32"], sort_keys=True).encode()).hexdigest()
    seed = tiny_params.seed  # the pre-training seed stands where params.seed stood
    assert resume_key(tiny_params, names.TRANSFORMER, seed, "t" * 64, "fp32") == before
    assert resume_key(tiny_params, OLD, seed, "t" * 64, "fp32") == before
    assert resume_key(tiny_params, names.LSTM, seed, "t" * 64, "fp32") != before
    assert resume_key(tiny_params, names.TRANSFORMER, seed + 1, "t" * 64, "fp32") != before


def _old_word_literals(path: Path) -> list[int]:
    return [node.lineno for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
            if isinstance(node, ast.Constant) and node.value == OLD]


def test_only_the_old_artifact_reader_knows_the_old_word() -> None:
    found = {str(p.relative_to(REPO)): lines
             for root in ("gpt1", "pipelines", "benchmarks", "tests")
             for p in sorted((REPO / root).rglob("*.py"))
             if (lines := _old_word_literals(p))}
    allowed = {"gpt1/names.py", "tests/unit/test_names.py"}
    assert set(found) <= allowed, {k: v for k, v in found.items() if k not in allowed}
