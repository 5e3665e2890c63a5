"""Build, verify and load the fused CPU kernels (kernels.c) as a shared library.

The library is compiled on first use with the system C compiler (`$CC`, else `cc`) for this
machine's CPU (-march=native) into `$GPT1_KERNEL_CACHE` (default the user cache, gpt1.atomic),
keyed by a hash of the source, flags and CPU, and written to a temp name then renamed. Next to each
library its sha256 is recorded at build (`.so.sha256`); a library whose bytes do not match
its record (damaged, replaced, or put there by anything but this build) is never loaded: it
is removed and rebuilt once. With no compiler the caller falls back to torch ops, after one
warning. `GPT1_CPU_KERNELS=0` turns the kernels off; `GPT1_KERNEL_MARCH` replaces `native`
(e.g. `x86-64-v3`, AVX2 without AVX-512: how the tests build the AVX2 library on any x86-64).
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import logging
import os
import platform
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

from gpt1 import atomic

log = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("kernels.c")
FLAGS = ["-O3", "-march=native", "-fno-math-errno", "-fno-trapping-math", "-fopenmp-simd",
         "-fPIC", "-shared", "-pthread"]


def _flags() -> list[str]:
    """FLAGS with -march from $GPT1_KERNEL_MARCH when set."""
    march = os.environ.get("GPT1_KERNEL_MARCH")
    return [f"-march={march}" if f == "-march=native" and march else f for f in FLAGS]


_state: dict[str, object] = {"lib": None, "tried": False, "enabled": True}


def _cpu_signature() -> str:
    try:
        text = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        return platform.processor()
    lines = [ln for ln in text.splitlines() if ln.startswith(("model name", "flags"))]
    return "\n".join(sorted(set(lines)))


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _digest_path(library_path: Path) -> Path:
    return library_path.with_name(library_path.name + ".sha256")


def verified(path: Path) -> bool:
    """True when `path`'s bytes match the digest recorded when this module built it."""
    try:
        return _digest_path(path).read_text().strip() == _sha256(path)
    except OSError:
        return False


def _build() -> Path | None:
    """Compile kernels.c for this CPU into the cache (once per source/flags/CPU)."""
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not cc:
        log.warning("gpt1 CPU kernels: no C compiler found ($CC, cc, gcc); using torch ops")
        return None
    source, flags = SOURCE.read_bytes(), _flags()
    key = hashlib.sha256(b"\0".join(
        [source, " ".join([cc, *flags]).encode(), platform.machine().encode(),
         _cpu_signature().encode()]
    )).hexdigest()[:16]
    cache = Path(os.environ.get("GPT1_KERNEL_CACHE") or atomic.user_cache())
    target = cache / f"kernels-{key}.so"
    if target.exists():
        return target
    cache.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".kernels-", suffix=".so", dir=cache)
    os.close(fd)
    try:
        done = subprocess.run([cc, *flags, "-o", tmp, str(SOURCE), "-lm"],
                              capture_output=True, text=True, timeout=300)
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
            log.warning("gpt1 CPU kernels: %s failed to compile %s: %s; using torch ops",
                        cc, SOURCE, last)
            return None
        # the digest first: a library without its record is never loaded
        atomic.write_text(_digest_path(target), _sha256(Path(tmp)) + "\n")
        os.replace(tmp, target)  # atomic: a concurrent process sees all of it or nothing
        return target
    except (OSError, subprocess.SubprocessError) as exc:
        log.warning("gpt1 CPU kernels: cannot run %s: %s; using torch ops", cc, exc)
        return None
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def _load() -> ctypes.CDLL | None:
    """Build (or find), verify and load the library; a cache entry that does not match its
    recorded digest or does not load is removed and rebuilt once."""
    for attempt in range(2):
        path = _build()
        if path is None:
            return None
        then = "; rebuilding" if attempt == 0 else "; using torch ops"
        if not verified(path):
            log.warning("gpt1 CPU kernels: %s does not match the digest recorded at its "
                        "build; not loaded%s", path, then)
        else:
            try:
                return ctypes.CDLL(str(path))
            except OSError as exc:  # e.g. a foreign file whose digest record was forged
                log.warning("gpt1 CPU kernels: cannot load %s (%s)%s", path, exc, then)
        path.unlink(missing_ok=True)
        _digest_path(path).unlink(missing_ok=True)
    return None


def _declare(lib: ctypes.CDLL) -> None:
    """The C signatures (kernels.c); the ops in gpt1/backends/kernels.py call nothing else."""
    p, i64, i32, u64, u32, f32 = (ctypes.c_void_p, ctypes.c_int64, ctypes.c_int,
                                  ctypes.c_uint64, ctypes.c_uint32, ctypes.c_float)
    lib.gpt1_dropout.argtypes = [p, p, i64, i32, u64, u32, f32, i32]
    lib.gpt1_gelu_fwd.argtypes = [p, p, i64, i32, i32]
    lib.gpt1_gelu_bwd.argtypes = [p, p, p, i64, i32, i32]
    lib.gpt1_attn_fwd.argtypes = [p, p, p, i64, i64, i32, f32, u64, u32, f32, i32]
    lib.gpt1_attn_bwd.argtypes = [p, p, i64, i64, i32, f32, u64, u32, f32, i32]
    lib.gpt1_softmax_rows.argtypes = [p, p, i64, i64, i32, i32]
    lib.gpt1_add_layer_norm_fwd.argtypes = [p, p, p, p, p, p, p, p, i64, i64, i32, f32,
                                            u64, u32, f32, i32]
    lib.gpt1_add_layer_norm_bwd.argtypes = [p, p, p, p, p, p, p, p, p, i64, i64, i32,
                                            u64, u32, f32, i32]
    for fn in (lib.gpt1_dropout, lib.gpt1_gelu_fwd, lib.gpt1_gelu_bwd, lib.gpt1_attn_fwd,
               lib.gpt1_attn_bwd, lib.gpt1_softmax_rows, lib.gpt1_add_layer_norm_fwd):
        fn.restype = None
    lib.gpt1_add_layer_norm_bwd.restype = i32


def library() -> ctypes.CDLL | None:
    """The loaded kernel library, or None (disabled, or no compiler)."""
    if not _state["enabled"] or os.environ.get("GPT1_CPU_KERNELS", "1") == "0":
        return None
    if not _state["tried"]:
        _state["tried"] = True
        lib = _load()
        if lib is not None:
            _declare(lib)
            _state["lib"] = lib
    loaded = _state["lib"]
    return loaded if isinstance(loaded, ctypes.CDLL) else None


@contextlib.contextmanager
def disabled() -> Iterator[None]:
    """Run the torch reference path inside the block (benchmarks, tests)."""
    before = _state["enabled"]
    _state["enabled"] = False
    try:
        yield
    finally:
        _state["enabled"] = before
