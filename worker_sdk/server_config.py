"""A worker's first call: the server's settings for workers, asked again with backoff until
the server answers, and why it did not, told so that whoever runs the worker can act."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import grpc

from tikk.v1 import worker_pb2
from worker_sdk.results import Backoff

log = logging.getLogger("tikk.worker")

_CONFIG_TIMEOUT_S = 10.0  # one GetWorkerConfig attempt


async def worker_config(
    stub: Any, server: str, stop: asyncio.Event
) -> worker_pb2.GetWorkerConfigResponse | None:
    """The server's settings for workers. A server that is down or not ready yet is asked
    again with backoff until it answers; None if ``stop`` is set first."""
    backoff = Backoff()
    while not stop.is_set():
        try:
            config: worker_pb2.GetWorkerConfigResponse = await stub.GetWorkerConfig(
                worker_pb2.GetWorkerConfigRequest(), timeout=_CONFIG_TIMEOUT_S
            )
            return config
        except grpc.aio.AioRpcError as exc:
            delay = backoff.next()
            log.warning("server %s %s; asking again in %.1f s", server, unanswered(exc), delay)
            await sleep_unless(stop, delay)
    return None


def unanswered(exc: grpc.aio.AioRpcError) -> str:
    """Why the server gave no configuration, told so that whoever runs the worker can act:
    a refused handshake or credential is not a server that is down."""
    code, details = exc.code(), exc.details() or ""
    if "handshake" in details.lower() or "CERTIFICATE_VERIFY_FAILED" in details:
        return (
            "refused the TLS handshake: check that --tls-ca names the CA of the server's "
            f"certificate and --tls-server-name its name ({code.name}: {details})"
        )
    if code is grpc.StatusCode.UNAUTHENTICATED:
        return f"refused the worker's credential (--token-file or $TIKK_TOKEN): {details}"
    if code is grpc.StatusCode.PERMISSION_DENIED:
        return f"refused the worker: {details}"
    return f"did not answer ({code.name}: {details})"


async def sleep_unless(stop: asyncio.Event, seconds: float) -> None:
    """Sleep ``seconds``, or less if ``stop`` is set meanwhile."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(seconds):  # no task per sleep, unlike wait_for
            await stop.wait()
