"""``server.web.readiness``: what ``/readyz`` reports, how long a report is kept, how long a
check may take, and what a report may say of a failure. Time is a clock the test moves."""

from __future__ import annotations

import asyncio

from server.web.readiness import Readiness
from tikk.errors import BackendRefused, BackendUnavailable


class Clock:
    """Monotonic seconds that move only when told to."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Backend:
    """A check that counts the pings it answered, failing with ``error`` when one is set."""

    def __init__(self) -> None:
        self.pings = 0
        self.error: Exception | None = None

    async def ping(self) -> None:
        self.pings += 1
        if self.error is not None:
            raise self.error


async def test_not_ready_before_the_checks_are_named_and_after_they_are_dropped() -> None:
    readiness = Readiness(Clock())
    report = await readiness.report()
    assert not report.ready and report.states == {"process": "unavailable: starting"}
    readiness.watch({"store": Backend().ping})
    assert (await readiness.report()).ready
    readiness.unwatch()
    assert (await readiness.report()).states == {"process": "unavailable: stopping"}


async def test_ready_only_when_every_backend_answers_and_each_is_named() -> None:
    store, queue = Backend(), Backend()
    readiness = Readiness(Clock(), cache_s=0)
    readiness.watch({"store": store.ping, "queue": queue.ping})
    assert (await readiness.report()).states == {"store": "ok", "queue": "ok"}
    queue.error = BackendUnavailable("kafka: ping failed: connection refused")
    report = await readiness.report()
    assert not report.ready
    assert report.states == {
        "store": "ok",
        "queue": "unavailable: kafka: ping failed: connection refused",
    }


async def test_a_report_is_kept_for_the_cache_time_then_made_again() -> None:
    clock, store = Clock(), Backend()
    readiness = Readiness(clock, cache_s=1.0)
    readiness.watch({"store": store.ping})
    await readiness.report()
    store.error = BackendUnavailable("down")
    clock.now += 0.9
    assert (await readiness.report()).ready  # the kept report: the backend was not asked
    assert store.pings == 1
    clock.now += 0.1
    assert not (await readiness.report()).ready
    assert store.pings == 2


async def test_a_storm_of_probes_asks_the_backends_once() -> None:
    gate, store = asyncio.Event(), Backend()

    async def slow() -> None:
        await gate.wait()
        await store.ping()

    readiness = Readiness(Clock(), cache_s=1.0)
    readiness.watch({"store": slow})
    probes = [asyncio.create_task(readiness.report()) for _ in range(50)]
    await asyncio.sleep(0)  # every probe is waiting on the one round of checks
    gate.set()
    reports = await asyncio.gather(*probes)
    assert all(r.ready for r in reports)
    assert store.pings == 1


async def test_a_check_that_does_not_answer_is_unavailable_after_the_timeout() -> None:
    never, store = asyncio.Event(), Backend()

    async def silent() -> None:
        await never.wait()  # a backend that takes the request and never answers

    readiness = Readiness(Clock(), timeout_s=0.01)
    readiness.watch({"store": store.ping, "queue": silent})
    report = await asyncio.wait_for(readiness.report(), 5)
    assert report.states == {"store": "ok", "queue": "unavailable: no answer within 0.01 s"}


async def test_a_new_set_of_checks_is_asked_at_once() -> None:
    first, second = Backend(), Backend()
    readiness = Readiness(Clock(), cache_s=60)
    readiness.watch({"store": first.ping})
    await readiness.report()
    second.error = BackendUnavailable("not yet")
    readiness.watch({"store": second.ping})
    assert not (await readiness.report()).ready


async def test_a_report_never_shows_a_login_or_a_driver_errors_text() -> None:
    store, queue, history = Backend(), Backend(), Backend()
    store.error = BackendUnavailable("cassandra: cassandra://tikk:s3cret@db:9042/k is down")
    queue.error = RuntimeError("password=s3cret in a driver's message")
    history.error = BackendRefused("cassandra", "db:9042", "tikk", "x" * 500)
    readiness = Readiness(Clock())
    readiness.watch({"store": store.ping, "queue": queue.ping, "history": history.ping})
    states = (await readiness.report()).states
    assert "s3cret" not in repr(states)
    assert states["store"] == "unavailable: cassandra: cassandra://db:9042/k is down"
    assert states["queue"] == "unavailable: RuntimeError"
    assert len(states["history"]) <= len("unavailable: ") + 200
