"""Builders the tests share: generated corpora and task mirrors, the tiny params, tiny runs and
checkpoints, the CLI's refusal check, repository copies for the end-to-end tests. Plain modules,
no fixtures (those live in tests/conftest.py); nothing here is collected as a test."""
