"""The embedded store's tables (task store and schedule store share one SQLite file). A file
creates its tables when a store opens it; columns added since the first release are added to
older files then too (``ADDED_COLUMNS``)."""

from __future__ import annotations

# The label index (``TaskStore.list_by_label``): a row per task and label, ``key=value`` (a
# key holds no ``=``), kept by triggers on the task table whoever writes it. Labels never
# change after a create, so inserts and deletes are all there is to follow. Tasks stored
# before the index existed are indexed once, when its marker row is inserted (the
# ``task_usage`` way, ``tikk.store.sqlite.quotas``).
_LABEL = "json_each.key || '=' || json_each.value"
TASKS_SCHEMA = """
CREATE TABLE IF NOT EXISTS tasks (
    namespace TEXT NOT NULL,
    task_id TEXT NOT NULL,
    queue TEXT NOT NULL,
    handler TEXT NOT NULL,
    payload BLOB NOT NULL,
    labels TEXT NOT NULL,
    max_attempts INTEGER NOT NULL,
    initial_backoff_ms INTEGER NOT NULL,
    multiplier REAL NOT NULL,
    max_backoff_ms INTEGER NOT NULL,
    jitter REAL NOT NULL,
    state INTEGER NOT NULL,
    attempt INTEGER NOT NULL,
    due_ms INTEGER NOT NULL,
    scheduled_ms INTEGER NOT NULL,
    created_ms INTEGER NOT NULL,
    updated_ms INTEGER NOT NULL,
    shard INTEGER NOT NULL,
    fingerprint TEXT NOT NULL,
    last_error_type TEXT NOT NULL DEFAULT '',
    last_error_message TEXT NOT NULL DEFAULT '',
    trace_context TEXT NOT NULL DEFAULT '{}',
    schedule_id TEXT NOT NULL DEFAULT '',
    start_timeout_ms INTEGER NOT NULL DEFAULT 0,
    execution_timeout_ms INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (namespace, task_id)
);
CREATE INDEX IF NOT EXISTS tasks_by_queue ON tasks (namespace, queue, state, task_id);
CREATE INDEX IF NOT EXISTS tasks_by_state ON tasks (namespace, state, updated_ms, task_id);
CREATE TABLE IF NOT EXISTS due (
    shard INTEGER NOT NULL,
    minute INTEGER NOT NULL,
    second INTEGER NOT NULL,
    task_key TEXT NOT NULL,
    due_ms INTEGER NOT NULL,
    namespace TEXT NOT NULL,
    task_id TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    queue TEXT NOT NULL,
    handler TEXT NOT NULL,
    payload BLOB NOT NULL,
    labels TEXT NOT NULL,
    max_attempts INTEGER NOT NULL,
    scheduled_ms INTEGER NOT NULL,
    trace_context TEXT NOT NULL DEFAULT '{}',
    schedule_id TEXT NOT NULL DEFAULT '',
    start_timeout_ms INTEGER NOT NULL DEFAULT 0,
    execution_timeout_ms INTEGER NOT NULL DEFAULT 0,
    handed_off_ms INTEGER,
    PRIMARY KEY (shard, minute, second, task_key)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS cursors (
    shard INTEGER PRIMARY KEY,
    second INTEGER NOT NULL,
    epoch INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS store_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS start_claims (
    namespace TEXT NOT NULL,
    task_id TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    due_ms INTEGER NOT NULL,
    claim TEXT NOT NULL,
    claimed_ms INTEGER NOT NULL,
    PRIMARY KEY (namespace, task_id, attempt, due_ms)
) WITHOUT ROWID;
"""
# Run after the usage schema (``tikk.store.sqlite.quotas``) by every opener that writes tasks:
# its insert into store_meta prepares every trigger on that table, the usage's seed included.
TASK_LABELS_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS task_labels (
    namespace TEXT NOT NULL,
    label TEXT NOT NULL,
    task_id TEXT NOT NULL,
    PRIMARY KEY (namespace, label, task_id)
) WITHOUT ROWID;
CREATE TRIGGER IF NOT EXISTS task_labels_insert AFTER INSERT ON tasks
    WHEN NEW.labels <> '{{}}'
    BEGIN
        INSERT OR IGNORE INTO task_labels
            SELECT NEW.namespace, {_LABEL}, NEW.task_id FROM json_each(NEW.labels);
    END;
CREATE TRIGGER IF NOT EXISTS task_labels_delete AFTER DELETE ON tasks
    WHEN OLD.labels <> '{{}}'
    BEGIN
        DELETE FROM task_labels WHERE namespace = OLD.namespace AND task_id = OLD.task_id
            AND label IN (SELECT {_LABEL} FROM json_each(OLD.labels));
    END;
CREATE TRIGGER IF NOT EXISTS task_labels_seed AFTER INSERT ON store_meta
    WHEN NEW.key = 'task_labels'
    BEGIN
        INSERT OR IGNORE INTO task_labels
            SELECT tasks.namespace, {_LABEL}, tasks.task_id FROM tasks, json_each(tasks.labels)
            WHERE tasks.labels <> '{{}}';
    END;
INSERT OR IGNORE INTO store_meta VALUES ('task_labels', 'indexed');
"""

# Columns added after the first release: files created before get them on open.
ADDED_COLUMNS = {
    "tasks": {
        "trace_context": "TEXT NOT NULL DEFAULT '{}'",
        "schedule_id": "TEXT NOT NULL DEFAULT ''",
        "start_timeout_ms": "INTEGER NOT NULL DEFAULT 0",
        "execution_timeout_ms": "INTEGER NOT NULL DEFAULT 0",
    },
    "due": {
        "trace_context": "TEXT NOT NULL DEFAULT '{}'",
        "schedule_id": "TEXT NOT NULL DEFAULT ''",
        "start_timeout_ms": "INTEGER NOT NULL DEFAULT 0",
        "handed_off_ms": "INTEGER",
        "execution_timeout_ms": "INTEGER NOT NULL DEFAULT 0",
    },
}


SCHEDULES_SCHEMA = """
CREATE TABLE IF NOT EXISTS schedules (
    namespace TEXT NOT NULL,
    schedule_id TEXT NOT NULL,
    version INTEGER NOT NULL,
    fingerprint TEXT NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (namespace, schedule_id)
);
"""
