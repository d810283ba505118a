"""The tikk server: gRPC services, validation, status mapping, backend wiring and the CLI."""
