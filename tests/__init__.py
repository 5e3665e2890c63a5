"""The test suite: unit/ mirrors the package's folders, e2e/ drives DVC, Prefect and MLflow, and
helpers/ holds the builders tests share (a test module imports from helpers, never from another
test module)."""
