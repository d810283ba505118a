"""The producers of the ready queues (the port is ``tikk.ready_queue``): ``local`` (embedded, a
SQLite file shared with local workers) and ``kafka``. The consumer side lives in
``worker_sdk.queues``; what both sides must agree on is ``tikk.queue_contract``."""
