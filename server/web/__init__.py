"""What a server offers over HTTP: ``/metrics``, ``/healthz`` and ``/readyz`` (``listener``,
``readiness``)."""
