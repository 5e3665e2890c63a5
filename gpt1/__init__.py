"""gpt1: a reproducible data-and-training pipeline for GPT-1 (Radford et al. 2018)."""

__version__ = "0.1.0"
