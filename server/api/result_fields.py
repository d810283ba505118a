"""The text a worker's result carries into the run history, checked at the edge against
``Limits``: refused (``InvalidArgument`` naming the field and its cap), never trimmed.

The run id and the worker id are identifiers: a run id is 1-128 of ``A-Z a-z 0-9 . _ : @ / + =
-`` (the worker SDK's are 32 hex digits), a worker id (empty, or a host name and pid by
default) is a name (``tikk.text_rules``). The error type, the error message, the traceback
and the output are stored as they came, within their caps: an error may hold newlines and
anything else; whatever prints it escapes it (``tikk.text_rules.shown``).
"""

from __future__ import annotations

import re

from tikk.errors import InvalidArgument
from tikk.settings import Limits
from tikk.text_rules import check_name
from tikk.v1 import worker_pb2

_RUN_ID = re.compile(r"[A-Za-z0-9._:@/+=-]+")


def check_result_text(r: worker_pb2.RunResult, limits: Limits) -> None:
    """Refuse ``r`` if one of its texts is malformed or over its cap (see the module)."""
    _check_run_id(r.run_id, limits)
    _check_worker_id(r.worker_id, limits)
    _at_most(r.error_type, limits.max_error_type_length, "error_type", "max_error_type_length")
    _at_most(
        r.error_message, limits.max_error_message_length, "error_message",
        "max_error_message_length",
    )  # fmt: skip
    _at_most(r.traceback, limits.max_traceback_length, "traceback", "max_traceback_length")
    if len(r.output) > limits.max_output_bytes:
        raise InvalidArgument(
            "output", f"larger than {limits.max_output_bytes:,} bytes (max_output_bytes): "
            f"{len(r.output):,}",
        )  # fmt: skip


def _check_run_id(value: str, limits: Limits) -> None:
    if not value:
        raise InvalidArgument("run_id", "must not be empty")
    _at_most(value, limits.max_run_id_length, "run_id", "max_run_id_length")
    if not _RUN_ID.fullmatch(value):
        # The character rule first: a run id with a newline is named as such.
        check_name(value, "run_id")
        raise InvalidArgument("run_id", "may contain only A-Z a-z 0-9 . _ : @ / + = -")


def _check_worker_id(value: str, limits: Limits) -> None:
    _at_most(value, limits.max_worker_id_length, "worker_id", "max_worker_id_length")
    check_name(value, "worker_id")


def _at_most(value: str, most: int, field: str, limit: str) -> None:
    if len(value) > most:
        raise InvalidArgument(field, f"longer than {most:,} characters ({limit}): {len(value):,}")
