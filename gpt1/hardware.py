"""The CPU a process runs on, from /proc/cpuinfo (no torch): its model name and the widest of the
instruction sets that matter here (AMX and AVX512-BF16: native bf16, gpt1.runtime's
BF16_CPU_FLAGS; AVX512; AVX2). Every stage record carries it (gpt1.records.StageContext.stamp),
the report's banner names it, and the benchmarks' results files head with it."""

from __future__ import annotations

import contextlib
import platform
from dataclasses import asdict, dataclass

CPUINFO = "/proc/cpuinfo"

ISA_LADDER = (("amx_bf16", "AMX"), ("avx512_bf16", "AVX512-BF16"), ("avx512f", "AVX512"),
              ("avx2", "AVX2"))
"""(flag, name) from the widest down: a CPU's instruction set is the first whose flag it has."""
NO_AVX2 = "no AVX2"


@dataclass(frozen=True)
class Cpu:
    """A CPU as a record names it: its model name and widest instruction set (ISA_LADDER)."""

    model: str
    isa: str

    def text(self) -> str:
        """`<model> (<isa>)`, as the report and the benchmark results files print it."""
        return f"{self.model} ({self.isa})"

    def as_record(self) -> dict[str, str]:
        """The record's `hardware` field."""
        return asdict(self)


def _fields(cpuinfo: str) -> dict[str, str]:
    """The first `model name` and `flags` lines of a cpuinfo file (empty when unreadable)."""
    found: dict[str, str] = {}
    with contextlib.suppress(OSError), open(cpuinfo, encoding="ascii", errors="replace") as fh:
        for line in fh:
            key, sep, value = line.partition(":")
            key = key.strip()
            if sep and key in ("model name", "flags") and key not in found:
                found[key] = value.strip()
            if len(found) == 2:
                break
    return found


def describe_cpu(cpuinfo: str = CPUINFO) -> Cpu:
    """This machine's CPU: the model name (platform's processor or machine where cpuinfo has
    none) and the widest instruction set of ISA_LADDER its flags show."""
    fields = _fields(cpuinfo)
    have = set(fields.get("flags", "").split())
    isa = next((name for flag, name in ISA_LADDER if flag in have), NO_AVX2)
    model = fields.get("model name") or platform.processor() or platform.machine() or "unknown"
    return Cpu(model, isa)
