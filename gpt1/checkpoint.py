"""Checkpoints and final weights: safetensors + JSON only, every file hashed, written atomically.

Layout of a pre-training run directory (params.paths.checkpoints / lstm_checkpoints):
  checkpoints/step_<n>/  model.safetensors, optimizer.safetensors, rng.safetensors, state.json
                         (the latest one only; resume point)
  zeroshot/step_<n>.safetensors   log-spaced weights kept for the zero-shot study (Figure 2)
  model.safetensors + model.json  final weights; model.json = params, tokenizer hash, step,
                                  kind, vocab size and the sha256 of every weights file.
Nothing is unpickled: a tampered or truncated file fails its sha256 (or JSON digest) check with
a Gpt1Error naming it before any byte of it is parsed as tensors.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import shutil
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load as load_safetensors
from torch import nn

from gpt1 import atomic, names, networks
from gpt1.config import Params, ParamsError, parse_params
from gpt1.errors import Gpt1Error

log = logging.getLogger(__name__)

CKPT_DIR = "checkpoints"
ZEROSHOT_DIR = "zeroshot"
MODEL_FILE = "model.safetensors"
MODEL_META = "model.json"
STATE_FILE = "state.json"
_STEP_DIR = re.compile(r"^step_(\d{8})$")


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _json_digest(body: dict[str, Any]) -> str:
    return _sha256(json.dumps(body, sort_keys=True).encode())


def _write_json_with_digest(path: Path, body: dict[str, Any]) -> None:
    atomic.write_json(path, {**body, "digest": _json_digest(body)})


def _read_json_with_digest(path: Path) -> dict[str, Any]:
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise Gpt1Error("missing", path) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise Gpt1Error(f"not valid JSON, truncated or tampered ({err})", path) from None
    if not isinstance(raw, dict) or "digest" not in raw:
        raise Gpt1Error("no digest field; not a gpt1 checkpoint file", path)
    body = {k: v for k, v in raw.items() if k != "digest"}
    if _json_digest(body) != raw["digest"]:
        raise Gpt1Error("content does not match its digest (tampered or truncated)", path)
    return body


_DTYPES = {torch.float64: "F64", torch.float32: "F32", torch.bfloat16: "BF16",
           torch.float16: "F16", torch.int64: "I64", torch.int32: "I32", torch.int16: "I16",
           torch.int8: "I8", torch.uint8: "U8", torch.bool: "BOOL"}
"""safetensors' names of the dtypes a checkpoint holds."""


def _write_tensors(path: Path, tensors: dict[str, torch.Tensor]) -> str:
    """Write `tensors` to `path` as the bytes safetensors.torch.save makes (its layout: wider
    dtypes first, then by name; the JSON header padded to 8 bytes), streamed from each host
    tensor's memory and hashed as it goes; return the sha256. File writes and sha256 updates
    release the interpreter lock, so a writer thread leaves the host to the training loop
    (building one 1.4 GB bytes object, as save() does, held it; checkpoint.write_checkpoint's
    files are otherwise byte-identical, tests/unit/test_checkpoint.py)."""
    host = {k: v.detach().contiguous().cpu() for k, v in tensors.items()}
    order = sorted(host.items(), key=lambda kv: (-kv[1].element_size(), kv[0]))
    header: dict[str, Any] = {}
    offset = 0
    for name, value in order:
        size = value.numel() * value.element_size()
        header[name] = {"dtype": _DTYPES[value.dtype], "shape": list(value.shape),
                        "data_offsets": [offset, offset + size]}
        offset += size
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)
    digest = hashlib.sha256()
    try:
        with open(path, "wb") as fh:
            for chunk in (len(head).to_bytes(8, "little"), head):
                fh.write(chunk)
                digest.update(chunk)
            for _, value in order:
                if value.numel():
                    data = value.reshape(-1).view(torch.uint8).numpy().data
                    fh.write(data)
                    digest.update(data)
    except OSError as err:
        if atomic.is_disk_full(err):  # the whole file's size, not what fitted
            raise atomic.DiskFullError(path, 8 + len(head) + offset) from None
        raise
    return digest.hexdigest()


def _load_tensors(path: Path, expected_sha256: str) -> dict[str, torch.Tensor]:
    """Read a safetensors file, check its sha256 first, then parse (never unpickles)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise Gpt1Error("missing", path) from None
    if _sha256(data) != expected_sha256:
        raise Gpt1Error("sha256 does not match the recorded one (tampered or truncated)", path)
    try:
        return load_safetensors(data)
    except SafetensorError as err:
        raise Gpt1Error(f"not a valid safetensors file ({err})", path) from None


def _optimizer_tensors(opt: torch.optim.Optimizer) -> tuple[dict[str, torch.Tensor], list[Any]]:
    """Split optimizer.state_dict() into tensors (safetensors) and JSON param groups."""
    sd = opt.state_dict()
    tensors = {
        f"state.{pid}.{key}": (value if torch.is_tensor(value) else torch.tensor(value))
        for pid, state in sd["state"].items()
        for key, value in state.items()
    }
    return tensors, sd["param_groups"]


def _restore_optimizer(
    opt: torch.optim.Optimizer, tensors: dict[str, torch.Tensor], groups: list[dict[str, Any]]
) -> None:
    state: dict[int, dict[str, torch.Tensor]] = {}
    for name, value in tensors.items():
        _, pid, key = name.split(".", 2)
        state.setdefault(int(pid), {})[key] = value
    for group in groups:
        group["betas"] = tuple(group["betas"])
    opt.load_state_dict({"state": state, "param_groups": groups})


def training_state(model: nn.Module, optimizer: torch.optim.Optimizer
                   ) -> tuple[dict[str, dict[str, torch.Tensor]], list[Any]]:
    """What a checkpoint holds as tensors (model, optimizer, this process's RNG states; still
    on their devices, sharing storage with the live ones) and the optimizer's JSON groups."""
    opt_tensors, groups = _optimizer_tensors(optimizer)
    rng = {"torch_cpu": torch.get_rng_state()}
    if torch.cuda.is_available():
        rng.update({f"cuda_{i}": s for i, s in enumerate(torch.cuda.get_rng_state_all())})
    tensors = {"model.safetensors": dict(model.state_dict()),
               "optimizer.safetensors": opt_tensors, "rng.safetensors": rng}
    return tensors, groups


def save_checkpoint(
    run_dir: Path, step: int, model: nn.Module, optimizer: torch.optim.Optimizer,
    state: dict[str, Any],
) -> Path:
    """Write checkpoints/step_<step>/ atomically (a directory rename), then drop older ones.

    `state` (JSON) carries the data position, history, params and tokenizer hash; the RNG
    states of this process go to rng.safetensors. (gpt1.snapshot writes the same files from
    a host copy, in the background.)
    """
    tensors, groups = training_state(model, optimizer)
    return write_checkpoint(run_dir, step, tensors, groups, state)


def write_checkpoint(run_dir: Path, step: int, tensors: dict[str, dict[str, torch.Tensor]],
                     groups: list[Any], state: dict[str, Any]) -> Path:
    """The files of checkpoints/step_<step>/ from `training_state`'s tensors (or host copies
    of them), written atomically, then the older checkpoints dropped."""
    dest = Path(run_dir) / CKPT_DIR / f"step_{step:08d}"
    with atomic.atomic_path(dest) as tmp:
        tmp.mkdir()
        files = {name: _write_tensors(tmp / name, group) for name, group in tensors.items()}
        body = {**state, "step": step, "optimizer_groups": groups, "files": files}
        _write_json_with_digest(tmp / STATE_FILE, body)
    for old in _step_dirs(run_dir):
        if old != dest:
            shutil.rmtree(old, ignore_errors=True)
    return dest


def _step_dirs(run_dir: Path) -> list[Path]:
    root = Path(run_dir) / CKPT_DIR
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if p.is_dir() and _STEP_DIR.match(p.name))


def remove_partial_writes(run_dir: Path) -> None:
    """Delete temp files and directories left by a write that was killed (atomic.atomic_path)."""
    for parent in (Path(run_dir), Path(run_dir) / CKPT_DIR, Path(run_dir) / ZEROSHOT_DIR):
        if parent.is_dir():
            for p in parent.glob(".*.tmp"):
                shutil.rmtree(p, ignore_errors=True)


def latest_checkpoint(run_dir: Path) -> Path | None:
    """The newest complete checkpoint directory, or None."""
    dirs = _step_dirs(run_dir)
    return dirs[-1] if dirs else None


def read_checkpoint_state(ckpt: Path) -> dict[str, Any]:
    """state.json of a checkpoint, digest-checked."""
    return _read_json_with_digest(Path(ckpt) / STATE_FILE)


def load_checkpoint(
    ckpt: Path, model: nn.Module, optimizer: torch.optim.Optimizer
) -> dict[str, Any]:
    """Restore model, optimizer and RNG state in place; return the JSON state."""
    ckpt = Path(ckpt)
    state = read_checkpoint_state(ckpt)
    files = state["files"]
    weights = _load_tensors(ckpt / "model.safetensors", files["model.safetensors"])
    opt_tensors = _load_tensors(ckpt / "optimizer.safetensors", files["optimizer.safetensors"])
    rng = _load_tensors(ckpt / "rng.safetensors", files["rng.safetensors"])
    _load_weights(model, weights, ckpt / "model.safetensors")
    _restore_optimizer(optimizer, opt_tensors, state["optimizer_groups"])
    torch.set_rng_state(rng["torch_cpu"])
    if torch.cuda.is_available():
        cuda = [rng[k] for k in sorted(rng) if k.startswith("cuda_")]
        if cuda:
            torch.cuda.set_rng_state_all(cuda)
    return state


def _load_weights(model: nn.Module, weights: dict[str, torch.Tensor], path: Path) -> None:
    expected = model.state_dict()
    if set(weights) != set(expected):
        diff = sorted(set(weights) ^ set(expected))[:3]
        raise Gpt1Error(f"weights do not match the model (keys differ: {diff})", path)
    for name, value in weights.items():
        if value.shape != expected[name].shape:
            raise Gpt1Error(f"{name}: shape {tuple(value.shape)} != model's", path)
    model.load_state_dict(weights)


def save_weights(path: Path, model: nn.Module | dict[str, torch.Tensor]) -> str:
    """Write model weights (a model, or its state_dict / a host copy of one) to one
    safetensors file atomically; return its sha256."""
    with atomic.atomic_path(path) as tmp:
        return _write_tensors(tmp, model if isinstance(model, dict) else model.state_dict())


def write_model(run_dir: Path, model: nn.Module, meta: dict[str, Any]) -> None:
    """Final weights + model.json (meta must hold params, tokenizer_hash, kind (the body:
    gpt1.names), vocab_size)."""
    run_dir = Path(run_dir)
    meta = {**meta, "kind": names.body(meta["kind"])}
    digest = save_weights(run_dir / MODEL_FILE, model)
    zeroshot = {
        p.stem.removeprefix("step_"): _sha256(p.read_bytes())
        for p in sorted((run_dir / ZEROSHOT_DIR).glob("step_*.safetensors"))
    }
    _write_json_with_digest(
        run_dir / MODEL_META, {**meta, "files": {MODEL_FILE: digest}, "zeroshot": zeroshot}
    )


def load_weights(model: nn.Module, run_dir: str | Path, meta: dict[str, Any]) -> nn.Module:
    """Load the final weights that `meta` (read_model_meta of run_dir) records; eval mode."""
    path = Path(run_dir) / MODEL_FILE
    _load_weights(model, _load_tensors(path, meta["files"][MODEL_FILE]), path)
    return model.eval()


def read_model_meta(run_dir: Path) -> dict[str, Any]:
    """model.json of a finished run, digest-checked; `kind` is the body's word (gpt1.names:
    one written before the rename says `gpt`)."""
    meta = _read_json_with_digest(Path(run_dir) / MODEL_META)
    if "kind" in meta:
        meta["kind"] = names.body(meta["kind"])
    return meta


SHAPE_FIELDS: dict[str, tuple[str, tuple[str, ...]]] = {
    names.TRANSFORMER: ("model", ("arch", "n_positions", "n_embd", "n_layer", "n_head", "n_inner")),
    names.LSTM: ("lstm", ("n_layer", "hidden_size", "n_embd")),
}
"""Network body -> (params section, the fields that fix its weights' shapes and wiring)."""


def recorded_params(meta: dict[str, Any], where: Path) -> Params:
    """The params a model was trained with (its model.json). Written before
    model.vocab_pad_multiple existed = unpadded (1), before tasks.custom = none; Gpt1Error when
    no longer valid."""
    raw = meta["params"]
    if isinstance(raw.get("model"), dict) and "vocab_pad_multiple" not in raw["model"]:
        raw = {**raw, "model": {**raw["model"], "vocab_pad_multiple": 1}}
    if isinstance(raw.get("tasks"), dict) and "custom" not in raw["tasks"]:
        raw = {**raw, "tasks": {**raw["tasks"], "custom": {}}}
    try:
        return parse_params(raw, where)
    except ParamsError as err:
        raise Gpt1Error(f"recorded params no longer valid: {err}", where) from None


def check_model_shape(run_dir: str | Path, params: Params) -> None:
    """Refuse, before any work, a finished run whose model shape differs from params'."""
    run_dir = Path(run_dir)
    meta = read_model_meta(run_dir)
    section, fields = SHAPE_FIELDS[meta["kind"]]
    recorded = {k: meta["params"][section][k] for k in fields}
    wanted = {k: getattr(getattr(params, section), k) for k in fields}
    if recorded != wanted:
        def shape(values: dict[str, Any]) -> str:
            return " ".join(f"{k}={v}" for k, v in values.items())

        raise Gpt1Error(f"model shape {shape(recorded)} was pre-trained, params.{section} says "
                        f"{shape(wanted)}; restore params.{section} or re-run pre-training",
                        run_dir / MODEL_META)


def load_model(
    run_dir: str | Path, expected_tokenizer_hash: str | None, step: int | None = None
) -> tuple[nn.Module, dict[str, Any]]:
    """Rebuild the model of a finished pre-training run and load its weights (eval mode).

    step=None loads the final weights; an int loads that zero-shot checkpoint. Refuses
    tampered or truncated files and a tokenizer other than `expected_tokenizer_hash`.
    """
    run_dir = Path(run_dir)
    meta = read_model_meta(run_dir)
    if expected_tokenizer_hash is not None and meta["tokenizer_hash"] != expected_tokenizer_hash:
        raise Gpt1Error(
            f"trained with tokenizer {meta['tokenizer_hash'][:12]}, expected "
            f"{expected_tokenizer_hash[:12]}; re-run pretraining", run_dir / MODEL_META,
        )
    params = recorded_params(meta, run_dir / MODEL_META)
    model = networks.build_model(meta["kind"], params, meta["vocab_size"])
    if step is None:
        path, digest = run_dir / MODEL_FILE, meta["files"][MODEL_FILE]
    else:
        key = f"{step:08d}"
        if key not in meta["zeroshot"]:
            raise Gpt1Error(f"no zero-shot checkpoint at step {step}", run_dir / MODEL_META)
        path, digest = run_dir / ZEROSHOT_DIR / f"step_{key}.safetensors", meta["zeroshot"][key]
    _load_weights(model, _load_tensors(path, digest), path)
    return model.eval(), meta


def zeroshot_path(run_dir: Path, step: int) -> Path:
    return Path(run_dir) / ZEROSHOT_DIR / f"step_{step:08d}.safetensors"


def pretrain_dir(params: Params, body: str, pretrain_seed: int | None = None) -> Path:
    """The run directory of one pre-training run: <paths.checkpoints> (body transformer) or
    <paths.lstm_checkpoints> (lstm), then p<pretrain_seed> (gpt1.names.run_tag); None = the
    first of pretrain.seeds."""
    root = (params.paths.checkpoints if names.body(body) == names.TRANSFORMER
            else params.paths.lstm_checkpoints)
    return Path(root) / names.run_tag(params.pretrain.seeds[0] if pretrain_seed is None
                                      else pretrain_seed)
