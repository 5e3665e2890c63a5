"""The carry of a one-shot run (gpt1/one_shot.py): the folder a bare-torch GPU host needs, made
on the CPU, and the archive the run returns, put back into the preset's records.

`prepare` lays the carry out as a small repository: dvc.yaml (the stages' declared params, for
the records' stage hashes), the preset as params.yaml with tracking off, the data stages'
outputs the model stages read (tokenizer, token shards, each task's tables, the DPRD file of
the zero-shot stages) at the preset's own relative paths, so every record and prediction file
the run writes names the path it has in the workspace; the standardisation of every text the
model stages encode (gpt1.data.clean.STANDARDIZED_TEXTS: the host has no spaCy); and the
pure-Python wheels (plus pydantic's compiled core) the host lacks. It refuses a carry over
DATA_LIMIT_BYTES of data or a travelling tree (the checkout's files plus the carry) over
TREE_LIMIT_BYTES, naming the sizes. `unpack` checks the archive (whole or in parts) is the
preset's and writes its files under the preset's paths.metrics and paths.finetuned, plus the
manifest and its summary (`one_shot.md`) beside the report.
"""

from __future__ import annotations

import io
import json
import logging
import shutil
import subprocess
import sys
import tarfile
from importlib import metadata
from pathlib import Path, PurePosixPath
from typing import Any

import yaml

from gpt1 import atomic
from gpt1.atomic import size_text
from gpt1.config import Params, read_yaml
from gpt1.data.clean import STANDARDIZED_TEXTS
from gpt1.errors import Gpt1Error
from gpt1.repo import git, repo_root

log = logging.getLogger(__name__)

DATA_LIMIT_BYTES = 55 * 2**20
"""The most data a carry holds (docs/gpu.md: the tree that travels is at most 64 MiB)."""
TREE_LIMIT_BYTES = 64 * 2**20
"""The most the checkout's files and the carry may weigh together."""
MANIFEST = "one_shot.json"
"""A one-shot run's manifest (gpt1/one_shot.py), at its archive's root, beside the archive and,
unpacked, beside the report."""
CARRY_MANIFEST = "carry.json"
"""What a carry holds and weighs; its presence marks a folder `prepare` may replace."""
WHEELS = ("pydantic", "pydantic-core", "annotated-types", "typing-inspection",
          "typing-extensions", "ftfy", "wcwidth")
"""What the stages import that the GPU host lacks (docs/gpu.md lists what it has): pydantic
(gpt1.config) and its needs, ftfy (gpt1.data.clean, via the task formats) and its need."""
TARGET = ("3.12", "cp", ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64"))
"""(Python version, implementation, platforms) of the GPU host's interpreter, which the
compiled wheels (pydantic-core; wcwidth's abi3) are fetched for: CPython 3.12 on x86-64 Linux
(docs/gpu.md)."""
INPUT_PATHS = ("tokenizer", "shards", "tasks")
"""The params paths the model stages read from the data stages' outputs."""
OUTPUT_PATHS = ("metrics", "finetuned")
"""The params paths an archive's files are unpacked under."""


def tree_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.is_dir() \
        else path.stat().st_size


def checkout_bytes(root: Path) -> int | None:
    """The bytes of the checkout's files that travel (git's tracked and untracked-not-ignored
    files); None outside a git checkout."""
    code, out = git("ls-files", "-co", "--exclude-standard", cwd=root)
    if code:
        return None
    return sum((root / f).stat().st_size for f in out.splitlines() if (root / f).is_file())


def _relative(params: Params, key: str) -> Path:
    value = getattr(params.paths, key)
    if value is None or Path(value).is_absolute() or ".." in Path(value).parts:
        raise Gpt1Error(f"paths.{key}: {value!r}: a carry lays the preset's paths out inside "
                        "itself, so they must be relative paths inside the repository")
    return Path(value)


def inputs(params: Params) -> dict[Path, Path]:
    """Carry path -> workspace path of every data-stage output the model stages read."""
    out = {_relative(params, "tokenizer"): Path(params.paths.tokenizer),
           _relative(params, "shards"): Path(params.paths.shards)}
    tasks = _relative(params, "tasks")
    for task in carried_tasks(params):
        out[tasks / task] = Path(params.paths.tasks) / task
    if "dprd" in params.zeroshot.tasks:
        name = Path("tasks") / "DPRD" / f"{params.zeroshot.dprd_split}.c.txt"
        out[Path("mirror") / name] = Path(params.paths.mirror_dir or "") / name
    missing = sorted(str(src) for src in out.values() if not src.exists())
    if missing:
        raise Gpt1Error(f"no {', '.join(missing)}: run the preset's data stages first (`dvc "
                        "repro shard_corpus prepare_task` in its working copy, or `python -m "
                        "gpt1 <stage> --params <preset>` for each)")
    return out


def carried_tasks(params: Params) -> list[str]:
    """The tasks whose tables the model stages read: fine-tuned or scored zero-shot."""
    return list(dict.fromkeys([*params.finetune.tasks,
                               *(t for t in params.zeroshot.tasks if t != "dprd")]))


def carried_texts(params: Params) -> list[str]:
    """Every text the model stages standardise from the carried data, found with their own
    code: each cell of each carried task table, and each string the zero-shot stages build
    (gpt1.zeroshot.build_data, read through a recording encoder)."""
    from gpt1 import bpe, zeroshot
    from gpt1.tasks import formats, load

    texts: set[str] = set()
    tables = {t: load.read_tables(Path(params.paths.tasks) / t) for t in carried_tasks(params)}
    for splits in tables.values():
        for df in splits.values():
            texts |= {*df["text_a"], *df["text_b"], *(c for cs in df["choices"] for c in cs)}
    encode = formats.text_encoder(bpe.load_bpe(params.paths.tokenizer))

    def recording(batch: list[str]) -> list[list[int]]:
        texts.update(batch)
        return encode(batch)

    cfg = params.zeroshot
    dprd = (zeroshot.read_dprd(Path(params.paths.mirror_dir or "") / "tasks" / "DPRD"
                               / f"{cfg.dprd_split}.c.txt") if "dprd" in cfg.tasks else [])
    zeroshot.build_data(cfg, {t: tables[t] for t in cfg.tasks if t != "dprd"}, dprd, recording,
                        params.seed)
    return sorted(texts - {""})


def write_standardized(params: Params, dest: Path) -> int:
    """The table of the carried texts' standardisation (gpt1.data.clean.STANDARDIZED_TEXTS) at
    `dest`, so that the GPU host never runs spaCy; returns the number of texts."""
    import pandas as pd

    from gpt1.data.clean import standardize_texts

    texts = carried_texts(params)
    frame = pd.DataFrame({"text": texts, "standardized": standardize_texts(texts)})
    dest.write_bytes(frame.to_parquet(index=False) or b"")
    return len(texts)


def carry_params(params_path: str) -> dict[str, Any]:
    """The preset as the carry runs it: tracking off, the mirror inside the carry."""
    raw = read_yaml(Path(params_path))
    raw["tracking"]["enabled"] = False
    raw["paths"]["mirror_dir"] = "mirror"
    return raw


def download_wheels(dest: Path) -> list[str]:
    """The WHEELS at the versions installed here, for TARGET, into `dest` (pip, no deps)."""
    pins = [f"{name}=={metadata.version(name)}" for name in WHEELS]
    version, implementation, platforms = TARGET
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
           "--python-version", version, "--implementation", implementation,
           *(a for p in platforms for a in ("--platform", p)), "-d", str(dest), *pins]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)  # noqa: S603
    if done.returncode:
        tail = (done.stdout + done.stderr).strip().splitlines()[-1:]
        raise Gpt1Error(f"pip download of {', '.join(pins)} failed: {tail} (no registry? "
                        "pass --wheels none where the host has them)")
    return sorted(p.name for p in dest.glob("*.whl"))


def prepare(params: Params, params_path: str, carry: Path, wheels: str,
            data_limit: int = DATA_LIMIT_BYTES, tree_limit: int = TREE_LIMIT_BYTES
            ) -> dict[str, Any]:
    """Make the carry folder of `params` (the preset at `params_path`) at `carry`, replacing
    an earlier carry; refused, nothing written, over `data_limit` bytes of data or
    `tree_limit` bytes travelling with the checkout."""
    sources = inputs(params)
    for key in (*INPUT_PATHS, *OUTPUT_PATHS, "checkpoints", "lstm_checkpoints", "reports"):
        _relative(params, key)
    if carry.exists() and not (carry / CARRY_MANIFEST).is_file():
        raise Gpt1Error(f"exists and is no carry (no {CARRY_MANIFEST}); name another folder",
                        carry)
    root = repo_root()
    tree = checkout_bytes(root)  # before the carry's temp folder appears in the checkout
    with atomic.atomic_path(carry) as tmp:
        tmp.mkdir()
        shutil.copy2(root / "dvc.yaml", tmp / "dvc.yaml")
        (tmp / "params.yaml").write_text(
            f"# {params_path} as a one-shot run reads it (gpt1 one-shot prepare)\n"
            + yaml.safe_dump(carry_params(params_path), sort_keys=False), encoding="utf-8")
        for rel, src in sources.items():
            (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
            if src.is_dir():
                shutil.copytree(src, tmp / rel)
            else:
                shutil.copy2(src, tmp / rel)
        n_texts = write_standardized(params, tmp / STANDARDIZED_TEXTS)
        data = sum(tree_bytes(tmp / rel) for rel in sources) + tree_bytes(
            tmp / STANDARDIZED_TEXTS)
        names = download_wheels(tmp / "wheels") if wheels == "download" else []
        wheel_bytes = tree_bytes(tmp / "wheels") if names else 0
        carried = tree_bytes(tmp)
        travelling = carried + (tree or 0)
        sizes = {"data_bytes": data, "wheel_bytes": wheel_bytes, "carry_bytes": carried,
                 "checkout_bytes": tree, "travelling_bytes": travelling}
        biggest = sorted(((tree_bytes(tmp / rel), str(rel))
                          for rel in [*sources, Path(STANDARDIZED_TEXTS)]), reverse=True)
        what = ", ".join(f"{rel} {size_text(b)}" for b, rel in biggest[:4])
        if data > data_limit:
            raise Gpt1Error(f"the carry's data is {size_text(data)}, over {size_text(data_limit)}"
                            f" ({what}): fewer tasks or a smaller corpus", carry)
        if travelling > tree_limit:
            raise Gpt1Error(f"the checkout ({size_text(tree or 0)}) and the carry "
                            f"({size_text(carried)}) weigh "
                            f"{size_text(travelling)}, over the "
                            f"{size_text(tree_limit)} that travel", carry)
        summary = {"preset": params_path, "preset_name": params.report.preset, **sizes,
                   "inputs": {str(rel): tree_bytes(tmp / rel) for rel in sources},
                   "standardized_texts": n_texts,
                   "wheels": names, "wheel_target": list(TARGET[:2]) + list(TARGET[2])}
        (tmp / CARRY_MANIFEST).write_text(json.dumps(summary, indent=2) + "\n",
                                          encoding="utf-8")
    print(f"carry {carry}: data {size_text(data)} ({what}), wheels {size_text(wheel_bytes)} "
          f"({len(names)}), with the checkout {size_text(travelling)} of the "
          f"{size_text(tree_limit)} that travel")
    return summary


def split_file(path: Path, limit: int) -> list[Path]:
    """`path` itself when at most `limit` bytes, else its bytes cut into `<path>.0`, `.1`, ...
    of at most `limit` each, in place of it (a lent machine returns no larger file)."""
    size = path.stat().st_size
    if size <= limit:
        return [path]
    data = path.read_bytes()
    parts = [path.with_name(f"{path.name}.{i}") for i in range(-(-size // limit))]
    for i, part in enumerate(parts):
        part.write_bytes(data[i * limit:(i + 1) * limit])
    path.unlink()
    return parts


def archive_bytes(archive: Path) -> bytes:
    """An archive's bytes: the file, or its parts (`<archive>.0`, `.1`, ...) joined."""
    if archive.is_file():
        return archive.read_bytes()
    parts = sorted((p for p in archive.parent.glob(f"{archive.name}.*")
                    if p.suffix[1:].isdigit()), key=lambda p: int(p.suffix[1:]))
    if not parts or [int(p.suffix[1:]) for p in parts] != list(range(len(parts))):
        raise Gpt1Error("no such archive, nor all its parts (.0, .1, ...)", archive)
    return b"".join(p.read_bytes() for p in parts)


def _member_path(name: str, params: Params) -> Path:
    """Where an archive member goes: under the preset's paths.metrics or paths.finetuned."""
    rel = PurePosixPath(name)
    allowed = [PurePosixPath(_relative(params, key).as_posix()) for key in OUTPUT_PATHS]
    if rel.is_absolute() or ".." in rel.parts or not any(rel.is_relative_to(a)
                                                        for a in allowed):
        raise Gpt1Error(f"archive member {name!r} is not under paths.metrics or "
                        "paths.finetuned: not a one-shot archive of this preset")
    return Path(*rel.parts)


def unpack(archive: Path, params: Params) -> dict[str, Any]:
    """Write a one-shot archive's files where the preset keeps them, its manifest and summary
    beside the report; returns the manifest."""
    data = archive_bytes(archive)
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:*") as tar:
            members = [m for m in tar.getmembers() if m.isfile()]
            blobs = {m.name: tar.extractfile(m).read() for m in members}  # type: ignore[union-attr]
    except (tarfile.TarError, EOFError, OSError) as err:
        raise Gpt1Error(f"unreadable archive ({err})", archive) from None
    if MANIFEST not in blobs:
        raise Gpt1Error(f"no {MANIFEST} in it: not a one-shot archive", archive)
    manifest = json.loads(blobs.pop(MANIFEST))
    if manifest.get("preset") != params.report.preset:
        raise Gpt1Error(f"an archive of preset {manifest.get('preset')!r}, not of "
                        f"{params.report.preset!r} (report.preset)", archive)
    targets = {_member_path(name, params): blob for name, blob in blobs.items()}
    for path, blob in sorted(targets.items()):
        atomic.write_bytes(path, blob)
    reports = _relative(params, "reports")
    atomic.write_json(reports / MANIFEST, manifest)
    atomic.write_text(reports / "one_shot.md", summary_text(manifest))
    print(f"unpacked {len(targets)} files of {archive} ({manifest['finished']} of "
          f"{manifest['runs']} runs finished on {manifest['device']}); {reports / 'one_shot.md'}")
    return manifest


def summary_text(manifest: dict[str, Any]) -> str:
    """The manifest as markdown: device, versions, wall time, MFU, each run's outcome."""
    mfus = [f"{address} {m['tokens_per_s'] or 0:,.0f} tokens/s"
            + (f", MFU {100 * m['mfu']:.1f} %" if m.get("mfu") is not None else "")
            for address, m in manifest["pretraining"].items()]
    lines = ["# One-shot run", "",
             f"{manifest['finished']} of {manifest['runs']} runs finished in "
             f"{manifest['wall_s']:.0f} s (deadline {manifest['deadline_s']:.0f} s) on "
             f"{manifest['device']}; torch {manifest['torch']}, CUDA {manifest['cuda']}, "
             f"Python {manifest['python']}. Written by `gpt1 one-shot run` "
             "(gpt1/one_shot.py), unpacked by `gpt1 one-shot unpack`.", "",
             "Pre-training (the last log window's rate; MFU against the dense bf16 peak): "
             + ("; ".join(mfus) if mfus else "none finished") + ".", "",
             "| run | outcome | wall (s) |", "|---|---|---:|"]
    for s in manifest["stages"]:
        outcome = s["status"] + (f": {s['error']}" if s.get("error") else "")
        wall = f"{s['wall_s']:.1f}" if "wall_s" in s else ""
        lines.append(f"| {s['address']} | {outcome} | {wall} |")
    return "\n".join(lines) + "\n"
