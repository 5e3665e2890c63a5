"""Head, losses and loop pieces: symmetric similarity, shared choice dropout, LM masking,
per-task overrides, layer transfer, any body (GPT or LSTM)."""

from __future__ import annotations

import functools

import pandas as pd
import pytest
import torch

from gpt1.finetune import body_factory, collate, resolve_hparams
from gpt1.heads import TaskHead, TaskModel
from gpt1.lstm import LSTMLM
from gpt1.model import GPT
from gpt1.task_losses import lm_loss, make_loss_fn, new_tally, read_tally
from gpt1.tasks.formats import Specials, Truncation, layout
from gpt1.tasks.load import cap_table
from gpt1.tasks.registry import TASKS

V = 40
SP = Specials(start=V - 3, delimiter=V - 2, classify=V - 1)
_body = functools.partial(body_factory, n_special=3)


def test_similarity_is_symmetric(tiny_params) -> None:
    """Swapping the two sentences gives the same output."""
    torch.manual_seed(0)
    spec = TASKS["stsb"]
    model = TaskModel(GPT(tiny_params.model, V), spec, 0.1, 0.02).eval()
    tr = Truncation(n_ctx=tiny_params.model.n_positions, rule="longest_first", keep="head")
    a, b = [1, 2, 3, 4, 5], [9, 8, 7]
    ab, _ = layout(spec, a, b, [], SP, tr)
    ba, _ = layout(spec, b, a, [], SP, tr)
    out_ab, _ = model(*collate([ab], torch.device("cpu")))
    out_ba, _ = model(*collate([ba], torch.device("cpu")))
    assert out_ab.shape == (1,)
    assert torch.equal(out_ab, out_ba)
    one_order = TaskModel(GPT(tiny_params.model, V), TASKS["mrpc"], 0.1, 0.02).eval()
    x, _ = one_order(*collate([ab], torch.device("cpu")))
    y, _ = one_order(*collate([[ab[0], ab[0]]], torch.device("cpu")))
    assert not torch.allclose(x, y)  # both orders really reach the head


def test_choice_dropout_mask_is_shared_across_answers() -> None:
    torch.manual_seed(0)
    head = TaskHead(TASKS["race"], 16, 0.5, 0.02).train()
    h = torch.randn(3, 1, 16).expand(3, 4, 16)  # the same state for the 4 answers
    out = head(h)  # (B, K)
    assert out.shape == (3, 4)
    assert torch.allclose(out, out[:, :1].expand_as(out))  # same mask -> same score
    assert not torch.allclose(out[0], out[1])
    assert TaskHead(TASKS["snli"], 16, 0.1, 0.02)(torch.randn(2, 1, 16)).shape == (2, 3)


def test_lm_loss_ignores_padding_and_averages_per_sequence(tiny_params) -> None:
    torch.manual_seed(0)
    model = TaskModel(GPT(tiny_params.model, V), TASKS["sst2"], 0.0, 0.02).eval()
    short, long = [[SP.start, 1, 2, SP.classify]], [[SP.start, *range(3, 20), SP.classify]]
    dev = torch.device("cpu")
    with torch.no_grad():
        parts = []
        for ex in (short, long):
            idx, lengths = collate([ex], dev)
            _, h = model(idx, lengths)
            parts.append(lm_loss(model, h, idx, lengths))
        idx, lengths = collate([short, long], dev)
        assert idx.shape == (2, 1, 19) and lengths.tolist() == [[4], [19]]
        _, h = model(idx, lengths)
        both = lm_loss(model, h, idx, lengths)
    # Per-sequence means, then the batch mean: the short sequence weighs as much as the long.
    assert torch.allclose(both, (parts[0] + parts[1]) / 2, atol=1e-5)


def test_total_loss_adds_lambda_times_lm(tiny_params) -> None:
    torch.manual_seed(0)
    spec = TASKS["sst2"]
    model = TaskModel(GPT(tiny_params.model, V), spec, 0.0, 0.02).eval()
    idx, lengths = collate([[[SP.start, 1, 2, 3, SP.classify]]], torch.device("cpu"))
    batch = (idx, lengths, torch.tensor([1]))
    with torch.no_grad():
        clf = make_loss_fn(spec, 0.0)(model, batch)
        total = make_loss_fn(spec, 0.5)(model, batch)
        _, h = model(idx, lengths)
        lm = lm_loss(model, h, idx, lengths)
    assert torch.allclose(total, clf + 0.5 * lm)


def test_the_tally_keeps_accuracy_and_the_two_losses_apart(tiny_params) -> None:
    torch.manual_seed(0)
    spec = TASKS["sst2"]
    model = TaskModel(GPT(tiny_params.model, V), spec, 0.0, 0.02).eval()
    idx, lengths = collate([[[SP.start, 1, 2, 3, SP.classify]], [[SP.start, 4, SP.classify]]],
                           torch.device("cpu"))
    labels = torch.tensor([1, 0])
    tally = new_tally()
    with torch.no_grad():
        total = make_loss_fn(spec, 0.5, tally)(model, (idx, lengths, labels))
        out, h = model(idx, lengths)
        lm = lm_loss(model, h, idx, lengths)
    read = read_tally(spec, tally, 0.5)
    clf = torch.nn.functional.cross_entropy(out, labels)
    assert read["train_clf_loss"] == pytest.approx(float(clf), rel=1e-5)
    assert read["train_lm_loss"] == pytest.approx(float(lm), rel=1e-5)
    assert float(total) == pytest.approx(float(clf + 0.5 * lm), rel=1e-5)
    assert read["train_acc"] == float((out.argmax(-1) == labels).float().mean())
    assert all(float(v) == 0 for v in tally.values())  # zeroed for the next epoch
    assert read_tally(spec, tally, 0.0)["train_lm_loss"] is None  # no aux LM: not computed


def test_overrides_per_task(make_params) -> None:
    params = make_params({"finetune": {"overrides": {"race": {"lr": 1e-5, "batch_size": 2,
                                                              "max_eval_examples": 7}}}})
    race, sst2 = resolve_hparams(params, "race"), resolve_hparams(params, "sst2")
    assert (race.lr, race.batch_size, race.max_eval_examples) == (1e-5, 2, 7)
    assert (sst2.lr, sst2.batch_size) == (params.finetune.lr, params.finetune.batch_size)
    assert race.epochs == params.finetune.epochs and race.grad_clip == params.pretrain.grad_clip


def test_layers_transferred_copies_embeddings_and_first_blocks(tiny_params) -> None:
    torch.manual_seed(123)
    pre = GPT(tiny_params.model, V)
    body = _body("pretrained", 1, pre, lambda: GPT(tiny_params.model, V))(0)
    s, p = body.state_dict(), pre.state_dict()
    assert torch.equal(s["tokens_embed.weight"][:-3], p["tokens_embed.weight"][:-3])
    assert torch.equal(s["h.0.attn.c_attn.weight"], p["h.0.attn.c_attn.weight"])
    assert not torch.equal(s["h.1.attn.c_attn.weight"], p["h.1.attn.c_attn.weight"])
    full = _body("pretrained", None, pre, lambda: GPT(tiny_params.model, V))(0)
    assert all(torch.equal(v, p[k]) for k, v in full.state_dict().items()
               if k != "tokens_embed.weight")
    assert torch.equal(full.tokens_embed.weight[:-3], pre.tokens_embed.weight[:-3])
    scratch = _body("scratch", None, pre, lambda: GPT(tiny_params.model, V))(0)
    assert not torch.equal(scratch.state_dict()["tokens_embed.weight"], p["tokens_embed.weight"])
    again = _body("scratch", None, pre, lambda: GPT(tiny_params.model, V))(0)
    assert torch.equal(again.state_dict()["h.1.mlp.c_fc.weight"],
                       scratch.state_dict()["h.1.mlp.c_fc.weight"])  # seeded


def test_lstm_body_fits_the_same_head_and_losses(tiny_params) -> None:
    torch.manual_seed(0)
    spec = TASKS["race"]
    pre = LSTMLM(tiny_params.lstm, V)
    body = _body("pretrained", None, pre, lambda: LSTMLM(tiny_params.lstm, V))(0)
    model = TaskModel(body, spec, 0.1, 0.02).train()
    ex = [[SP.start, 1, 2, SP.delimiter, k, SP.classify] for k in (5, 6, 7, 8)]
    idx, lengths = collate([ex, ex], torch.device("cpu"))
    loss = make_loss_fn(spec, 0.5)(model, (idx, lengths, torch.tensor([0, 3])))
    loss.backward()
    assert loss.item() > 0 and body.tokens_embed.weight.grad is not None
    with pytest.raises(ValueError, match="Transformer only"):
        _body("pretrained", 2, pre, lambda: LSTMLM(tiny_params.lstm, V))(0)


def test_cap_is_a_seeded_subset_in_file_order() -> None:
    df = pd.DataFrame({"id": [str(i) for i in range(50)], "label": range(50)})
    a, b = cap_table(df, 10, 3), cap_table(df, 10, 3)
    assert a["id"].tolist() == b["id"].tolist() and len(a) == 10
    assert a["label"].is_monotonic_increasing
    assert cap_table(df, 10, 4)["id"].tolist() != a["id"].tolist()
    assert cap_table(df, None, 3) is df and cap_table(df, 99, 3) is df


# ------------------------------------------------------------------ the two DVC stages


@pytest.mark.slow
def test_stages_prepare_then_finetune_write_metrics(make_params, tmp_path) -> None:
    import json

    from gpt1 import bpe
    from gpt1.data.clean import standardize_texts
    from gpt1.records import read_metrics
    from gpt1.stages import data as data_stages
    from gpt1.stages import finetune as finetune_stages
    from tests.helpers.task_mirror import write_mirror

    write_mirror(tmp_path / "mirror", rows=40)
    params = make_params({"finetune": {"init": "scratch", "epochs": 2, "seeds": [0, 1],
                                       "max_train_examples": 24, "max_eval_examples": 12},
                          "tasks": {"dev_examples": {"story_cloze": 6}}, "bpe": {"n_merges": 20}})
    rows = data_stages.prepare_task(params, "mrpc")
    assert rows["rows"] == {"train": 36, "dev": 4, "test": 40} and rows["checks_passed"]
    tables = (tmp_path / "data/tasks/mrpc")
    assert sorted(p.name for p in tables.iterdir()) == [
        "checks.json", "dev.parquet", "test.parquet", "train.parquet"]
    texts = [" ".join(pd.read_parquet(tables / "train.parquet")["text_a"])] * 3
    bpe.train_bpe(standardize_texts(texts), params.bpe, params.paths.tokenizer)
    metrics = finetune_stages.finetune(params, "mrpc")
    assert json.loads((tmp_path / "reports/metrics/finetune_mrpc_p1234.json").read_text()) == {
        "scores": metrics["scores"]}  # scores only; the rest is in the sidecar
    saved = read_metrics(tmp_path / "reports/metrics")["finetune_mrpc_p1234"]
    assert saved["pretrain_seed"] == 1234 and saved["select"] == "final"
    assert saved["lr"] == params.finetune.lr and saved["warmup_steps"] == 1  # 0.2 % rounds to 0
    assert saved["kept_epoch"] == [2, 2] and set(saved["predictions"]) == {"test"}
    assert saved["task"] == "mrpc" and saved["variant"] == "full" and saved["metric"] == "f1"
    assert set(saved["scores"]) == {"f1", "acc"} and len(saved["scores"]["f1"]["per_seed"]) == 2
    assert 0.0 <= saved["scores"]["acc"]["mean"] <= 1.0
    assert saved["n_train"] == 24 and saved["n_eval"] == 12 and saved["config_hash"]
    assert "seeded random 12 of 40" in saved["eval_split"]
    assert "last epoch scored (no selection)" in saved["eval_split"]
    assert "seeded random 24 of 36 per fine-tuning seed" in saved["train_split"]
    assert metrics["scores"] == saved["scores"]
    assert len(saved["train_history"]) == len(saved["seeds"])  # per seed, per epoch
    assert all({"train_acc", "train_clf_loss", "train_lm_loss"} <= set(epoch)
               for run in saved["train_history"] for epoch in run)
    assert saved["backend"] == "cpu_fused"  # model.backend: auto, on CPU with a C compiler
    preds = pd.read_parquet(tmp_path / "data/finetuned/p1234/mrpc/predictions_seed1.parquet")
    assert len(preds) == 12 and set(preds.columns) == {"id", "group", "label", "prediction",
                                                     "probability"}


def test_cli_bad_task_file_is_one_line_exit_2(make_params, tmp_path, capsys) -> None:
    import yaml

    from gpt1.__main__ import main
    from tests.helpers.params import make_params_dict
    from tests.helpers.task_mirror import write_mirror

    write_mirror(tmp_path / "mirror")
    bad = tmp_path / "mirror/tasks/SST-2/dev.tsv"
    bad.write_text(bad.read_text().replace("\t1\n", "\tpositive\n", 1))
    cfg = tmp_path / "params.yaml"
    cfg.write_text(yaml.safe_dump(make_params_dict(tmp_path)))
    assert main(["--params", str(cfg), "prepare_task", "--task", "sst2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"gpt1 prepare_task: error: {bad}: line 3: label 'positive' not in "
                   "['0', '1']"]
    assert not (tmp_path / "data/tasks/sst2").exists()  # nothing half-written


def test_pilot_ranks_learning_then_score_then_log_loss_then_the_larger_lr() -> None:
    import numpy as np

    from gpt1.finetune import log_loss, pilot_key

    spec = TASKS["sst2"]
    constant, mixed = np.zeros(100, dtype=int), np.arange(100) % 2
    keys = {
        "constant, best acc": pilot_key(spec, {"acc": 0.6}, constant, 0.5, 1e-3),
        "learns, low loss": pilot_key(spec, {"acc": 0.55}, mixed, 0.60, 6.25e-5),
        "learns, high loss": pilot_key(spec, {"acc": 0.55}, mixed, 0.70, 5e-4),
        "learns, tie, larger lr": pilot_key(spec, {"acc": 0.55}, mixed, 0.60, 2.5e-4),
    }
    assert max(keys, key=keys.__getitem__) == "learns, tie, larger lr"
    assert sorted(keys, key=keys.__getitem__)[0] == "constant, best acc"
    out = np.log(np.array([[0.9, 0.1], [0.2, 0.8]], dtype=np.float32))
    assert log_loss(spec, out, np.array([0, 1])) == pytest.approx(
        -(np.log(0.9) + np.log(0.8)) / 2, rel=1e-5)
    assert log_loss(TASKS["stsb"], np.zeros(2), np.zeros(2)) is None


_READ_ONLY = """
import warnings
import numpy as np
from gpt1.finetune import log_loss
from gpt1.tasks.registry import TASKS
out, labels = np.zeros((2, 2), dtype=np.float32), np.array([0, 1])
out.setflags(write=False)
labels.setflags(write=False)  # as pandas / arrow hand a table's columns
warnings.simplefilter("error")
print(log_loss(TASKS["sst2"], out, labels))
"""


def test_log_loss_of_read_only_arrays_warns_nothing() -> None:
    """A fresh process (torch warns once per process): no "NumPy array is not writable"."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", _READ_ONLY], capture_output=True, text=True)
    assert proc.returncode == 0 and not proc.stderr, proc.stderr[-1000:]
    assert abs(float(proc.stdout) - 0.6931) < 1e-3
