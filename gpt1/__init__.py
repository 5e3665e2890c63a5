"""gpt1: a reproducible data-and-training pipeline for GPT-1 (Radford et al. 2018)."""

import time as _time

__version__ = "0.1.0"

STARTED = _time.perf_counter()
"""When this process imported gpt1: a `python -m gpt1 <stage>` stage's wall time (the sidecar's
`wall_seconds`, gpt1.records.write_metrics) counts from here, imports included."""
