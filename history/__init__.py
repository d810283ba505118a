"""Run history: append-only records of every run, and the queries over them."""

from history.run_history import RunHistory, RunQuery

__all__ = ["RunHistory", "RunQuery"]
