"""tikk: the shared core of the scheduler (domain model, time buckets, errors, task store)."""
