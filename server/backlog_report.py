"""The server's periodic report of ready-queue backlogs to the metrics (``tikk.queue.*``).

Only the server reports them: it prepares every queue it accepts tasks for, so it knows them
all; dispatchers and workers would only repeat the figures.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from tikk.clock import Clock
from tikk.errors import BackendUnavailable
from tikk.ready_queue import QueueBacklog, ReadyQueue
from tikk.telemetry import QueueGauge, Telemetry

log = logging.getLogger("tikk.server")
REPORT_INTERVAL_S = 10.0


def gauges(backlog: Sequence[QueueBacklog], now_ms: int) -> dict[str, QueueGauge]:
    """Per queue: what waits, and the age of the oldest (0 when nothing waits)."""
    return {
        b.queue: QueueGauge(
            b.waiting, 0 if b.oldest_enqueued_ms is None else max(0, now_ms - b.oldest_enqueued_ms)
        )
        for b in backlog
    }


async def report_backlog(
    queue: ReadyQueue, clock: Clock, telemetry: Telemetry, every_s: float = REPORT_INTERVAL_S
) -> None:
    """Read the backlog and report it every ``every_s`` until cancelled. A read that fails is
    logged and the gauges keep the last figures until the next one succeeds."""
    while True:
        try:
            backlog = await queue.backlog()
        except BackendUnavailable as exc:
            log.warning("queue backlog not read: %s", exc)
        else:
            telemetry.report_queues(gauges(backlog, clock.now_ms()))
        await asyncio.sleep(every_s)
