"""The application layer: what each operation does, on domain objects, with no protobuf.

One owner per kind of operation, each holding its ports (stores, history, queue, clock)
privately:

- ``tasks.TaskOps``: creates (single and imported alike: queue prepared, quotas admitted,
  late-write guard, store), cancels, re-drives, reads of tasks, dead letters and queues;
- ``results.ResultRecorder``: what a worker's result does (its token checked, start claims,
  successes coalesced, failures, retries, dead letters, refusals);
- ``start_timeouts.StartTimeouts``: attempts no worker started in time, for the dispatcher
  and the recorder;
- ``schedules.ScheduleOps``: schedule operations with their quota checks;
- ``history.HistoryOps``: reads of the run history;
- ``admin.AdminOps``: namespaces' quotas and usage.

``late_writes`` (the guard) and ``quotas`` (the gate) serve these objects only. The gRPC
services (``server.api``) convert a request, make one call here and convert the answer;
``server.app`` assembles both from the backends of ``server.wiring``.
"""
