"""What ``/readyz`` answers: whether this process can do its work now, backend by backend.

``/healthz`` says the process is alive (a liveness probe restarts it when it is not);
``/readyz`` says whether it should be sent work (a readiness probe takes it out of its
Service while it is not, and restarts nothing). Each process names its checks when its
backends are open (``Readiness.watch``): a server its task store, history and ready queue; a
dispatcher those and its ownership session; a worker its result stream to a server. Until
then, and once they close, the process is not ready.

A check is a backend's ``ping`` (``tikk.store.tasks.TaskStore.ping`` and its peers). Checks
run together, each bounded by ``timeout_s``; a report is kept for ``cache_s``, and probes
that arrive while one is being made wait for it, so however many probes arrive, the backends
see at most one round of pings per ``cache_s``. What a report says of a failed check is the
message of the ``TikkError`` it raised, redacted of any URL's login and bounded, or only
the class of any other exception: never a credential.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

from tikk.errors import TikkError

log = logging.getLogger("tikk.readiness")

Check = Callable[[], Awaitable[None]]
OK = "ok"
# Longest reason a report gives for one backend.
_REASON_CHARS = 200
# The login of a URL (``scheme://user:password@host``): never shown.
_USERINFO = re.compile(r"(?<=://)[^/@\s]*@")


@dataclass(frozen=True)
class ReadinessReport:
    """Each backend's state, ``"ok"`` or ``"unavailable: <why>"``; ``ready`` only when there
    is at least one and every one is ok."""

    states: Mapping[str, str]

    @property
    def ready(self) -> bool:
        return bool(self.states) and all(state == OK for state in self.states.values())


class Readiness:
    """The checks of one process and the last report on them (see the module).

    ``clock`` gives monotonic seconds (it decides when a report is stale); ``timeout_s``
    bounds each check, ``cache_s`` how long a report is given again."""

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        *,
        timeout_s: float = 2.0,
        cache_s: float = 1.0,
    ) -> None:
        self._clock = clock
        self._timeout_s, self._cache_s = timeout_s, cache_s
        self._checks: dict[str, Check] = {}
        self._idle = ReadinessReport({"process": "unavailable: starting"})
        self._last: tuple[float, ReadinessReport] | None = None
        self._making = asyncio.Lock()

    def watch(self, checks: Mapping[str, Check]) -> None:
        """Judge readiness by ``checks`` (name → check) from now on."""
        self._checks = dict(checks)
        self._last = None

    def unwatch(self, why: str = "stopping") -> None:
        """Stop checking (the backends are closing): not ready, for ``why``."""
        self._checks = {}
        self._idle = ReadinessReport({"process": f"unavailable: {why}"})
        self._last = None

    async def report(self) -> ReadinessReport:
        """The last report if it is younger than ``cache_s``, else a new one."""
        async with self._making:
            now = self._clock()
            if self._last is not None and now - self._last[0] < self._cache_s:
                return self._last[1]
            checks = self._checks
            if not checks:
                return self._idle
            states = await asyncio.gather(*(self._state(n, c) for n, c in checks.items()))
            report = ReadinessReport(dict(zip(checks, states, strict=True)))
            if checks is self._checks:  # not unwatched meanwhile
                self._last = (self._clock(), report)
            return report

    async def _state(self, name: str, check: Check) -> str:
        try:
            await asyncio.wait_for(check(), self._timeout_s)
        except TimeoutError:
            reason = f"no answer within {self._timeout_s:g} s"
        except TikkError as exc:
            reason = _shown(str(exc))
        except Exception as exc:  # a driver's own error: its text may say anything
            reason = type(exc).__name__
        else:
            return OK
        log.info("not ready: %s is unavailable: %s", name, reason)
        return f"unavailable: {reason}"


def _shown(text: str) -> str:
    """``text`` with any URL's login removed, on one line, bounded."""
    text = _USERINFO.sub("", " ".join(text.split()))
    return text if len(text) <= _REASON_CHARS else text[: _REASON_CHARS - 1] + "…"
