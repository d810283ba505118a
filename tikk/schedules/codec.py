"""How a schedule is stored: one JSON document per schedule, the same in every backend.

The document holds everything but the key and the version, which backends keep in columns of
their own (the version is what conditional writes compare). A field added to ``Schedule`` is
added here once; documents written before it read with the field's default.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from tikk.model import RetryPolicy
from tikk.schedules.model import CatchUp, Overlap, Schedule, ScheduleAction, SchedulePolicy
from tikk.schedules.spec import ScheduleSpec


def encode_schedule(s: Schedule) -> str:
    spec, action, policy, retry = s.spec, s.action, s.policy, s.action.retry
    doc: dict[str, Any] = {
        "spec": {
            "cron": spec.cron, "interval_ms": spec.interval_ms, "phase_ms": spec.phase_ms,
            "timezone": spec.timezone, "start_ms": spec.start_ms, "end_ms": spec.end_ms,
            "max_runs": spec.max_runs, "jitter_ms": spec.jitter_ms,
        },
        "action": {
            "queue": action.queue, "handler": action.handler,
            "payload": base64.b64encode(action.payload).decode(), "labels": dict(action.labels),
            "retry": {
                "max_attempts": retry.max_attempts, "initial_backoff_ms": retry.initial_backoff_ms,
                "multiplier": retry.multiplier, "max_backoff_ms": retry.max_backoff_ms,
                "jitter": retry.jitter,
            },
        },
        "policy": {
            "catch_up_window_ms": policy.catch_up_window_ms, "catch_up": int(policy.catch_up),
            "catch_up_max_runs": policy.catch_up_max_runs, "overlap": int(policy.overlap),
            "pause_after_failures": policy.pause_after_failures,
        },
        "shard": s.shard, "created_ms": s.created_ms, "updated_ms": s.updated_ms,
        "fingerprint": s.fingerprint, "paused": s.paused, "pause_note": s.pause_note,
        "runs": s.runs, "consecutive_failures": s.consecutive_failures,
        "next_nominal_ms": s.next_nominal_ms, "next_fire_ms": s.next_fire_ms,
        "last_fire_ms": s.last_fire_ms, "last_task_id": s.last_task_id,
        "buffered_nominal_ms": s.buffered_nominal_ms, "revision": s.revision,
    }  # fmt: skip
    return json.dumps(doc, separators=(",", ":"), sort_keys=True)


def decode_schedule(namespace: str, schedule_id: str, version: int, body: str) -> Schedule:
    doc = json.loads(body)
    a, p = doc["action"], doc["policy"]
    return Schedule(
        namespace=namespace,
        schedule_id=schedule_id,
        spec=ScheduleSpec(**doc["spec"]),
        action=ScheduleAction(
            queue=a["queue"],
            handler=a["handler"],
            payload=base64.b64decode(a["payload"]),
            labels=a["labels"],
            retry=RetryPolicy(**a["retry"]),
        ),
        policy=SchedulePolicy(
            catch_up_window_ms=p["catch_up_window_ms"],
            catch_up=CatchUp(p["catch_up"]),
            catch_up_max_runs=p["catch_up_max_runs"],
            overlap=Overlap(p["overlap"]),
            pause_after_failures=p["pause_after_failures"],
        ),
        shard=doc["shard"],
        created_ms=doc["created_ms"],
        updated_ms=doc["updated_ms"],
        fingerprint=doc["fingerprint"],
        paused=doc.get("paused", False),
        pause_note=doc.get("pause_note", ""),
        runs=doc.get("runs", 0),
        consecutive_failures=doc.get("consecutive_failures", 0),
        next_nominal_ms=doc.get("next_nominal_ms"),
        next_fire_ms=doc.get("next_fire_ms"),
        last_fire_ms=doc.get("last_fire_ms"),
        last_task_id=doc.get("last_task_id", ""),
        buffered_nominal_ms=doc.get("buffered_nominal_ms"),
        version=version,
        revision=doc.get("revision", 1),
    )
