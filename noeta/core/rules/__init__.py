"""The kernel's pure rules: events, the fold, what to do next, snapshots, ids, gates.

No I/O, no clock, no store: they import only the ports, `noeta.core.errors` and each other.
"""
