"""Checkpoints: SIGKILL at any moment then re-run == uninterrupted; tampered, truncated or
foreign-tokenizer inputs give one clear error and execute nothing."""

from __future__ import annotations

import hashlib
import os
import pickle
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpt1 import bpe, checkpoint
from gpt1.errors import Gpt1Error
from gpt1.stages import pretrain as pretrain_stages
from tests.helpers.repo import REPO
from tests.helpers.runs import prepare_run, random_texts

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: one thread (tests/conftest.py)


def _spawn(params_file: Path) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    return subprocess.Popen(
        [sys.executable, "-m", "gpt1", "--params", str(params_file), "pretrain"],
        cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )


def _kill_when(proc: subprocess.Popen, ready, timeout: float = 60.0) -> bool:
    """SIGKILL proc as soon as ready() holds; False if it finished first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ready():
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            return True
        if proc.poll() is not None:
            return False
        time.sleep(0.0005)
    proc.kill()
    raise AssertionError("run neither reached the kill point nor finished")


@pytest.mark.slow
def test_sigkill_anywhere_then_rerun_is_bit_identical(tmp_path):
    """Kills mid-training and mid-checkpoint-write, each followed by a re-run."""
    _, ref = prepare_run(tmp_path, "ref", {})
    pretrain_stages.pretrain(ref)
    params_file, run = prepare_run(tmp_path, "killed", {})
    run_dir = checkpoint.pretrain_dir(run, "transformer")
    ckpts = run_dir / checkpoint.CKPT_DIR

    def mid_write() -> bool:  # a checkpoint directory being written (atomic temp dir)
        return ckpts.is_dir() and any(p.name.endswith(".tmp") for p in os.scandir(ckpts))

    def after(step: int):
        return lambda: (ckpts / f"step_{step:08d}").is_dir()

    # 1: mid-training, after the first checkpoint
    assert _kill_when(_spawn(params_file), after(8))
    # 2: inside a checkpoint write (a temp directory exists); retried: the window is short
    hit = False
    for _ in range(4):
        proc = _spawn(params_file)
        if _kill_when(proc, mid_write):
            hit = any(p.name.endswith(".tmp") for p in os.scandir(ckpts))
            if hit:
                break
        else:
            assert proc.returncode == 0, proc.stderr.read().decode()
            (run_dir / checkpoint.MODEL_FILE).unlink()  # finished: rewind for another try
            for d in checkpoint._step_dirs(run_dir):
                __import__("shutil").rmtree(d)
    assert hit, "never caught a checkpoint write in progress"
    # 3: resume in a subprocess to the end
    proc = _spawn(params_file)
    assert proc.wait(timeout=120) == 0, proc.stderr.read().decode()
    ref_dir = checkpoint.pretrain_dir(ref, "transformer")
    final = checkpoint.MODEL_FILE
    assert (run_dir / final).read_bytes() == (ref_dir / final).read_bytes()
    for zs in sorted((ref_dir / checkpoint.ZEROSHOT_DIR).iterdir()):
        assert (run_dir / checkpoint.ZEROSHOT_DIR / zs.name).read_bytes() == zs.read_bytes()
    assert not list(ckpts.glob(".*.tmp"))


class _Payload:
    """Unpickling this would create `marker` (proves nothing is executed)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


@pytest.fixture
def finished(tmp_path):
    _, params = prepare_run(tmp_path, "run", {"pretrain": {"max_tokens": 16 * 4 * 32}})
    pretrain_stages.pretrain(params)
    return params


def _ckpt_file(params, name: str) -> Path:
    return checkpoint.latest_checkpoint(checkpoint.pretrain_dir(params, "transformer")) / name


@pytest.mark.parametrize("damage", ["flip", "truncate"])
@pytest.mark.parametrize("name", ["model.safetensors", "optimizer.safetensors", "rng.safetensors"])
def test_damaged_checkpoint_is_refused_on_resume(finished, name, damage):
    path = _ckpt_file(finished, name)
    data = bytearray(path.read_bytes())
    if damage == "flip":
        data[len(data) // 2] ^= 0xFF
    else:
        data = data[: len(data) // 2]
    path.write_bytes(bytes(data))
    (checkpoint.pretrain_dir(finished, "transformer") / "model.safetensors").unlink()
    with pytest.raises(Gpt1Error, match=rf"{name}: sha256 does not match"):
        pretrain_stages.pretrain(finished)


def test_edited_state_json_is_refused(finished):
    path = _ckpt_file(finished, checkpoint.STATE_FILE)
    path.write_text(path.read_text().replace('"step": 16', '"step": 15'))
    with pytest.raises(Gpt1Error, match="state.json: content does not match its digest"):
        pretrain_stages.pretrain(finished)
    path.write_text(path.read_text()[:100])
    with pytest.raises(Gpt1Error, match="state.json: not valid JSON"):
        pretrain_stages.pretrain(finished)


def test_pickle_payload_is_never_executed(finished, tmp_path):
    """Even with hashes recomputed by an attacker, a pickle is not a safetensors file."""
    marker = tmp_path / "pwned"
    run_dir = checkpoint.pretrain_dir(finished, "transformer")
    payload = pickle.dumps({"w": _Payload(marker)})
    (run_dir / checkpoint.MODEL_FILE).write_bytes(payload)
    meta = checkpoint.read_model_meta(run_dir)
    meta["files"][checkpoint.MODEL_FILE] = checkpoint._sha256(payload)
    checkpoint._write_json_with_digest(run_dir / checkpoint.MODEL_META, meta)
    with pytest.raises(Gpt1Error, match="model.safetensors: not a valid safetensors file"):
        checkpoint.load_model(run_dir, meta["tokenizer_hash"])
    assert not marker.exists()


def test_final_model_refuses_tampering_and_other_tokenizer(finished):
    run_dir = checkpoint.pretrain_dir(finished, "transformer")
    meta = checkpoint.read_model_meta(run_dir)
    model, _ = checkpoint.load_model(run_dir, meta["tokenizer_hash"])
    assert not model.training
    with pytest.raises(Gpt1Error, match="model.json: trained with tokenizer"):
        checkpoint.load_model(run_dir, "0" * 64)
    path = run_dir / checkpoint.MODEL_FILE
    path.write_bytes(path.read_bytes()[:-10])
    with pytest.raises(Gpt1Error, match="model.safetensors: sha256 does not match"):
        checkpoint.load_model(run_dir, meta["tokenizer_hash"])


def test_shards_from_another_tokenizer_are_refused(tmp_path):
    _, params = prepare_run(tmp_path, "run", {})
    bpe.train_bpe(random_texts(8, seed=99), params.bpe, params.paths.tokenizer)  # a new tokenizer
    with pytest.raises(Gpt1Error, match="index.json: shards were written with tokenizer"):
        pretrain_stages.pretrain(params)
    assert not checkpoint.pretrain_dir(params, "transformer").exists()


def test_checkpoint_files_are_the_bytes_safetensors_writes(tmp_path, tiny_params):
    """The streamed writer (no 1.4 GB bytes object holding the interpreter lock) writes what
    safetensors.torch.save makes, for a training state with every dtype a checkpoint holds
    (fp32 weights and moments, bf16, int64, uint8 RNG states, 0-d and empty tensors)."""
    import torch
    from safetensors.torch import save

    from gpt1.model import GPT
    from gpt1.optim import build_optimizer
    from gpt1.pretraining import CausalLM

    torch.manual_seed(0)
    model = CausalLM(GPT(tiny_params.model, 50))
    opt = build_optimizer(model, 1e-3, (0.9, 0.999), 1e-8, 0.01)
    model(torch.randint(0, 50, (2, 9))).backward()
    opt.step()
    tensors, groups = checkpoint.training_state(model, opt)
    tensors["extra.safetensors"] = {"b": torch.ones(3, dtype=torch.bfloat16),
                                    "i": torch.tensor(7), "empty": torch.zeros(0),
                                    "h.10.w": torch.randn(2), "h.2.w": torch.randn(2)}
    dest = checkpoint.write_checkpoint(tmp_path, 3, tensors, groups, {})
    files = checkpoint.read_checkpoint_state(dest)["files"]
    for name, group in tensors.items():
        blob = save({k: v.detach().contiguous() for k, v in group.items()})
        assert (dest / name).read_bytes() == blob, name
        assert files[name] == hashlib.sha256(blob).hexdigest()
    assert checkpoint.save_weights(tmp_path / "w.safetensors", tensors["model.safetensors"]) == (
        hashlib.sha256((dest / "model.safetensors").read_bytes()).hexdigest())
