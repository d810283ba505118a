"""How a tikk process writes its log: lines of text (the default), or with ``--log-format
json`` (or ``$TIKK_LOG_FORMAT``) one JSON object per line for a log pipeline.

A JSON line holds the time (UTC, ISO 8601), level, logger and message, the ids the line is
about where the code knows them (``namespace``, ``task_id``, ``queue``, ``run_id``, passed
as ``extra=``), the current trace id when tracing is on, and a failure's traceback as
``error``. Text in either form is escaped and bounded first (``tikk.text_rules``).
"""

from __future__ import annotations

import json
import logging
import os
import sys
from datetime import UTC, datetime

from tikk.text_rules import bound_log_text

FORMATS = ("text", "json")
# The ids a log call may pass in ``extra=``, copied into the JSON line under these names.
ID_FIELDS = ("namespace", "task_id", "queue", "run_id", "schedule_id", "worker_id")
_TEXT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class JsonLines(logging.Formatter):
    """One JSON object per record (see the module)."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, str] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        line.update({k: str(getattr(record, k)) for k in ID_FIELDS if hasattr(record, k)})
        if trace := _trace_id():
            line["trace_id"] = trace
        if record.exc_info:
            line["error"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False)


def _trace_id() -> str:
    """The current span's trace id, if OpenTelemetry is loaded and a span is current."""
    trace = sys.modules.get("opentelemetry.trace")
    if trace is None:
        return ""
    context = trace.get_current_span().get_span_context()
    return format(context.trace_id, "032x") if context.is_valid else ""


def configure_logging(log_format: str | None = None) -> None:
    """The root logger at ``$TIKK_LOG_LEVEL`` (WARNING by default), in ``log_format`` (else
    ``$TIKK_LOG_FORMAT``, else text), its text bounded."""
    chosen = log_format or os.environ.get("TIKK_LOG_FORMAT", "text")
    logging.basicConfig(level=os.environ.get("TIKK_LOG_LEVEL", "WARNING"), format=_TEXT)
    if chosen == "json":
        for handler in logging.getLogger().handlers:
            handler.setFormatter(JsonLines())
    bound_log_text()
