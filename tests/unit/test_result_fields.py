"""The text of a worker's result against its caps (``server.api.result_fields``): over a cap
or malformed is refused naming the field and the cap, never trimmed; and what the worker SDK
sends always fits (it cuts a long error itself, saying so, and fails a run whose output is
over the cap), so no failure becomes unreportable."""

from __future__ import annotations

import os
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest

from server.api.result_fields import check_result_text
from tikk.errors import InvalidArgument
from tikk.settings import Limits
from tikk.v1 import worker_pb2
from worker_sdk import Worker
from worker_sdk.context import NonRetryableError, Retry, TaskContext
from worker_sdk.execution import set_failure
from worker_sdk.queues.consumer import Message

LIMITS = Limits()
_AT = datetime(2030, 1, 1, tzinfo=UTC)


def _result(**fields: Any) -> worker_pb2.RunResult:
    return worker_pb2.RunResult(**{"run_id": uuid.uuid4().hex, "worker_id": "w1", **fields})


@pytest.mark.parametrize(
    "fields",
    [
        {"run_id": "r" * 128},
        {"run_id": "01J9Z3-run.7:attempt@host/a+b=c_d"},
        {"worker_id": ""},
        {"worker_id": "w" * 128},
        {"worker_id": "worker 7 на хосте"},
        {"error_type": "E" * 256},
        {"error_message": "Traceback:\n\tline 1\r\n\x1b[31mred\x1b[0m\x00" + "m" * 8_000},
        {"error_message": "m" * 8_192},
        {"output": b"\x00\xff" * 32_768},
        {"traceback": 'Traceback (most recent call last):\n  File "h.py"\n' + "t" * 16_000},
    ],
)
def test_text_within_the_caps_is_taken_as_it_came(fields: dict[str, Any]) -> None:
    check_result_text(_result(**fields), LIMITS)


@pytest.mark.parametrize(
    ("fields", "field", "reason"),
    [
        ({"run_id": ""}, "run_id", "must not be empty"),
        ({"run_id": "r" * 129}, "run_id", "longer than 128 characters (max_run_id_length): 129"),
        ({"run_id": "r1\nforged"}, "run_id", "contains U+000A (a control character)"),
        ({"run_id": "run 1"}, "run_id", "may contain only A-Z a-z 0-9 . _ : @ / + = -"),
        ({"run_id": "rün"}, "run_id", "may contain only"),
        ({"worker_id": "w" * 129}, "worker_id", "longer than 128 characters"),
        ({"worker_id": "w\x1b[2J"}, "worker_id", "contains U+001B (a control character)"),
        ({"worker_id": "w\u202e1"}, "worker_id", "contains U+202E (a bidi control)"),
        ({"error_type": "E" * 257}, "error_type", "(max_error_type_length): 257"),
        ({"error_message": "m" * 8_193}, "error_message", "longer than 8,192 characters"),
        ({"output": b"o" * 65_537}, "output", "larger than 65,536 bytes (max_output_bytes)"),
        ({"traceback": "t" * 16_385}, "traceback", "(max_traceback_length): 16,385"),
    ],
)  # fmt: skip
def test_text_over_a_cap_or_malformed_is_refused_naming_the_field(
    fields: dict[str, Any], field: str, reason: str
) -> None:
    with pytest.raises(InvalidArgument) as err:
        check_result_text(_result(**fields), LIMITS)
    assert err.value.field == field and reason in err.value.reason, err.value


def test_the_sdks_own_ids_are_taken() -> None:
    """The run ids a worker makes (of a run, of a start claim) and its default worker id."""
    worker = Worker(["q"])
    for run_id in (os.urandom(16).hex(), uuid.uuid4().hex):
        check_result_text(_result(run_id=run_id, worker_id=worker.worker_id), LIMITS)


def test_the_sdk_cuts_a_long_error_to_fit_and_says_so() -> None:
    result = _result()
    set_failure(result, worker_pb2.RESULT_KIND_FAILED, "E" * 1_000, "trace\n" * 20_000)
    check_result_text(result, LIMITS)
    assert result.error_message.startswith("trace\ntrace\n")
    assert result.error_message.endswith(" more characters cut)")
    assert result.error_type.startswith("EEE") and result.error_type.endswith("cut)")
    kept = len(result.error_message) - len(result.error_message.rpartition("…")[2]) - 1
    assert f"…({120_000 - kept:,} more characters cut)" in result.error_message
    short = _result()
    set_failure(short, worker_pb2.RESULT_KIND_FAILED, "ValueError", "bad input")
    assert (short.error_type, short.error_message) == ("ValueError", "bad input")


async def _execute(handler: Any, payload: bytes = b"") -> worker_pb2.RunResult:
    """A run of ``handler`` as a Worker makes it (chain, decoding, encoding), reported nowhere."""
    worker = Worker(["q"], concurrency=1, worker_id="w1")
    worker.register("h", handler)
    delivery = worker_pb2.Delivery(namespace="default", task_id="t", queue="q", handler="h",
                                   payload=payload, attempt=1, max_attempts=3)  # fmt: skip
    return await worker.execute(Message(delivery, 1, None))


async def _run(output: bytes) -> worker_pb2.RunResult:
    return await _execute(lambda ctx, payload: output)


async def test_a_run_whose_output_is_over_the_cap_fails_instead_of_being_refused() -> None:
    """Refused, its result would be reported for ever: the run fails (and is retried or
    dead-lettered by its policy), and that result fits."""
    result = await _run(b"o" * (64 * 1024 + 1))
    assert result.kind == worker_pb2.RESULT_KIND_FAILED and result.output == b""
    assert result.error_type == "ValueError"
    assert result.error_message == (
        "handler returned 65,537 bytes of output; a result holds at most 65,536"
    )
    check_result_text(result, LIMITS)
    fits = await _run(b"o" * 64 * 1024)
    assert fits.kind == worker_pb2.RESULT_KIND_SUCCEEDED and len(fits.output) == 64 * 1024


async def test_a_non_retryable_error_with_a_huge_message_is_still_reported() -> None:
    def handler(ctx: TaskContext, payload: bytes) -> bytes:
        raise NonRetryableError("x" * 1_000_000)

    result = await _execute(handler)
    assert result.kind == worker_pb2.RESULT_KIND_FAILED_PERMANENTLY
    check_result_text(result, LIMITS)


def _fails_deep_inside(ctx: TaskContext, payload: bytes) -> bytes:
    return _parse_order(payload)


def _parse_order(payload: bytes) -> bytes:
    raise KeyError(f"no field 'sku' in {payload!r}")


async def test_a_failed_run_carries_its_traceback_from_the_handler_down() -> None:
    result = await _execute(_fails_deep_inside, b"{}")
    assert result.kind == worker_pb2.RESULT_KIND_FAILED and result.error_type == "KeyError"
    trace = result.traceback
    assert trace.startswith("Traceback (most recent call last):\n")
    assert trace.index("in _fails_deep_inside") < trace.index("in _parse_order")
    assert trace.endswith("KeyError: \"no field 'sku' in b'{}'\"\n")
    assert "in call_handler" not in trace and "concurrent" not in trace
    assert trace.splitlines()[1].endswith("in _fails_deep_inside")


async def test_a_permanent_failure_has_a_traceback_and_a_requested_retry_has_none() -> None:
    async def give_up(ctx: TaskContext, payload: bytes) -> bytes:
        raise NonRetryableError("card declined")

    async def later(ctx: TaskContext, payload: bytes) -> bytes:
        raise Retry(30)

    failed, retried = await _execute(give_up), await _execute(later)
    assert "in give_up" in failed.traceback and failed.traceback.endswith("card declined\n")
    assert retried.kind == worker_pb2.RESULT_KIND_RETRY and retried.traceback == ""


def test_the_sdk_keeps_the_end_of_a_long_traceback() -> None:
    """The end is where the exception was raised; the mark says how much of the start went."""
    result = _result()
    trace = "".join(f"  frame {i}\n" for i in range(10_000)) + "ValueError: last words\n"
    set_failure(result, worker_pb2.RESULT_KIND_FAILED, "ValueError", "x", trace)
    check_result_text(result, LIMITS)
    assert len(result.traceback) <= 8192
    assert result.traceback.endswith("  frame 9999\nValueError: last words\n")
    cut, _, kept = result.traceback.partition("…")
    assert cut == f"({len(trace) - len(kept):,} characters cut)" and trace.endswith(kept)
