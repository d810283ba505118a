"""Example workers and the demo of tikk on the embedded default."""
