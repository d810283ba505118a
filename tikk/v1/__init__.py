"""Generated protobuf and gRPC stubs of the tikk.v1 API (``make proto``); do not edit."""
