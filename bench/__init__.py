"""The benchmark harness behind ``make bench`` (SPEC section 12).

``python -m bench`` starts a lean mock upstream (`bench.mock`), HopBase and load
generators on loopback, runs the same workload directly against the mock and
through HopBase, and prints a markdown table of the figures and their targets.
See ``bench/README.md`` for how to read it.
"""
