"""Dispatchers: shard ownership, the due-slice scanner with in-memory timing, queue producers."""
