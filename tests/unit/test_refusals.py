"""Every failure on the newer surfaces (predict, export folders, relog, verdicts, import-hf,
params unions, serve --stop, models:/ URIs, the hub) is one line naming the file and the
problem, exit 2, nothing written, never an `internal error`; a refusal waits for nothing."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

import pytest
import yaml

from gpt1.__main__ import main
from tests.helpers.cli import file_tree, refused
from tests.helpers.hf_checkpoint import write_tiny_openai_gpt
from tests.helpers.params import make_params_dict
from tests.helpers.repo import REPO
from tests.helpers.runs import task_export, tiny_run

transformers = pytest.importorskip("transformers")


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_predict_on_a_pretrained_run_says_it_is_not_fine_tuned(tiny_params, tmp_path, capsys,
                                                               monkeypatch):
    """A pre-trained run, and its export (read through a temp copy: the line names the
    export, not the copy)."""
    from gpt1.export import export_hf

    tiny_run(tiny_params, tmp_path)  # run/ (pre-trained LM), tok/
    export_hf(tmp_path / "run", tmp_path / "hf", tmp_path / "tok")
    raw = tiny_params.as_dict()
    raw["paths"]["tokenizer"] = str(tmp_path / "tok")
    (tmp_path / "params.yaml").write_text(json.dumps(raw))
    before = file_tree(tmp_path)
    monkeypatch.chdir(tmp_path)
    refused(capsys, ["predict", "--model", str(tmp_path / "run"), "a film"],
             str(tmp_path / "run" / "model.json"), "pre-trained", "gpt1 generate")
    line = refused(capsys, ["predict", "--model", str(tmp_path / "hf"), "a film"],
                    f"error: {tmp_path / 'hf'}: a pre-trained language model")
    assert "gpt1-model-" not in line
    assert file_tree(tmp_path) == before


def test_generate_on_a_fine_tuned_model_names_it(tiny_params, tmp_path, capsys, monkeypatch):
    params, _, _ = task_export(tiny_params, tmp_path, "rte")  # ft/, hf/ (its export), tok/
    raw = params.as_dict()
    raw["paths"]["tokenizer"] = str(tmp_path / "tok")
    (tmp_path / "params.yaml").write_text(json.dumps(raw))
    monkeypatch.chdir(tmp_path)
    before = file_tree(tmp_path)
    for model in (tmp_path / "hf", tmp_path / "ft"):
        line = refused(capsys, ["generate", "--model", str(model), "the cat"],
                        f"error: {model}", "fine-tuned on rte", "gpt1 predict")
        assert "gpt1-model-" not in line
    assert file_tree(tmp_path) == before


@pytest.mark.parametrize("damage,file,needle", [
    ("truncate", "gpt1_model.json", "not valid JSON"),
    ("truncate", "model.safetensors", "not a valid safetensors file"),
    ("truncate", "task_head.safetensors", "not a valid safetensors file"),
    ("truncate", "gpt1_tokenizer.json", "not a valid tokenizer file"),  # the one gpt1 reads
    ("remove", "model.safetensors", "missing"),
    ("remove", "task_head.safetensors", "missing"),
    ("wrong", "task_head.safetensors", "do not fit"),
])
def test_a_damaged_export_folder_is_one_line_naming_the_file(tiny_params, tmp_path, capsys,
                                                             monkeypatch, damage, file, needle):
    """predict / export-hf / generate read an export folder only after checking each file."""
    from safetensors.torch import save_file

    task_export(tiny_params, tmp_path, "rte")
    path = tmp_path / "hf" / file
    if damage == "truncate":
        path.write_bytes(path.read_bytes()[: len(path.read_bytes()) // 2])
    elif damage == "remove":
        path.unlink()
    else:  # a head of another shape (3 labels where RTE has 2)
        import torch

        save_file({"weight": torch.zeros(3, tiny_params.model.n_embd), "bias": torch.zeros(3)},
                  str(path))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    before = file_tree(tmp_path)
    refused(capsys, ["predict", "--model", str(tmp_path / "hf"), "a man sleeps.",
                      "--text-b", "a person rests."], str(path), needle)
    refused(capsys, ["export-hf", "--model", str(tmp_path / "hf"), str(tmp_path / "again")],
             str(path), needle)
    assert file_tree(tmp_path) == before


def _pending_workspace(tmp_path: Path, monkeypatch, ops_text: str) -> tuple[Path, Path]:
    """A workspace whose one pending run's ops.jsonl is `ops_text`; (its folder, the store)."""
    from gpt1.tracking.pending import Pending

    monkeypatch.chdir(tmp_path)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(make_params_dict(tmp_path)))
    db = tmp_path / "store" / "mlflow.db"
    db.parent.mkdir()
    pending = Pending.of(f"sqlite:///{db}", "0" * 32)
    (pending.folder / "ops.jsonl").write_text(ops_text, encoding="utf-8")
    return pending.folder, db


@pytest.mark.parametrize("ops,needle", [
    ('{"op": "end", "status": "FINISHED"}\n{"op": "metrics", "metr', "line 2 is not valid JSON"),
    ('{"op": "end", "status": "FINISHED"}\n[1, 2]\n', "line 2 is not a pending record"),
])
def test_relog_over_a_damaged_pending_line_logs_nothing(tmp_path, monkeypatch, capsys, ops,
                                                        needle):
    """A line cut short by a kill mid-append: one line naming the file and line, the records
    kept as they were, no store created (nothing is logged before every line is read)."""
    folder, db = _pending_workspace(tmp_path, monkeypatch, ops)
    before = file_tree(folder)
    refused(capsys, ["relog"], str(folder / "ops.jsonl"), needle, "gpt1 relog")
    assert file_tree(folder) == before and not db.exists()
    (folder / "run.json").write_text('{"tracking_uri": "sqlite:///x.db", "run_')
    refused(capsys, ["relog"], str(folder / "run.json"), "not valid JSON")


@pytest.mark.parametrize("file,field,value", [
    ("finetune_sst2_p1234.info.json", "pretrain_seed", "p1234"),
    ("finetune_sst2_p1234.info.json", "seeds", [0, "one", 2]),
    ("finetune_sst2_p1234.json", "scores", {"acc": {"mean": "0.57", "sd": 0.01}}),
])
def test_verdicts_over_a_mistyped_record_field_names_file_and_field(tmp_path, capsys, file,
                                                                    field, value):
    import shutil

    metrics = tmp_path / "metrics"
    shutil.copytree(REPO / "reports" / "metrics", metrics)
    record = json.loads((metrics / file).read_text())
    record[field] = value
    (metrics / file).write_text(json.dumps(record))
    raw = yaml.safe_load((REPO / "params.yaml").read_text())
    raw["paths"].update(metrics=str(metrics), reports=str(tmp_path / "reports"))
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump(raw))
    out = tmp_path / "verdicts.md"
    refused(capsys, ["verdicts", "--run", f"demo={params}", "--out", str(out)],
             str(metrics / file), repr(field))
    assert not out.exists()


def test_import_hf_into_a_non_empty_folder_suggests_no_flag_it_lacks(make_params, tmp_path,
                                                                     capsys):
    src = tmp_path / "openai-gpt"
    write_tiny_openai_gpt(src)
    out = tmp_path / "out"
    out.mkdir()
    (out / "mine.txt").write_text("mine")
    params = tmp_path / "params.yaml"
    params.write_text(json.dumps(make_params().as_dict()))
    line = refused(capsys, ["--params", str(params), "import-hf", str(src), str(out)],
                    str(out), "not empty")
    assert "--overwrite" not in line  # import-hf has no such flag
    assert [p.name for p in out.iterdir()] == ["mine.txt"]


@pytest.mark.parametrize("value", [0, -2, "two", 1.5, None])
def test_union_typed_key_names_every_accepted_form(tmp_path, capsys, value):
    raw = make_params_dict(tmp_path)
    raw["pretrain"]["nproc"] = value
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump(raw))
    line = refused(capsys, ["--params", str(params), "pretrain"], str(params),
                    "pretrain.nproc: ", "'auto' or an integer > 0")
    assert "literal" not in line and "Input should" not in line  # pydantic's own wording
    assert not (tmp_path / "data").exists()


def test_serve_stop_with_nothing_running_says_so(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PREFECT_HOME", str(tmp_path / "prefect-home"))
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(make_params_dict(tmp_path)))
    capsys.readouterr()
    assert main(["serve", "--stop"]) == 0
    out = capsys.readouterr().out
    assert "nothing to stop" in out and str(tmp_path / "prefect-home") in out


def test_models_uri_without_a_store_creates_none(tmp_path, capsys, monkeypatch):
    """Outside a repository (no params, MLflow's default store is ./mlflow.db) and inside one
    whose store was never created: one line naming the store; no mlflow.db appears."""
    outside = tmp_path / "outside"
    outside.mkdir()
    monkeypatch.chdir(outside)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    refused(capsys, ["predict", "--model", "models:/gpt1-rte/1", "a film"],
             "models:/gpt1-rte/1", "mlflow.db", "MLFLOW_TRACKING_URI")
    refused(capsys, ["generate", "--model", "models:/gpt1-pretrain/1", "the"],
             "models:/gpt1-pretrain/1")
    assert list(outside.iterdir()) == []
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "dvc.yaml").write_text("stages: {}\n")
    raw = make_params_dict(repo, {"tracking": {"enabled": True, "uri": None}})
    (repo / "params.yaml").write_text(yaml.safe_dump(raw))
    monkeypatch.chdir(repo)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    refused(capsys, ["predict", "--model", "models:/gpt1-rte/1", "a film"],
             str(repo / "mlflow.db"))
    assert sorted(p.name for p in repo.iterdir()) == ["dvc.yaml", "params.yaml"]


def test_models_uri_on_a_server_that_is_down_fails_fast(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    uri = f"http://127.0.0.1:{_closed_port()}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    started = time.perf_counter()
    refused(capsys, ["predict", "--model", "models:/gpt1-rte/1", "a film"], uri,
             "unreachable")
    assert time.perf_counter() - started < 10 and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("fault,needle", [("refused", "refused the connection"),
                                          ("silent", "did not answer within 3 s")])
def test_hub_refusing_connections_fails_at_once_in_one_line(make_params, tmp_path, capsys,
                                                            monkeypatch, fault, needle):
    """The hub's host resolves but refuses the connection, or accepts none before the connect
    timeout (simulated: the socket's TimeoutError): one line within seconds, not
    huggingface_hub's retries (each a log line)."""
    from huggingface_hub import constants

    from gpt1 import hf_import

    port = _closed_port()
    if fault == "silent":
        def no_answer(address, timeout=None, *args, **kwargs):
            assert timeout == hf_import.HUB_CONNECT_SECONDS
            raise TimeoutError("timed out")

        monkeypatch.setattr(socket, "create_connection", no_answer)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{port}")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf-home" / "hub"))
    params = tmp_path / "params.yaml"
    params.write_text(json.dumps(make_params().as_dict()))
    out = tmp_path / "out"
    started = time.perf_counter()
    refused(capsys, ["--params", str(params), "import-hf", "openai-gpt", str(out)],
             "openai-gpt", f"127.0.0.1:{port}", needle)
    assert time.perf_counter() - started < 10
    assert not out.exists() and not list(tmp_path.glob(".out*"))
