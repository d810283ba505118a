"""``execute_many``'s chain of driver callbacks (``tikk.drivers.cassandra._Chain``): a lot
ends once every statement answered, and a second answer of one statement (the driver gives
one when a speculative execution and the first attempt both come back) ends nothing early:
it would hand back another statement's rows as empty, and a claim reading no task row drops
the row it fires."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from cassandra.cluster import NoHostAvailable

from tikk.drivers.cassandra import CassandraConfig, CassandraSession, _Chain
from tikk.errors import BackendUnavailable


class _Future:
    """A driver ResponseFuture that answers when the test says."""

    has_more_pages = False
    answer: Any = None  # set by add_callbacks: call it with the rows

    def add_callbacks(
        self, callback: Any, errback: Any, callback_args: Any, errback_args: Any
    ) -> None:
        self.answer = lambda rows: callback(rows, *callback_args)


class _Session:
    def __init__(self) -> None:
        self.futures: list[_Future] = []

    def execute_async(self, statement: Any) -> _Future:
        self.futures.append(_Future())
        return self.futures[-1]


async def test_a_statement_settled_twice_does_not_end_the_lot_early() -> None:
    loop = asyncio.get_running_loop()
    done: asyncio.Future[list[list[Any]]] = loop.create_future()
    session = _Session()
    _Chain(session, ["a", "b"], 8, loop, done).start()
    first, second = session.futures
    first.answer(["row a"])
    first.answer(["row a"])  # a second callback of the same statement
    await asyncio.sleep(0.05)
    assert not done.done()  # b has not answered: the lot is not over
    second.answer(["row b"])
    assert await asyncio.wait_for(done, 5) == [["row a"], ["row b"]]


class _DownSession:
    """A session whose every node is marked down: preparing a statement fails."""

    def prepare(self, cql: str) -> Any:
        raise NoHostAvailable("Unable to complete the operation against any hosts", {})


def test_a_statement_prepared_while_every_node_is_down_is_unavailable_not_unknown() -> None:
    # First used while the nodes are down (a queue resumed during an outage): the driver's
    # NoHostAvailable is no DriverException, and escaped as gRPC UNKNOWN.
    session = CassandraSession(CassandraConfig.from_url("cassandra://127.0.0.1:1/ks"))
    session._session = _DownSession()
    with pytest.raises(BackendUnavailable, match="Unable to complete"):
        session.prepare("SELECT x FROM t WHERE k = ?")
