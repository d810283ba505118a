"""``python -m devtools bench-peers``: tikk's embedded default beside Celery, arq,
APScheduler 3 and a bare Redis sorted-set poller, on the same workloads in one run.

Each system runs as real processes of its own on a fresh instance per workload (a
``redis-server`` of its own for the Redis-based ones); every handler is a no-op that records
its task id and how late it started (``records``), so lateness, lost tasks and duplicates are
counted by task id the same way for all. ``runner`` drives the runs, ``report`` writes the
tables. The peers' libraries are imported only by the modules of the peers that were asked
for, after ``requirements`` found them installed.
"""
