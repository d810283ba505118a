"""The task and schedule stores' Cassandra schema (``tikk migrate``): numbered steps, each
applied once by ``tikk.drivers.cassandra_schema.run_migrations``; and what ``migrate``
writes besides tables (the shard count, the shards' cursors)."""

from __future__ import annotations

from tikk.drivers.cassandra import CassandraSession
from tikk.drivers.cassandra_schema import Migration
from tikk.store.tasks import check_shard_count

# Rows of the due index expire this long after their due time: long past any cursor.
DUE_RETENTION_S = 2 * 86_400
# Finished tasks (and their listing rows) are kept this long after their due time, unless
# their namespace's retention says otherwise (``CassandraTaskStore.keep_for``); never less
# than a day, so that no task still running expires under its worker.
TASK_RETENTION_S = 30 * 86_400
MIN_TASK_RETENTION_S = 86_400

STORE_MIGRATIONS = [
    Migration("store", 1, "tasks, due index, cursors, listings", [
        """CREATE TABLE IF NOT EXISTS tasks (
            namespace text, task_id text, queue text, handler text, payload blob,
            labels map<text, text>, max_attempts int, initial_backoff_ms bigint,
            multiplier double, max_backoff_ms bigint, jitter double, state int, attempt int,
            due_ms bigint, scheduled_ms bigint, created_ms bigint, updated_ms bigint, shard int,
            fingerprint text, last_error_type text, last_error_message text,
            PRIMARY KEY ((namespace, task_id)))""",
        # Partition = (shard, minute of due), clustering = (second, task key): a dispatcher
        # reads one small partition slice after its cursor. Rows expire (TTL) after their
        # due time instead of being deleted, so scans never meet per-row tombstones.
        """CREATE TABLE IF NOT EXISTS due_index (
            shard int, minute bigint, second bigint, task_key text, due_ms bigint,
            namespace text, task_id text, attempt int, queue text, handler text, payload blob,
            labels map<text, text>, max_attempts int, scheduled_ms bigint,
            PRIMARY KEY ((shard, minute), second, task_key))
            WITH compaction = {'class': 'TimeWindowCompactionStrategy',
                               'compaction_window_unit': 'HOURS', 'compaction_window_size': 6}
            AND gc_grace_seconds = 3600""",
        # Every cursor in one small partition, so a dispatcher moves all of its shards'
        # cursors in one conditional (fenced) batch per flush.
        """CREATE TABLE IF NOT EXISTS cursors (
            ring int, shard int, second bigint, epoch bigint, PRIMARY KEY ((ring), shard))""",
        # Listing by queue: one partition per (namespace, queue, shard), rows expire with
        # the task's retention, so no partition grows without bound.
        """CREATE TABLE IF NOT EXISTS tasks_by_queue (
            namespace text, queue text, shard int, task_id text,
            PRIMARY KEY ((namespace, queue, shard), task_id))""",
        # Dead letters by day, newest first.
        """CREATE TABLE IF NOT EXISTS dead_letters (
            namespace text, day bigint, updated_ms bigint, task_id text, queue text,
            PRIMARY KEY ((namespace, day), updated_ms, task_id))
            WITH CLUSTERING ORDER BY (updated_ms DESC, task_id DESC)""",
    ]),
    # Cassandra 5 accepts IF NOT EXISTS on ADD, which keeps the step re-runnable.
    Migration("store", 2, "trace context of the creating call", [
        "ALTER TABLE tasks ADD IF NOT EXISTS trace_context map<text, text>",
        "ALTER TABLE due_index ADD IF NOT EXISTS trace_context map<text, text>",
    ]),
    Migration("store", 3, "schedule occurrences and ticks", [
        "ALTER TABLE tasks ADD IF NOT EXISTS schedule_id text",
        "ALTER TABLE due_index ADD IF NOT EXISTS schedule_id text",
    ]),
    Migration("store", 4, "schedules and their listing", [
        """CREATE TABLE IF NOT EXISTS schedules (
            namespace text, schedule_id text, version int, fingerprint text, body text,
            PRIMARY KEY ((namespace, schedule_id)))""",
        # Listing: a namespace's ids spread over a fixed number of partitions (see
        # tikk.store.cassandra.schedules.LISTING_SHARDS), so none grows with the namespace.
        """CREATE TABLE IF NOT EXISTS schedules_by_namespace (
            namespace text, shard int, schedule_id text,
            PRIMARY KEY ((namespace, shard), schedule_id))""",
    ]),
    Migration("store", 5, "hand-off marks, interrupted creates, store settings", [
        # The due time of the delivery the queue accepted (tikk.store.tasks.DUE_READ_COLUMNS).
        "ALTER TABLE due_index ADD IF NOT EXISTS handed_off_ms bigint",
        # A create with a client id marks its first write pending and its second done; a
        # task with only the first mark is invisible (tikk.store.cassandra.tasks.CREATE_TASK).
        "ALTER TABLE tasks ADD IF NOT EXISTS create_pending boolean",
        "ALTER TABLE tasks ADD IF NOT EXISTS create_done boolean",
        # Settings fixed for the life of the data, such as the shard count.
        """CREATE TABLE IF NOT EXISTS store_meta (key text, value text, PRIMARY KEY (key))""",
    ]),
    Migration("store", 6, "schedule-to-start timeouts", [
        "ALTER TABLE tasks ADD IF NOT EXISTS start_timeout_ms bigint",
        "ALTER TABLE due_index ADD IF NOT EXISTS start_timeout_ms bigint",
        # Who won an attempt's start: a worker ('started') or its deadline ('expired'),
        # decided by one lightweight transaction per attempt.
        """CREATE TABLE IF NOT EXISTS start_claims (
            namespace text, task_id text, attempt int, due_ms bigint, claim text,
            claimed_ms bigint, PRIMARY KEY ((namespace, task_id), attempt, due_ms))""",
    ]),
    # Callers of the API (tikk.store.cassandra.credentials): few rows, read whole by every
    # server every few seconds.
    Migration("store", 7, "credentials of the API's callers", [
        """CREATE TABLE IF NOT EXISTS credentials (
            credential_id text, name text, salt blob, secret_hash blob, grants list<text>,
            subject text, created_ms bigint, revoked_ms bigint, rotated_ms bigint,
            PRIMARY KEY ((credential_id)))""",
    ]),
    Migration("store", 8, "namespace quotas and task usage", [
        """CREATE TABLE IF NOT EXISTS namespace_quotas (
            namespace text PRIMARY KEY, tasks_per_second bigint, tasks_stored bigint,
            schedules bigint, import_streams bigint, updated_ms bigint)""",
        # Unfinished tasks per namespace (``tikk.store.cassandra.quotas``); a counter table
        # holds counters only.
        """CREATE TABLE IF NOT EXISTS task_usage (
            namespace text PRIMARY KEY, open_tasks counter)""",
    ]),
    # Which report's success holds (``tikk.store.cassandra.successes``): two written at the
    # same timestamp are told apart by this cell, whose tie Cassandra breaks the same way
    # for every reader.
    Migration("store", 9, "successes without a consensus round", [
        "ALTER TABLE tasks ADD IF NOT EXISTS succeeded_by text",
    ]),
    # Tasks due per minute and queue (``tikk.store.cassandra.due_counts``): one partition
    # per namespace and day, so the next hour is one or two partition slices.
    Migration("store", 10, "due counts per minute", [
        """CREATE TABLE IF NOT EXISTS due_counts (
            namespace text, day bigint, minute bigint, queue text, tasks counter,
            PRIMARY KEY ((namespace, day), minute, queue))""",
    ]),
    # Creates drawn from a namespace's tasks_per_second, per second, by every server process
    # together (``tikk.store.cassandra.quotas``); a row outlives its second briefly.
    Migration("store", 11, "a namespace's rate drawn by every server", [
        """CREATE TABLE IF NOT EXISTS quota_rate (
            namespace text, second bigint, used int, PRIMARY KEY ((namespace, second)))
            WITH default_time_to_live = 300""",
    ]),
    # A label's tasks (``TaskStore.list_by_label``), one partition per namespace, label
    # (``key=value``) and shard, so none grows past a shard's share of one label; rows
    # expire with the task. Tasks created before this step are not in it.
    Migration("store", 12, "tasks by label", [
        """CREATE TABLE IF NOT EXISTS tasks_by_label (
            namespace text, label text, shard int, task_id text,
            PRIMARY KEY ((namespace, label, shard), task_id))""",
    ]),
    # Bulk actions (``tikk.store.cassandra.bulk_actions``): a namespace's actions in one
    # partition, kept 30 days; the running ones listed in one small partition.
    Migration("store", 13, "bulk actions", [
        """CREATE TABLE IF NOT EXISTS bulk_actions (
            namespace text, action_id text, version int, state int, body text,
            PRIMARY KEY ((namespace), action_id))
            WITH CLUSTERING ORDER BY (action_id DESC) AND default_time_to_live = 2592000""",
        """CREATE TABLE IF NOT EXISTS bulk_actions_running (
            ring int, namespace text, action_id text,
            PRIMARY KEY ((ring), namespace, action_id))""",
    ]),
    Migration("store", 14, "retention of finished tasks and runs per namespace", [
        "ALTER TABLE namespace_quotas ADD IF NOT EXISTS task_retention_seconds bigint",
        "ALTER TABLE namespace_quotas ADD IF NOT EXISTS history_retention_seconds bigint",
    ]),
    # Paused and rate-limited queues (``tikk.store.cassandra.queue_holds``): every queue's
    # control in one small partition; parked rows by queue and shard in due order.
    Migration("store", 15, "queue controls and parked rows", [
        """CREATE TABLE IF NOT EXISTS queue_controls (
            ring int, queue text, paused boolean, paused_ms bigint, rate_per_s double,
            skip_older_than_ms bigint, updated_ms bigint, PRIMARY KEY ((ring), queue))""",
        """CREATE TABLE IF NOT EXISTS parked_rows (
            queue text, shard int, due_ms bigint, task_key text, namespace text, task_id text,
            attempt int, handler text, payload blob, labels map<text, text>, max_attempts int,
            scheduled_ms bigint, trace_context map<text, text>, schedule_id text,
            start_timeout_ms bigint, PRIMARY KEY ((queue, shard), due_ms, task_key))
            WITH gc_grace_seconds = 3600""",
    ]),
    # A task's own execution timeout, carried to its deliveries (every row a delivery is
    # built from: the task, its due row, its parked row).
    Migration("store", 16, "execution timeouts", [
        "ALTER TABLE tasks ADD IF NOT EXISTS execution_timeout_ms bigint",
        "ALTER TABLE due_index ADD IF NOT EXISTS execution_timeout_ms bigint",
        "ALTER TABLE parked_rows ADD IF NOT EXISTS execution_timeout_ms bigint",
    ]),
]  # fmt: skip


# A shard's first cursor (a dispatcher's first flush, or ``migrate`` with epoch 0).
INIT_CURSOR = "INSERT INTO cursors (ring, shard, second, epoch) VALUES (0, ?, ?, ?) IF NOT EXISTS"


def record_shard_count(session: CassandraSession, shard_count: int) -> None:
    """Store the shard count with the data, or check it against the one stored (blocking)."""
    statement = session.prepare("INSERT INTO store_meta (key, value) VALUES (?, ?) IF NOT EXISTS")
    row = session.session.execute(statement, ("shard_count", str(shard_count))).one()
    if not row[0]:
        check_shard_count(int(row.value), shard_count)


def init_cursors(session: CassandraSession, shard_count: int, now_s: int) -> int:
    """Start every shard's cursor a minute before ``now_s`` (blocking; existing cursors are
    kept).

    Nothing can be due before the store accepted it, and a scan from second 0 would walk
    every minute bucket since 1970. A minute back rather than a second: a running
    dispatcher's cursor trails its clock by the late-write grace, and a fresh one that did
    not would look to the servers like a dispatcher clock running ahead of theirs
    (``server.late_writes``). Returns how many cursors were created.
    """
    statement = session.prepare(INIT_CURSOR)
    created = 0
    for shard in range(shard_count):
        row = session.session.execute(statement, (shard, now_s - 60, 0)).one()
        created += bool(row[0])
    return created
