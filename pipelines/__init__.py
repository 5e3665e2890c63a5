"""Orchestration: the Prefect flow over DVC's stage graph and what a deployment needs around it."""
