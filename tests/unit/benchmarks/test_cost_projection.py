"""benchmarks/cost_projection.py: hours on N GPUs for every pre-training and fine-tuning run,
at the MFU the newest GPU-check results file measured, else an assumed one said to be so."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import cost_projection  # benchmarks/ is on the path: pyproject.toml, [tool.pytest.ini_options]
import pytest

from gpt1.config import load_params
from tests.helpers.repo import REPO


def test_fanout_is_the_total_over_the_gpus_or_the_longest_run():
    runs = {"a": 3600.0, "b": 3600.0, "c": 7200.0}
    assert cost_projection.fanout_hours(runs, 2, 1.0) == pytest.approx(7200 / 3600)
    assert cost_projection.fanout_hours(runs, 4, 1.0) == pytest.approx(2.0)  # longest run
    assert cost_projection.fanout_hours(runs, 1, 2.0) == pytest.approx(14400 / 2 / 3600)


def test_every_finetuning_run_of_the_paper_preset_is_counted_lr_pilots_included():
    params = load_params(REPO / "configs" / "paper.yaml")
    rows = {t: 1000 for t in {*params.finetune.tasks, *params.ablations.tasks,
                              *params.layers.tasks}}
    runs = cost_projection.finetune_runs(params, rows)
    abl, pilot = params.ablations, params.ablations.pilot
    cells = (len(params.finetune.tasks) + len(abl.variants) * len(abl.tasks)
             + len(params.layers.tasks) * len(params.layers.layers_transferred))
    pilots = len(pilot.variants) * len(abl.tasks) * len(pilot.lr_grid) * len(pilot.warmup_grid)
    assert pilots == 96  # scratch and lstm x 8 tasks x 3 lr x 2 warm-ups (the recipe among them)
    assert len(runs) == cells * len(params.finetune.seeds) * len(params.pretrain.seeds) + pilots
    assert runs["finetune@rte-1234/seed0"] == (1000 * params.finetune.epochs * 512, "transformer")
    assert runs["finetune@race-1234/seed0"][0] == 4 * 1000 * params.finetune.epochs * 512
    assert runs["finetune@stsb-1234/seed1"][0] == 2 * 1000 * params.finetune.epochs * 512
    assert runs["ablation@lstm-rte-1234/seed2"][1] == "lstm"
    # a pilot trains one seed on the pool less its carved dev split
    assert runs["lr_pilot@scratch-rte/lr0.001_w0.1"] == (
        (1000 - pilot.dev_examples) * params.finetune.epochs * 512, "transformer")
    assert not any(name.startswith("lr_pilot@no_aux") for name in runs)  # not piloted


def write_gpu_results(folder: Path, name: str, device: str, lines: list[str]) -> None:
    body = "\n".join(lines)
    (folder / name).write_text(f"# gpu\n\n- hardware: {device}; AMD EPYC, 16 cores usable\n"
                               f"- date: x (UTC)\n- command: `python gpu_check.py`\n\n"
                               f"```\n{body}\n```\n")


def test_mfu_comes_from_the_newest_gpu_results_file_of_that_device(tmp_path):
    assert cost_projection.measured_mfu(tmp_path, "H100") is None  # none: unmeasured
    h100 = "NVIDIA H100 80GB HBM3"
    write_gpu_results(tmp_path, "gpu_nvidia-h100_2026-12-01.md", h100,
                      ["paper shape, compiled: 1 tokens/s, MFU 30.0% of peak, 35% of ceiling"])
    write_gpu_results(tmp_path, "gpu_nvidia-h100_2026-12-02.md", h100, [
        "paper shape, compiled, padded: 1 tokens/s, MFU 48.5% of peak, 55% of the ceiling",
        "paper shape, eager: 1 tokens/s, MFU 31.0% of peak, 35% of the ceiling"])
    write_gpu_results(tmp_path, "gpu_nvidia-a100_2026-12-09.md", "NVIDIA A100-SXM4-80GB",
                      ["paper shape: 1 tokens/s, MFU 60.0% of peak"])
    mfu, path, line = cost_projection.measured_mfu(tmp_path, "H100")
    assert (mfu, path.name) == (0.485, "gpu_nvidia-h100_2026-12-02.md")  # newest, best line
    assert line.startswith("paper shape, compiled, padded")
    write_gpu_results(tmp_path, "gpu_nvidia-h100_2026-12-02-2.md", h100, [
        "paper shape, compiled: 1 tokens/s, MFU 50.0% of peak",
        "pre-training loop, 20 steps: 1 tokens/s, MFU 44.0% of peak"])
    mfu, path, _ = cost_projection.measured_mfu(tmp_path, "H100")
    assert (mfu, path.name) == (0.44, "gpu_nvidia-h100_2026-12-02-2.md")  # the real loop's
    assert cost_projection.measured_mfu(tmp_path, "A100")[0] == 0.6
    write_gpu_results(tmp_path, "gpu_nvidia-h100_2026-12-02-3.md", h100, [
        "paper preset, micro_batch_seqs auto on 1 GPU(s): 64 a GPU: 1 tokens/s, MFU 39.0% of peak",
        "paper preset, micro_batch_seqs auto on 8 GPU(s): 8 a GPU: 1 tokens/s, MFU 12.0% of peak",
        "real pre-training loop, 20 updates: 1 tokens/s, MFU 11.0% of peak"])
    assert cost_projection.measured_mfu(tmp_path, "H100")[0] == 0.39  # the split for 1 GPU
    assert cost_projection.measured_mfu(tmp_path, "H100", 8)[0] == 0.12  # a GPU's share of 8
    assert cost_projection.measured_mfu(tmp_path, "H100", 4)[0] == 0.11  # no split: the loop


def test_the_command_prints_hours_for_n_gpus(tmp_path, monkeypatch, capsys):
    params = load_params(REPO / "configs" / "paper.yaml")
    for task in {*params.finetune.tasks, *params.ablations.tasks, *params.layers.tasks}:
        (tmp_path / f"prepare_task_{task}.json").write_text(json.dumps({"rows": {"train": 300}}))
    results = tmp_path / "results"
    results.mkdir()

    args = ["--gpus", "8", "--corpus-tokens", "1000000000", "--metrics-dir", str(tmp_path),
            "--results-dir", str(results)]
    script = str(REPO / "benchmarks" / "cost_projection.py")
    # from another folder: the default params are the repository's own
    done = subprocess.run([sys.executable, script, *args], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120, check=True)
    lines = done.stdout.splitlines()
    assert lines[0].startswith(f"{REPO / 'configs' / 'paper.yaml'}: ")
    assert lines[1] == ("corpus: 1,000,000,000 training tokens an epoch, assumed "
                        "(--corpus-tokens); the mirror's: no shard_corpus record in .")
    assert lines[2].startswith("MFU 40.0%, assumed: unmeasured, no GPU-check results file")
    assert lines[4] == "LSTM pre-training MFU 40.0%, unmeasured: Transformer MFU assumed"
    assert lines[5].startswith("pre-training on 8 x H100 (DDP, linear scaling assumed): "
                               "1 seed(s) x (Transformer 6.6 h + LSTM ")
    assert lines[6].startswith("fine-tuning, one GPU a run: Transformer 396 TFLOP/s (MFU "
                               "40.0%), assumed: the pre-training MFU (assumed: unmeasured")
    assert lines[7].endswith("unmeasured: the Transformer's fine-tuning rate assumed")
    assert lines[8].startswith("fine-tuning fan-out: 282 runs (36 finetune, 72 ablation, "
                               "78 transfer_layers, 96 lr_pilot), ")
    assert lines[9].startswith("in all: ") and lines[9].endswith(" GPU-hours")
    (tmp_path / "shard_corpus.json").write_text(json.dumps({"tokens": {"train": 16_739_929}}))
    write_gpu_results(results, "gpu_nvidia-h100_2026-12-02.md", "NVIDIA H100 80GB HBM3", [
        "paper preset, micro_batch_seqs auto on 1 GPU(s): 64 a GPU: 1 tokens/s, MFU 39.0% of "
        "peak",
        "paper preset, micro_batch_seqs auto on 8 GPU(s): 8 a GPU: 1 tokens/s, MFU 12.0% of peak",
        "LSTM baseline (configs/paper.yaml lstm), micro-batch 64 x 1, compiled, bf16: 1 tokens/s"
        " (median of 5 windows of 20 updates, 1-1), MFU 30.0% of peak, 40% of the ceiling",
        "LSTM baseline (configs/paper.yaml lstm), micro-batch 8 x 1, compiled, bf16: 1 tokens/s"
        " (median of 5 windows of 20 updates, 1-1), MFU 6.0% of peak, 8% of the ceiling"])
    monkeypatch.chdir(REPO)
    monkeypatch.setattr(sys, "argv", ["cost_projection.py", *args])
    cost_projection.main()  # in this process: one subprocess start is enough
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].endswith("the mirror's: 16,739,929 (shard_corpus.json), 1.7% of it")
    assert lines[2].startswith("MFU 12.0%, measured: gpu_nvidia-h100_2026-12-02.md: paper "
                               "preset, micro_batch_seqs auto on 8 GPU(s)")
    assert lines[4].startswith("LSTM pre-training MFU 6.0%, measured: "
                               "gpu_nvidia-h100_2026-12-02.md: LSTM baseline")  # 8 a GPU
    # fine-tuning runs one GPU each: the 1-GPU split's MFU, not the 8-GPU share's
    assert lines[6].startswith("fine-tuning, one GPU a run: Transformer 386 TFLOP/s (MFU "
                               "39.0%), measured: gpu_nvidia-h100_2026-12-02.md: paper preset, "
                               "micro_batch_seqs auto on 1 GPU(s)")
    assert lines[7].startswith("fine-tuning, one GPU a run: LSTM 297 TFLOP/s, measured: ")
    assert "micro-batch 64 x 1" in lines[7]


def test_finetuning_is_priced_at_the_measured_one_gpu_update():
    """The full-context (RACE-shaped) fine-tuning update of the GPU check, in its 2026-11-26
    format (milliseconds) and the windowed one (median tokens/s), before any MFU line."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        assert cost_projection.measured_finetune_rate(folder, "H200") is None
        write_gpu_results(folder, "gpu_nvidia-h200_2026-11-26.md", "NVIDIA H200", [
            "fine-tuning RACE-shaped update (32 x 4 x 512 tokens, aux LM loss chunked, "
            "compiled, bf16): 181 ms, 177 examples/s; peak memory 25.4 GiB"])
        rate, path, line = cost_projection.measured_finetune_rate(folder, "H200")
        assert rate == pytest.approx(32 * 4 * 512 / 0.181) and line.endswith("25.4 GiB")
        write_gpu_results(folder, "gpu_nvidia-h200_2026-11-27.md", "NVIDIA H200", [
            "fine-tuning MNLI-shaped update (32 x 1 x 128 tokens, aux LM loss chunked, "
            "compiled, bf16): 150,000 tokens/s (median of 5 windows of 20 updates, 1-2)",
            "fine-tuning RACE-shaped update (32 x 4 x 512 tokens, aux LM loss chunked, "
            "compiled, bf16): 380,123 tokens/s (median of 5 windows of 20 updates, 1-2)"])
        assert cost_projection.measured_finetune_rate(folder, "H200")[0] == 380_123.0


@pytest.mark.slow
def test_a_missing_params_file_or_stage_record_is_one_line(tmp_path):
    script = str(REPO / "benchmarks" / "cost_projection.py")
    for args, said in ((["--params", "nope.yaml"], "nope.yaml: params file not found"),
                       (["--metrics-dir", str(tmp_path)], "shard_corpus.json")):
        done = subprocess.run([sys.executable, script, *args], cwd=tmp_path,
                              capture_output=True, text=True, timeout=120, check=False)
        assert done.returncode != 0 and done.stdout == ""
        assert done.stderr.startswith("cost_projection: ") and said in done.stderr
        assert len(done.stderr.splitlines()) == 1, done.stderr
