"""DDP with 2 CPU processes (gloo) and half the accumulation == 1 process, within 1e-5; the
host syncs of a DDP step: none between the loop's sync points (log, eval, checkpoint).

device: cpu throughout: these are the gloo paths, and on a GPU host LOCAL_RANK=1 would name a
second GPU that a one-GPU machine does not have."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp

from gpt1.config import parse_params
from tests.helpers.counters import count_updates, patch_host_reads
from tests.helpers.params import make_params_dict
from tests.helpers.streams import VOCAB, token_stream

OVERRIDES = {"device": "cpu", "pretrain": {"max_tokens": 12 * 4 * 32, "log_interval_steps": 1,
                                           "eval_interval_steps": 6, "precision": "fp32"}}
SPARSE = {"device": "cpu", "pretrain": {"max_tokens": 12 * 4 * 32, "log_interval_steps": 4,
                                        "eval_interval_steps": 6, "checkpoint_interval_steps": 8,
                                        "zero_shot_checkpoints": 1, "precision": "fp32"}}
"""Sync points at updates 4, 6, 8 and 12 only (the one zero-shot checkpoint is the last
update's, which the compute curve needs): the updates between them must not sync."""
NO_DROPOUT = {"resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0}
COMPILED = {**OVERRIDES, "model": NO_DROPOUT,
            "pretrain": {**OVERRIDES["pretrain"], "compile": True}}
"""DDP compiled as the wrapper; no dropout, whose compiled masks differ from eager ones."""
BF16_GRADS = {**OVERRIDES, "pretrain": {**OVERRIDES["pretrain"], "ddp_bf16_grads": True,
                                        "ddp_bucket_mb": 1}}
"""Gradients all-reduced in bf16 (pretrain.ddp_bf16_grads), in small buckets."""
AUTO = {**OVERRIDES, "pretrain": {**OVERRIDES["pretrain"], "micro_batch_seqs": "auto",
                                  "eval_batches": 1}}
"""micro_batch_seqs: auto: each rank probes, the ranks agree on one size (2: a rank's half);
validation on 1 global batch of 4 windows, the 2 micro-batches of 2 of the other runs."""
ZERO1 = {**OVERRIDES, "pretrain": {**OVERRIDES["pretrain"], "zero1": True}}
"""The Adam state sharded over the ranks (pretrain.zero1), checkpoints every 8 updates."""
RUNS = {"plain": OVERRIDES, "sparse": SPARSE, "compiled": COMPILED, "bf16_grads": BF16_GRADS,
        "auto": AUTO, "zero1": ZERO1,
        "eager": {**COMPILED, "pretrain": {**COMPILED["pretrain"], "compile": False}}}


def _count_host_syncs(syncs: list[int]) -> None:
    """Record, for every host read of a tensor (.item, .tolist) and every stop agreement across
    ranks, the number of updates done so far (patched into this process only)."""
    import gpt1.pretraining as loop

    done = count_updates(loop)
    patch_host_reads(lambda: syncs.append(done[0]))
    agree = loop.stop_agreed

    def counted_agree(*args, **kwargs):
        syncs.append(done[0])
        return agree(*args, **kwargs)

    loop.stop_agreed = counted_agree


class CrashError(Exception):
    pass


def _train(run_dir: Path, out: Path, run: str = "plain", crash_after: int | None = None) -> None:
    """One rank of a run; rank 0 writes the per-step losses and val losses to `out`, every rank
    the bytes of Adam state it holds to out.bytes.<rank>, and with SPARSE logging its host
    syncs to out.<rank>. `crash_after`: every rank raises before update crash_after + 1 (as
    a SIGKILL would leave it: the last checkpoint on disk, no final weights); rank 0 then
    writes the losses so far."""
    from gpt1.model import GPT
    from gpt1.pretraining import pretrain

    torch.set_num_threads(1)
    syncs: list[int] = []
    if run == "sparse":
        _count_host_syncs(syncs)
    if crash_after is not None:
        import gpt1.pretraining as loop

        done = count_updates(loop)
        step = loop.train_step

        def crashing_step(*args, **kwargs):
            if done[0] == crash_after:
                raise CrashError
            return step(*args, **kwargs)

        loop.train_step = crashing_step
    params = parse_params(make_params_dict(run_dir.parent, RUNS[run]), "tiny")
    torch.manual_seed(params.seed)
    model = GPT(params.model, VOCAB)
    seen: list[tuple[int, dict]] = []
    train, val = [token_stream(3000, 1), token_stream(2000, 2)], [token_stream(1000, 3)]
    try:
        metrics = pretrain(model, train, val, params, run_dir,
                           {"kind": "transformer", "vocab_size": VOCAB, "tokenizer_hash": "h" * 64,
                            "pretrain_seed": params.seed},
                           1.0, lambda step, m: seen.append((step, m)))
    except CrashError:  # rank 0 writes the losses up to the crash
        metrics = {"world_size": None, "micro_batch_seqs": None, "history": []}
    rank = int(os.environ.get("RANK", "0"))
    if "optimizer_state_bytes" in metrics:
        Path(f"{out}.bytes.{rank}").write_text(str(metrics["optimizer_state_bytes"]))
    if rank == 0:
        losses = [m["loss"] for _, m in seen if "loss" in m]
        out.write_text(json.dumps({"losses": losses, "world": metrics["world_size"],
                                   "micro": metrics["micro_batch_seqs"],
                                   "val": [h["val_loss"] for h in metrics["history"]]}))
    if run == "sparse":
        Path(f"{out}.{os.environ.get('RANK', '0')}").write_text(json.dumps(syncs))


def _rank(rank: int, world: int, port: int, run_dir: Path, out: Path,
          run: str = "plain", crash_after: int | None = None) -> None:
    os.environ.update({"RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(world),
                       "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
    _train(run_dir, out, run, crash_after)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.skipif(not torch.distributed.is_gloo_available(), reason="needs gloo")
def test_two_process_gloo_equals_one_process(tmp_path, monkeypatch):
    """1 rank accumulating 2 micro-batches of 2 == 2 ranks with micro_batch_seqs: auto, whose
    probes agree on 2 sequences a rank (the whole per-rank batch fits)."""
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    single = tmp_path / "single.json"
    _train(tmp_path / "one" / "run", single)  # 1 rank x accumulation 2
    double = tmp_path / "double.json"
    (tmp_path / "two").mkdir()
    mp.spawn(_rank, args=(2, _free_port(), tmp_path / "two" / "run", double, "auto"), nprocs=2)
    a, b = json.loads(single.read_text()), json.loads(double.read_text())
    assert (a["world"], b["world"]) == (1, 2) and (a["micro"], b["micro"]) == (2, 2)
    assert len(a["losses"]) == len(b["losses"]) == 12
    for x, y in zip(a["losses"] + a["val"], b["losses"] + b["val"], strict=True):
        assert abs(x - y) <= 1e-5, (x, y)


@pytest.mark.skipif(not torch.distributed.is_gloo_available(), reason="needs gloo")
@pytest.mark.slow
def test_bf16_gradient_all_reduce_stays_close_to_one_process(tmp_path, monkeypatch):
    """pretrain.ddp_bf16_grads: 2 ranks reducing bf16 gradients (1 MB buckets) follow one fp32
    process within bf16's rounding (2e-3 relative on the loss over 12 updates), and differ from
    it (the hook is really installed)."""
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    _train(tmp_path / "one" / "run", tmp_path / "one.json")
    (tmp_path / "two").mkdir()
    out = tmp_path / "bf16.json"
    mp.spawn(_rank, args=(2, _free_port(), tmp_path / "two" / "run", out, "bf16_grads"),
             nprocs=2)
    a, b = json.loads((tmp_path / "one.json").read_text()), json.loads(out.read_text())
    assert len(a["losses"]) == len(b["losses"]) == 12
    gaps = [abs(x - y) / abs(x) for x, y in zip(a["losses"], b["losses"], strict=True)]
    assert max(gaps) <= 2e-3 and max(gaps) > 1e-7, gaps


@pytest.mark.skipif(not torch.distributed.is_gloo_available(), reason="needs gloo")
@pytest.mark.slow
def test_compiled_ddp_wrapper_equals_one_eager_process(tmp_path, monkeypatch):
    """pretrain.compile under DDP compiles the DDP wrapper (all-reduce overlapping backward):
    2 compiled ranks give the losses of 1 eager process accumulating 2 (<= 1e-5)."""
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    _train(tmp_path / "one" / "run", tmp_path / "eager.json", "eager")
    (tmp_path / "two").mkdir()
    out = tmp_path / "compiled.json"
    mp.spawn(_rank, args=(2, _free_port(), tmp_path / "two" / "run", out, "compiled"), nprocs=2)
    a, b = json.loads((tmp_path / "eager.json").read_text()), json.loads(out.read_text())
    assert len(a["losses"]) == len(b["losses"]) == 12
    for x, y in zip(a["losses"] + a["val"], b["losses"] + b["val"], strict=True):
        assert abs(x - y) <= 1e-5, (x, y)


@pytest.mark.skipif(not torch.distributed.is_gloo_available(), reason="needs gloo")
@pytest.mark.slow
def test_ddp_steps_between_sync_points_do_not_sync_the_host(tmp_path):
    """2 ranks, 12 updates, logging every 4, eval every 6, checkpoints every 8: each rank reads
    the device (.item / .tolist) or agrees on a stop only after updates 4, 6, 8 and 12."""
    out = tmp_path / "syncs.json"
    (tmp_path / "two").mkdir()
    mp.spawn(_rank, args=(2, _free_port(), tmp_path / "two" / "run", out, "sparse"), nprocs=2)
    for rank in (0, 1):
        syncs = json.loads(Path(f"{out}.{rank}").read_text())
        per_step = {done: syncs.count(done) for done in range(1, 13)}
        assert {d for d, n in per_step.items() if n} == {4, 6, 8, 12}, per_step
        assert per_step[4] >= 3  # loss, grad norm, stop agreement: the counter sees them


@pytest.mark.skipif(not torch.distributed.is_gloo_available(), reason="needs gloo")
@pytest.mark.slow
def test_zero1_equals_one_process_and_its_checkpoint_resumes_anywhere(tmp_path, monkeypatch):
    """pretrain.zero1 on 2 ranks, killed after update 10: its 10 losses equal one unsharded
    process's within 1e-5 (weight decay, clipping and the lr schedule unchanged), and its
    update-8 checkpoint holds the whole Adam state, consolidated on rank 0, with the keys and
    shapes an unsharded run writes. It resumes at update 8 to the final weights of a run never
    stopped (<= 1e-5) on 2 zero1 ranks, each holding part of the Adam state (together all of
    it), and on 1 process with zero1 off."""
    import shutil

    from gpt1 import checkpoint

    monkeypatch.delenv("WORLD_SIZE", raising=False)
    ref = tmp_path / "ref.json"
    _train(tmp_path / "ref" / "run", ref)  # 1 process, zero1 off, never stopped
    killed = tmp_path / "killed.json"
    (tmp_path / "two").mkdir()
    mp.spawn(_rank, args=(2, _free_port(), tmp_path / "two" / "run", killed, "zero1", 10),
             nprocs=2)
    expected = json.loads(ref.read_text())["losses"]
    losses = json.loads(killed.read_text())["losses"]
    assert len(expected) == 12 and len(losses) == 10
    for x, y in zip(expected, losses, strict=False):
        assert abs(x - y) <= 1e-5, (x, y)
    saved = checkpoint.latest_checkpoint(tmp_path / "two" / "run")
    whole = checkpoint.latest_checkpoint(tmp_path / "ref" / "run")
    assert saved is not None and whole is not None and saved.name == "step_00000008"
    assert not (tmp_path / "two" / "run" / checkpoint.MODEL_FILE).exists()
    mine, theirs = _load(saved / "optimizer.safetensors"), _load(whole / "optimizer.safetensors")
    assert {k: v.shape for k, v in mine.items()} == {k: v.shape for k, v in theirs.items()}
    groups = [checkpoint.read_checkpoint_state(c)["optimizer_groups"] for c in (saved, whole)]
    assert [{k: v for k, v in g.items() if k != "lr"} for g in groups[0]] == [
        {k: v for k, v in g.items() if k != "lr"} for g in groups[1]]
    shutil.copytree(tmp_path / "two", tmp_path / "one")
    two = tmp_path / "two.json"
    mp.spawn(_rank, args=(2, _free_port(), tmp_path / "two" / "run", two, "zero1"), nprocs=2)
    _train(tmp_path / "one" / "run", tmp_path / "one.json")  # zero1 off, 1 process
    final = _load(tmp_path / "ref" / "run" / checkpoint.MODEL_FILE)
    for name in ("two", "one"):
        assert json.loads((tmp_path / f"{name}.json").read_text())["losses"] == pytest.approx(
            expected[8:], abs=1e-5)  # resumed at update 8: updates 9-12 only
        weights = _load(tmp_path / name / "run" / checkpoint.MODEL_FILE)
        assert weights.keys() == final.keys()
        for key in final:
            assert (weights[key] - final[key]).abs().max().item() <= 1e-5, (name, key)
    shards = [int(Path(f"{two}.bytes.{r}").read_text()) for r in (0, 1)]
    assert sum(shards) == int(Path(f"{ref}.bytes.0").read_text()), shards
    assert 0 < min(shards) <= max(shards) < 0.75 * sum(shards), shards


def test_zero1_owners_split_by_size_and_auto_micro_batch_counts_the_shard(monkeypatch):
    """Owners: largest parameter first, to the least-loaded rank (ties: the lowest). Rank 1 of
    2 keeps the moments of its parameters only, and `micro_batch_seqs: auto` reserves just
    those (no process group: the rank and world size are patched; the constructor talks to no
    other rank)."""
    from gpt1 import micro_batch, zero1
    from gpt1.model import GPT

    assert zero1.owners([10, 1, 5, 5], 2) == [0, 0, 1, 1]
    assert zero1.owners([3, 3, 3], 1) == [0, 0, 0]
    params = parse_params(make_params_dict(Path("unused")), "tiny")
    model = GPT(params.model, VOCAB)
    monkeypatch.setattr(torch.distributed, "get_rank", lambda: 1)
    monkeypatch.setattr(torch.distributed, "get_world_size", lambda: 2)
    opt = zero1.sharded_optimizer(model, 1e-3, (0.9, 0.999), 1e-8, 0.01)
    mine = sum(p.numel() * 4 for p in model.parameters() if opt.owns(p))
    whole = sum(p.numel() * 4 for p in model.parameters())
    assert 0 < mine < whole
    assert micro_batch.unallocated_bytes(model, opt, 2, bucket_view=True) == 2 * mine
    shards = zero1.state_bytes_per_rank(model, 2)
    assert shards[1] == 2 * mine + 4 * sum(opt.owns(p) for p in model.parameters())
    assert sum(shards) == zero1.state_bytes_per_rank(model, 1)[0]


def _load(path: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(path)


@pytest.mark.skipif(not torch.distributed.is_gloo_available(), reason="needs gloo")
@pytest.mark.slow
def test_the_pretrain_command_launches_nproc_ranks_itself(tmp_path, monkeypatch):
    """`python -m gpt1 pretrain` with pretrain.nproc: 2 (device: cpu) runs 2 gloo ranks through
    torch's elastic launcher, started by the stage itself (dvc.yaml's cmd unchanged); the final
    weights equal one process accumulating the same 2 micro-batches, within 1e-5."""
    from gpt1 import checkpoint
    from gpt1.__main__ import main
    from gpt1.stages import pretrain as pretrain_stages
    from tests.helpers.runs import prepare_run

    monkeypatch.delenv("WORLD_SIZE", raising=False)
    over = {"device": "cpu", "pretrain": {"max_tokens": 8 * 4 * 32, "precision": "fp32"}}
    _, one = prepare_run(tmp_path, "one", {**over, "pretrain": {**over["pretrain"], "nproc": 1}})
    pretrain_stages.pretrain(one)
    two_file, two = prepare_run(tmp_path, "two", {**over, "pretrain": {**over["pretrain"],
                                                                      "nproc": 2}})
    seed = two.pretrain.seeds[0]  # the launcher passes --pretrain-seed on to every rank
    assert main(["--params", str(two_file), "pretrain", "--pretrain-seed", str(seed)]) == 0
    info = json.loads((Path(two.paths.metrics) / f"pretrain_p{seed}.info.json").read_text())
    assert json.dumps(info).count('"world_size": 2') == 1
    a = _load(checkpoint.pretrain_dir(one, "transformer") / "model.safetensors")
    b = _load(checkpoint.pretrain_dir(two, "transformer", seed) / "model.safetensors")
    assert a.keys() == b.keys()
    for name in a:
        assert (a[name] - b[name]).abs().max().item() <= 1e-5, name


def _probe_rank(rank: int, port: int, dirs: list[Path], out: Path) -> None:
    from gpt1 import runtime
    from gpt1.errors import Gpt1Error

    os.environ.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
    torch.distributed.init_process_group("gloo", rank=rank, world_size=2)
    try:
        runtime.check_shared_dir(dirs[rank], rank, 2, torch.device("cpu"))
        Path(f"{out}.{rank}").write_text("shared")
    except Gpt1Error as err:
        Path(f"{out}.{rank}").write_text(str(err))
    finally:
        torch.distributed.destroy_process_group()


@pytest.mark.skipif(not torch.distributed.is_gloo_available(), reason="needs gloo")
@pytest.mark.slow
def test_a_run_directory_not_shared_by_every_rank_is_refused(tmp_path):
    """Multi-node: rank 1 with its own (unshared) folder at the run directory's place stops,
    and so does rank 0, in one line each; a shared folder passes and is left clean."""
    out = tmp_path / "probe"
    shared = [tmp_path / "run"] * 2
    mp.spawn(_probe_rank, args=(_free_port(), shared, out), nprocs=2)
    assert [Path(f"{out}.{r}").read_text() for r in (0, 1)] == ["shared", "shared"]
    assert list((tmp_path / "run").iterdir()) == []
    apart = [tmp_path / "node0" / "run", tmp_path / "node1" / "run"]
    mp.spawn(_probe_rank, args=(_free_port(), apart, out), nprocs=2)
    for r in (0, 1):
        said = Path(f"{out}.{r}").read_text()
        assert said.startswith(f"{apart[r]}: run directory not shared by every rank"), said
        assert "\n" not in said


def test_nproc_auto_is_every_gpu_and_one_on_the_cpu(monkeypatch):
    from gpt1 import launcher
    from gpt1.errors import Gpt1Error

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    assert launcher.ranks_to_launch("auto", "auto") == 1
    assert launcher.ranks_to_launch(2, "auto") == 2  # gloo processes on the CPU
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    assert launcher.ranks_to_launch("auto", "cuda") == 4
    assert launcher.ranks_to_launch("auto", "cpu") == 1
    assert launcher.ranks_to_launch(3, "cpu") == 3
    with pytest.raises(Gpt1Error, match=r"pretrain.nproc: 8 processes, but torch sees 4 GPU"):
        launcher.ranks_to_launch(8, "auto")


def test_a_batch_that_does_not_split_over_the_ranks_stops_before_launching(tmp_path, capsys,
                                                                          monkeypatch):
    from gpt1.__main__ import main
    from tests.helpers.runs import prepare_run

    monkeypatch.delenv("WORLD_SIZE", raising=False)
    params_file, params = prepare_run(tmp_path, "run", {"pretrain": {
        "nproc": 2, "batch_seqs": 4, "micro_batch_seqs": 4}})
    assert main(["--params", str(params_file), "pretrain"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["gpt1 pretrain: error: pretrain.batch_seqs=4 is not micro_batch_seqs=4 x "
                   "accumulation x 2 ranks"]
    assert not Path(params.paths.checkpoints).exists()  # no seed's run directory either


@pytest.mark.skipif(not torch.distributed.is_gloo_available(), reason="needs gloo")
@pytest.mark.slow
def test_sigterm_to_the_stage_stops_every_launched_rank_at_one_saved_step(tmp_path):
    """SIGTERM to `python -m gpt1 pretrain` (nproc 2) reaches each rank once: both save at the
    same sync point and stop; the command exits 143 in one line and no rank outlives it."""
    import signal
    import subprocess
    import sys
    import time

    import psutil

    from gpt1 import checkpoint
    from tests.helpers.repo import REPO
    from tests.helpers.runs import prepare_run

    STEPS = 10_000  # far more than run before the signal lands, however fast the machine
    params_file, params = prepare_run(tmp_path, "run", {"device": "cpu", "pretrain": {
        "nproc": 2, "max_tokens": STEPS * 4 * 32, "log_interval_steps": 4,
        "checkpoint_interval_steps": 8, "precision": "fp32"}})
    env = {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "RANK", "LOCAL_RANK")}
    proc = subprocess.Popen([sys.executable, "-m", "gpt1", "--params", str(params_file),
                             "pretrain"], cwd=REPO, env={**env, "OMP_NUM_THREADS": "1"},
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    run_dir = checkpoint.pretrain_dir(params, "transformer")
    deadline = time.monotonic() + 120
    while checkpoint.latest_checkpoint(run_dir) is None and time.monotonic() < deadline:
        assert proc.poll() is None, proc.stderr.read()
        time.sleep(0.2)
    ranks = psutil.Process(proc.pid).children(recursive=True)
    assert len([r for r in ranks if "gpt1" in " ".join(r.cmdline())]) >= 3  # launcher + 2
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    psutil.wait_procs(ranks, timeout=30)
    assert not [r for r in ranks if r.is_running()]
    assert proc.returncode == 143, err
    assert err.strip().splitlines()[-1] == ("gpt1 pretrain: stopped (2 ranks); re-run to resume "
                                            "from the latest checkpoint")
    step = checkpoint.read_checkpoint_state(checkpoint.latest_checkpoint(run_dir))["step"]
    assert step % 4 == 0 and step < STEPS  # saved at a sync point, not at the end
    assert err.count(f"gpt1 pretrain: stopped at step {step}; re-run to resume") == 2, err
    assert not (run_dir / checkpoint.MODEL_FILE).exists()
