"""Data stages of the pipeline: sources (download), clean, checks, shards (PAPER.md 1, 5)."""
