"""The tikk server: the operations (``ops``), the gRPC services over them (``api``), the
interceptors every call goes through, backend wiring, and the ``tikk`` command (``cli``)."""
