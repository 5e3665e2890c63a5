"""`gpt1 import-hf SOURCE OUT_DIR`: a transformers OpenAIGPTLMHeadModel as this project's
pre-trained run (the released GPT-1 weights: `openai-gpt` on the Hugging Face hub).

SOURCE is a local directory (config.json, model.safetensors, vocab.json, merges.txt), or a hub
name such as `openai-gpt`, downloaded through transformers' own loader into its cache (needs
network; offline, a hub name stops with one line). OUT_DIR receives what the `pretrain` stage
leaves: model.safetensors + model.json (the weights through the one weight map,
gpt1/hf_weights.py; the three special tokens appended as fresh N(0, initializer_range) rows, as
the original release adds them for fine-tuning, seeded by params `seed`), and tokenizer/ (our
BPE from vocab.json + merges.txt, the special tokens appended). Point params paths.checkpoints
at OUT_DIR and paths.tokenizer at OUT_DIR/tokenizer, and set params `model` to the checkpoint's
shape (configs/paper-finetune.yaml has openai-gpt's). docs/import-hf.md says more.

The pipeline imports through the same code: with params `pretrain.import_hf` naming a
directory, train_bpe converts its tokenizer and pretrain its weights (gpt1/hf_stand_in.py).
Weights are read from safetensors only: pickled checkpoints (pytorch_model.bin) are refused.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import re
from pathlib import Path
from typing import Any

from gpt1 import atomic, hf_weights, names
from gpt1.config import Params, ParamsError, parse_params
from gpt1.errors import Gpt1Error

log = logging.getLogger(__name__)

FILES = ("config.json", "model.safetensors", "vocab.json", "merges.txt")
"""What an import reads from SOURCE (sha256 of each recorded in model.json and bpe.json)."""
TOKENIZER_DIR = "tokenizer"
OUT_FILES = ("model.safetensors", "model.json", TOKENIZER_DIR)
_HUB_NAME = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")
_COPIED = ("resid_pdrop", "embd_pdrop", "attn_pdrop", "layer_norm_epsilon", "initializer_range")


_ARGUMENTS = (
    ("source", "SOURCE", "transformers OpenAIGPTLMHeadModel directory, or a hub name "
                         "(openai-gpt) to download through transformers when online"),
    ("out_dir", "OUT_DIR", "pre-trained run directory to write (new or empty): "
                           "model.safetensors, model.json, tokenizer/"),
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    for name, metavar, text in _ARGUMENTS:
        parser.add_argument(name, metavar=metavar, help=text)


PARAMS_OPTIONAL = True
"""Runs without a params file (outside a repository): `base_params` says which params then."""


def run(args: argparse.Namespace, params: Params | None) -> None:
    """Entry point of `gpt1 import-hf`: the run and its tokenizer go to OUT_DIR."""
    import_hf(args.source, args.out_dir, params)


def base_params(src: Path, params: Params | None) -> Params:
    """The params an import records around the checkpoint's own shape: the params file's;
    without one (outside a repository), the params an export of ours recorded, else the
    params.yaml of the project gpt1 is installed from."""
    if params is not None:
        return params
    from gpt1 import checkpoint, export

    if (src / export.GPT1_META).is_file():
        return checkpoint.recorded_params(export.read_export_meta(src), src / export.GPT1_META)
    installed = Path(__file__).resolve().parents[1] / "params.yaml"
    if not installed.is_file():
        raise Gpt1Error("no params file here, and none beside the installed gpt1 package; "
                        "pass --params FILE", "params.yaml")
    from gpt1.config import load_params

    log.info("no params.yaml here: the other params of the run are %s's", installed)
    return load_params(installed)


# ------------------------------------------------------------------ reading a checkpoint


def resolve(source: str | Path) -> Path:
    """SOURCE as a local directory: itself, or a hub name fetched into transformers' cache."""
    path = Path(source)
    if path.is_dir():
        return path
    text = str(source)
    if path.exists() or not _HUB_NAME.match(text) or text.startswith("."):
        raise Gpt1Error("not a directory holding a transformers OpenAIGPT checkpoint", source)
    return _download(text)


def _download(name: str) -> Path:
    """Fetch FILES of hub model `name` with transformers' loader (cached); one line, at once
    (within HUB_CONNECT_SECONDS), when offline or the hub does not accept a connection."""
    from huggingface_hub import constants
    from transformers.utils import cached_file

    unreachable = None if constants.HF_HUB_OFFLINE else _unreachable(constants.ENDPOINT)
    offline = constants.HF_HUB_OFFLINE or unreachable is not None
    try:
        paths = [Path(str(cached_file(name, f, local_files_only=offline))) for f in FILES]
    except Exception as err:  # transformers wraps every hub failure in OSError / its own
        cause = ("offline mode is on (HF_HUB_OFFLINE=1)" if constants.HF_HUB_OFFLINE else
                 str(unreachable))
        why = (f"{cause} and transformers' cache does not hold it" if offline else
               f"the hub could not serve it ({str(err).strip().splitlines()[0][:160]})")
        raise Gpt1Error(f"not a local directory, and a hub download failed: {why}; download "
                        "it where there is network (docs/import-hf.md) and pass its directory",
                        name) from None
    return paths[0].parent  # transformers' cache: one snapshot folder


HUB_CONNECT_SECONDS = 3.0
"""How long the hub's host gets to accept a connection before the import stops (instead of
huggingface_hub's retries, each a log line)."""


def _unreachable(endpoint: str) -> str | None:
    """Why the hub's host cannot be reached (no DNS, connection refused, no answer within
    HUB_CONNECT_SECONDS), or None when it accepts a connection."""
    import socket
    from urllib.parse import urlparse

    url = urlparse(endpoint)
    host = url.hostname or endpoint
    port = url.port or (80 if url.scheme == "http" else 443)
    try:
        socket.getaddrinfo(host, port)
    except OSError:
        return "there is no network (the hub host does not resolve)"
    try:
        socket.create_connection((host, port), timeout=HUB_CONNECT_SECONDS).close()
    except TimeoutError:
        return (f"the hub ({host}:{port}) did not answer within {HUB_CONNECT_SECONDS:.0f} s "
                "(a firewall or proxy?)")
    except OSError as err:
        return f"the hub ({host}:{port}) refused the connection ({err.strerror or err})"
    return None


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise Gpt1Error("missing: not a transformers OpenAIGPT checkpoint directory",
                        path) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise Gpt1Error(f"not valid JSON ({err})", path) from None


def read_config(src: Path) -> dict[str, Any]:
    """config.json of an OpenAI-GPT checkpoint; Gpt1Error for any other model."""
    path = src / "config.json"
    cfg = _read_json(path)
    if not isinstance(cfg, dict) or cfg.get("model_type") != "openai-gpt":
        kind = cfg.get("model_type") if isinstance(cfg, dict) else None
        raise Gpt1Error(f"model_type is {kind!r}, not 'openai-gpt': not an OpenAI-GPT "
                        "checkpoint", path)
    missing = [k for k in ("vocab_size", "n_positions", "n_embd", "n_layer", "n_head", "afn",
                           *_COPIED) if k not in cfg]
    if missing:
        raise Gpt1Error(f"missing {missing}", path)
    if cfg["afn"] != "gelu":
        raise Gpt1Error(f"afn {cfg['afn']!r}: only 'gelu' (GPT-1's) maps onto this model", path)
    return cfg


def read_weights(src: Path, cfg: dict[str, Any]) -> dict[str, Any]:
    """model.safetensors as our state dict, every tensor checked against config.json's shapes."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    path = src / "model.safetensors"
    if not path.is_file():
        pickled = (src / "pytorch_model.bin").is_file()
        raise Gpt1Error("missing" + ("; only safetensors are read, pickled weights "
                                     "(pytorch_model.bin) are never loaded" if pickled else ""),
                        path)
    try:
        raw = load_file(str(path))
    except SafetensorError as err:
        raise Gpt1Error(f"not a valid safetensors file ({err})", path) from None
    ours = ("transformer.", "h.", "tokens_embed.", "positions_embed.", "position_ids",
            hf_weights.HEAD)
    heads = sorted({k.split(".")[0] for k in raw if not k.startswith(ours)})
    if heads:
        raise Gpt1Error(f"holds a task head ({', '.join(h + '.*' for h in heads)}) and no "
                        f"gpt1_model.json naming its task: import-hf keeps a task head only "
                        "from a gpt1 export-hf folder; to import the language model alone, "
                        "re-save it as OpenAIGPTLMHeadModel", path)
    state = hf_weights.from_hf(raw)
    want = hf_weights.expected_shapes(cfg["vocab_size"], cfg["n_positions"], cfg["n_embd"],
                                      cfg["n_layer"])
    if set(state) != set(want):
        diff = sorted(set(state) ^ set(want))[:3]
        raise Gpt1Error(f"weights do not match config.json's {cfg['n_layer']} layers "
                        f"(names differ: {diff})", path)
    for name, shape in want.items():
        got = tuple(hf_weights.layout(name, state[name]).shape)
        if got != shape:
            raise Gpt1Error(f"{name} has shape {got}, config.json implies {shape} (config and "
                            "weights do not match)", path)
    return state


def read_tokenizer(src: Path, vocab_size: int, specials: tuple[str, ...]
                   ) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """vocab.json + merges.txt, checked against the weights' vocabulary (ids 0..vocab_size-1,
    the special tokens excluded when an export of ours already holds them)."""
    vocab_path, merges_path = src / "vocab.json", src / "merges.txt"
    vocab = _read_json(vocab_path)
    if not isinstance(vocab, dict) or sorted(vocab.values()) != list(range(len(vocab))):
        raise Gpt1Error("not a token -> id map with ids 0..n-1", vocab_path)
    if len(vocab) != vocab_size:
        raise Gpt1Error(f"{len(vocab)} tokens, but the weights (config.json vocab_size) have "
                        f"{vocab_size}: the tokenizer does not match the weights", vocab_path)
    by_id = sorted(vocab, key=vocab.__getitem__)
    if tuple(by_id[-len(specials):]) == specials:  # an export of ours: specials already there
        vocab = {t: i for t, i in vocab.items() if t not in specials}
    try:
        lines = merges_path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise Gpt1Error("missing: not a transformers OpenAIGPT checkpoint directory",
                        merges_path) from None
    merges: list[tuple[str, str]] = []
    for n, line in enumerate(lines, 1):
        if not line.strip() or (n == 1 and line.startswith("#version")):
            continue
        parts = line.split(" ")
        if len(parts) != 2 or any(p not in vocab for p in parts) or "".join(parts) not in vocab:
            raise Gpt1Error(f"line {n} ({line[:40]!r}) is not a merge of two tokens of "
                            "vocab.json into a third: the tokenizer does not match its vocabulary",
                            merges_path)
        merges.append((parts[0], parts[1]))
    return vocab, merges


def fingerprint(src: Path) -> dict[str, str]:
    """sha256 of each file an import reads (what DVC tracks of the checkpoint directory)."""
    return {name: hashlib.sha256((src / name).read_bytes()).hexdigest()
            for name in FILES if (src / name).is_file()}


# ------------------------------------------------------------------ writing our run


def model_params(params: Params, cfg: dict[str, Any], n_merges: int, where: Path) -> Params:
    """params with `model` (and bpe.n_merges) set to the checkpoint's, as model.json records."""
    raw = params.as_dict()
    raw["model"].update({"arch": "gpt1", "n_positions": cfg["n_positions"],
                         "n_embd": cfg["n_embd"], "n_layer": cfg["n_layer"],
                         "n_head": cfg["n_head"], "n_inner": 4 * cfg["n_embd"],
                         "afn": cfg["afn"], **{k: cfg[k] for k in _COPIED}})
    raw["bpe"]["n_merges"] = n_merges
    raw["pretrain"]["seq_len"] = min(raw["pretrain"]["seq_len"], cfg["n_positions"])
    try:
        return parse_params(raw, where)
    except ParamsError as err:
        raise Gpt1Error(f"does not fit this project's model: {err}", where) from None


def check_params_match(params: Params, cfg: dict[str, Any], n_merges: int, src: Path) -> None:
    """The pipeline's params must already describe the checkpoint: refuse, naming the key."""
    imported = model_params(params, cfg, n_merges, src / "config.json")
    for section, keys in (("model", ("arch", "n_positions", "n_embd", "n_layer", "n_head",
                                     "n_inner", "afn")), ("bpe", ("n_merges",))):
        for key in keys:
            ours = getattr(getattr(params, section), key)
            theirs = getattr(getattr(imported, section), key)
            if ours != theirs:
                raise Gpt1Error(f"params {section}.{key} is {ours}, the checkpoint has {theirs}; "
                                f"set {section}.{key}: {theirs} (configs/paper-finetune.yaml)",
                                src / ("merges.txt" if section == "bpe" else "config.json"))


def write_tokenizer(src: Path, params: Params, out_dir: str | Path) -> Any:
    """Convert SOURCE's vocab.json + merges.txt into our tokenizer at out_dir; return it.

    An unknown symbol becomes id 0, as in the original release (`encoder.get(t, 0)`).
    """
    from gpt1 import bpe

    cfg = read_config(src)
    vocab, merges = read_tokenizer(src, cfg["vocab_size"], params.bpe.special_tokens)
    unk = min(vocab, key=vocab.__getitem__)
    return bpe.write_bpe(vocab, merges, params.bpe, out_dir, unk_token=unk,
                         about={"imported_from": str(src), "files": fingerprint(src)})


def write_run(src: Path, params: Params, run_dir: str | Path, tok: Any) -> dict[str, Any]:
    """Convert SOURCE's weights into a pre-trained run at run_dir (model.safetensors +
    model.json) for tokenizer `tok` (written by write_tokenizer); return model.json's body."""
    import torch

    from gpt1 import checkpoint, networks
    from gpt1.backends import backend_of

    cfg = read_config(src)
    state = read_weights(src, cfg)
    vocab, merges = read_tokenizer(src, cfg["vocab_size"], params.bpe.special_tokens)
    n_special = len(params.bpe.special_tokens)
    if tok.vocab_size != len(vocab) + n_special:
        raise Gpt1Error(f"the tokenizer has {tok.vocab_size} ids, the checkpoint "
                        f"{len(vocab)} + {n_special} special tokens; re-run train_bpe",
                        src / "vocab.json")
    embed = state["tokens_embed.weight"]
    if embed.shape[0] < tok.vocab_size:  # the release's way: fresh rows for the specials
        gen = torch.Generator().manual_seed(params.seed)
        fresh = torch.randn(tok.vocab_size - embed.shape[0], embed.shape[1], generator=gen)
        state["tokens_embed.weight"] = torch.cat([embed, fresh * cfg["initializer_range"]])
    run_params = model_params(params, cfg, len(merges), src / "config.json")
    model = networks.build_model(names.TRANSFORMER, run_params, tok.vocab_size)
    state = hf_weights.pad_embedding(state, model.tokens_embed.weight.shape[0])
    model.load_state_dict({k: v.float() for k, v in state.items()})
    meta = {"kind": names.TRANSFORMER, "vocab_size": tok.vocab_size, "tokenizer_hash": tok.hash,
            "params": run_params.as_dict(), "step": 0, "arch": "gpt1",
            "backend": backend_of(model),
            "imported_from": {"source": str(src), "files": fingerprint(src)}}
    with atomic.atomic_path(run_dir) as tmp:
        tmp.mkdir()
        checkpoint.write_model(tmp, model, meta)
    log.info("imported %s (%d layers x %d, vocab %d + %d special tokens)", src,
             cfg["n_layer"], cfg["n_embd"], len(vocab), n_special)
    return meta


def import_task_model(src: Path, out_dir: str | Path) -> Path:
    """An export-hf folder of a fine-tuned model -> that model (its task head kept) as a
    fine-tuned model folder: model.safetensors, model.json (task, params) and tokenizer/."""
    import shutil

    from gpt1 import checkpoint, export

    model, meta = export.load_export(src)
    # an export's tokenizer.json reads raw text (a classification one also lays the input out);
    # gpt1's own tokenizer is gpt1_tokenizer.json (export.own_tokenizer)
    own = src / export.GPT1_TOKENIZER
    tok_files = [own if own.is_file() else src / export.TOKENIZER_FILE, src / export.BPE_META]
    for path in tok_files:
        if not path.is_file():
            raise Gpt1Error("missing: the export is incomplete; export the model again", path)
    digest = hashlib.sha256(tok_files[0].read_bytes()).hexdigest()
    if meta.get("tokenizer_hash") != digest:
        raise Gpt1Error(f"not the tokenizer the model was trained with (sha256 {digest[:12]}, "
                        f"{export.GPT1_META} records {str(meta.get('tokenizer_hash'))[:12]}); "
                        "export the model again", tok_files[0])
    files = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(src.iterdir())
             if p.is_file() and p.suffix in (".json", ".safetensors")}
    with atomic.user_folder(out_dir, False, OUT_FILES, flag=None) as tmp:
        (tmp / TOKENIZER_DIR).mkdir()
        for path, name in zip(tok_files, (export.TOKENIZER_FILE, export.BPE_META), strict=True):
            shutil.copyfile(path, tmp / TOKENIZER_DIR / name)
        checkpoint.write_model(tmp, model, {**meta, "imported_from": {"source": str(src),
                                                                      "files": files}})
    log.info("imported the fine-tuned %s model of %s, its task head kept -> %s", meta["task"],
             src, out_dir)
    return Path(out_dir)


def import_hf(source: str | Path, out_dir: str | Path, params: Params | None) -> Path:
    """`gpt1 import-hf`: OUT_DIR/model.safetensors, model.json and tokenizer/, all or nothing.
    An export-hf folder of a fine-tuned model keeps its task head (`import_task_model`)."""
    from gpt1 import export

    atomic.check_user_folder(out_dir, False, OUT_FILES, flag=None)
    src = resolve(source)
    if (src / export.GPT1_META).is_file() and export.read_export_meta(src).get("task"):
        return import_task_model(src, out_dir)
    if (src / export.HEAD_FILES[0]).exists():
        raise Gpt1Error(f"a task head beside the weights, and no {export.GPT1_META} naming its "
                        "task: import-hf keeps a task head only from a gpt1 export-hf folder; "
                        "move it away to import the language model alone",
                        src / export.HEAD_FILES[0])
    params = base_params(src, params)
    cfg = read_config(src)
    read_weights(src, cfg)  # every refusal before anything is written
    _, merges = read_tokenizer(src, cfg["vocab_size"], params.bpe.special_tokens)
    run_params = model_params(params, cfg, len(merges), src / "config.json")
    with atomic.user_folder(out_dir, False, OUT_FILES, flag=None) as tmp:
        tok = write_tokenizer(src, run_params, tmp / TOKENIZER_DIR)
        write_run(src, run_params, tmp / "run", tok)
        for name in ("model.safetensors", "model.json"):
            (tmp / "run" / name).rename(tmp / name)
        (tmp / "run").rmdir()
    log.info("wrote %s (model.safetensors, model.json, %s/)", out_dir, TOKENIZER_DIR)
    return Path(out_dir)


# ------------------------------------------------------------------ the pipeline's import


SCAN_FILE = "import_hf.json"
"""scan's file in paths.mirror_scan (the scan_mirror stage writes it): a dependency of
train_bpe and pretrain."""


def scan(source: str | None) -> dict[str, Any]:
    """What DVC tracks of params `pretrain.import_hf` (the scan_mirror stage writes it): the
    sha256 of each file an import reads, or no source."""
    if source is None:
        return {"source": None}
    return {"source": source, "files": fingerprint(resolve(source))}


def _checked_source(params: Params) -> tuple[Path, dict[str, Any]]:
    """The checkpoint params `pretrain.import_hf` names, checked against params."""
    if params.pretrain.import_hf is None:
        raise ValueError("pretrain.import_hf is not set")
    src = resolve(params.pretrain.import_hf)
    cfg = read_config(src)
    read_weights(src, cfg)
    _, merges = read_tokenizer(src, cfg["vocab_size"], params.bpe.special_tokens)
    check_params_match(params, cfg, len(merges), src)
    return src, cfg


def import_tokenizer(params: Params) -> Any:
    """train_bpe under `pretrain.import_hf`: the checkpoint's tokenizer at paths.tokenizer."""
    src, _ = _checked_source(params)
    return write_tokenizer(src, params, params.paths.tokenizer)


def import_run(params: Params, tok: Any, run_dir: str | Path) -> dict[str, Any]:
    """pretrain under `pretrain.import_hf`: the checkpoint's weights in run_dir, for
    the tokenizer train_bpe converted (`tok`); returns model.json's body."""
    src, _ = _checked_source(params)
    return write_run(src, params, run_dir, tok)
