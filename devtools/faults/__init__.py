"""A Jepsen-shaped fault suite: real processes on the real stack, a nemesis, and a checker.

tikk promises that an accepted task (``CreateTask`` returned OK) runs at least once, through a
``kill -9`` of any process, and never before its due time. The suite tries to break that:

* ``cluster``: one server, two dispatchers (ZooKeeper ownership), two workers, in a keyspace,
  topic prefix and ZooKeeper chroot of their own, each process in its own process group;
* ``workload``: a client creating tasks at a steady rate (some due now, some failing once,
  some always failing, some cancelled before their due time) and recording every call;
* ``worker_app``: the workers' handlers, appending one JSON line per handler start;
* ``nemesis``: ``kill -9`` and restart of any process, a dispatcher paused past its ZooKeeper
  session, Kafka or Cassandra stopped for a while, each recorded as a window; ``storm``: the
  schedule that brings one of a random kind every 10-15 s;
* ``checker``: pure functions over the records (lost, early, duplicates, cancelled but ran,
  key consistency, dead-letter exactness); ``lateness``: how late handlers started, inside
  and outside fault windows and over the whole run, and how each fault was recovered from;
* ``records`` are what a run keeps, ``readback`` reads the start log and the final states,
  ``services`` probes, stops and continues the stack's services;
* ``suite`` runs a mode (``modes``) and ``report`` prints what the checker found.

Run ``python -m devtools.faults --mode ci``, ``--mode soak --duration 60m`` or ``--mode storm``.
"""
