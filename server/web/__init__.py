"""What a server offers over HTTP: ``/metrics`` and ``/healthz`` (``listener``)."""
