"""GPU peaks the benchmarks measure utilisation against (torch only, no gpt1 schema: the GPU
check runs where pydantic is not installed)."""

from __future__ import annotations

# Dense bf16 tensor-core peaks (FLOP/s, no sparsity) from the vendors' data sheets, matched
# as substrings of torch.cuda.get_device_name(), first match wins (PCIe before the SXM default).
PEAK_BF16 = (("H100 PCIe", 756e12), ("H100", 989e12), ("H200", 989e12), ("A100", 312e12),
             ("L40S", 362e12), ("L4", 121e12))


def bf16_peak(device_name: str, override_tflops: float | None = None) -> float | None:
    """The device's dense bf16 peak in FLOP/s: override_tflops, else PEAK_BF16, else None."""
    if override_tflops:
        return override_tflops * 1e12
    return next((peak for key, peak in PEAK_BF16 if key in device_name), None)
