"""GPU peaks the benchmarks measure utilisation against: gpt1.runtime's, the one table (torch
only, no gpt1 schema: the GPU check runs where pydantic is not installed; the one-shot run's
manifest measures its MFU against the same)."""

from __future__ import annotations

from gpt1.runtime import PEAK_BF16, bf16_peak

__all__ = ["PEAK_BF16", "bf16_peak"]
