"""The floor of what the machine allows: a Redis sorted set of task ids scored by due time
(ms), and one process that takes what is due (ZRANGEBYSCORE + ZREM in one Lua script, so a
task is taken once) and runs it in process.

``python -m devtools.peers.redis_poller URL`` runs the poller; the runner adds the tasks
with ZADD in pipelined batches. Needs the ``peers`` extra (the redis client).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from devtools.peers.processes import PeerFleet, python_argv
from devtools.peers.records import RECORDS_ENV, record
from devtools.peers.redis_server import start_redis
from devtools.peers.workloads import TaskPlan

DUE_KEY = "bench-peers:due"
POLLER_READY = "ready-redis-poller"
POLLER_START_TIMEOUT_S = 30.0
TAKE_BATCH = 500  # tasks taken per call at most
IDLE_POLL_S = 0.005  # the wait after a call that found fewer than a batch
ZADD_BATCH = 1_000
_TAKE_DUE = """
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'WITHSCORES', 'LIMIT', 0, ARGV[2])
for i = 1, #due, 2 do redis.call('ZREM', KEYS[1], due[i]) end
return due
"""


class RedisPoller:
    """A ``redis-server``, the poller process, and ZADD from the runner."""

    name = "redis-poller"
    expected_ingest_per_s = 20_000.0

    def __init__(self) -> None:
        self._client: Any = None

    def start(self, fleet: PeerFleet) -> None:
        import redis

        url = start_redis(fleet)
        argv = python_argv("-m", "devtools.peers.redis_poller", url)
        fleet.launch("redis-poller", "poller", argv)
        fleet.wait_file(fleet.records / POLLER_READY, "redis poller", POLLER_START_TIMEOUT_S)
        self._client = redis.Redis.from_url(url)

    def submit(self, plan: TaskPlan) -> float:
        began = time.monotonic()
        pipe = self._client.pipeline(transaction=False)
        for first in range(0, plan.tasks, ZADD_BATCH):
            last = min(plan.tasks, first + ZADD_BATCH)
            pipe.zadd(DUE_KEY, {plan.task_id(i): plan.due_ms(i) for i in range(first, last)})
            pipe.execute()
        return time.monotonic() - began

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None


def poll(url: str, stop: threading.Event) -> None:
    """Take and run what is due until ``stop`` is set."""
    import redis

    client = redis.Redis.from_url(url)
    take = client.register_script(_TAKE_DUE)
    take(keys=[DUE_KEY], args=[0, 1])  # loads the script: ready once it answers
    (Path(os.environ[RECORDS_ENV]) / POLLER_READY).touch()
    while not stop.is_set():
        due = take(keys=[DUE_KEY], args=[time.time_ns() // 1_000_000, TAKE_BATCH])
        for i in range(0, len(due), 2):
            record(due[i].decode(), int(float(due[i + 1])))
        if len(due) < 2 * TAKE_BATCH:
            stop.wait(IDLE_POLL_S)
    client.close()


if __name__ == "__main__":
    _stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: _stop.set())
    poll(sys.argv[1], _stop)
