"""Tools for developing tikk that need the checkout (``infra/``, ``examples/``, the tests).

Not part of the installed package: run them from the repository root, e.g.
``python -m devtools.faults --mode ci``.
"""
