"""A fuzzer for the tikk API: every RPC of every tikk service gets hypothesis-generated requests
(built from the protobuf descriptors, so a new RPC or field is covered without a change here)
and raw random bytes, on a real server process; every call must end in a defined status.

``messages`` draws the requests, ``target`` runs the server and makes the calls; the CI test is
``tests/property/test_fuzz_server.py``, a longer manual run ``python -m devtools.fuzz --minutes N``.
"""
