"""Which model an Agent call may name: its own task's model, or one the operator allows in
`subagent_models` (ADR-0076). A model spec from a model is untrusted input: `scripted:`
names a file the worker would open, so it is allowed only by an entry that says `scripted:`.
"""

from __future__ import annotations

import os


def is_allowed(spec: str, own_model: str, allowed: tuple[str, ...]) -> bool:
    """True if `spec` is the task's own model or matches an entry of `allowed`: an exact
    spec, or one ending in `*` that matches every spec it starts (`openai:*`,
    `scripted:/srv/scripts/*`; a script's path is compared once `..` is resolved)."""
    if spec == own_model:
        return True
    normal = normalized(spec)
    for entry in allowed:
        if entry.endswith("*") and normal.startswith(normalized(entry[:-1])):
            return True
        if normal == normalized(entry):
            return True
    return False


def refusal(spec: str, allowed: tuple[str, ...]) -> str:
    """The one line an Agent call that names a model not allowed gets as its result."""
    others = f" and {', '.join(allowed)}" if allowed else ""
    return (
        f"Agent cannot use the model {spec!r}: "
        f"the operator allows only this task's own model{others}"
    )


def normalized(spec: str) -> str:
    """`spec` with a script's path made absolute and free of `.` and `..` (from the
    folder the worker opens it from), so `scripted:/srv/scripts/../x` is not under it."""
    prefix, colon, name = spec.partition(":")
    if prefix != "scripted" or not colon or not name:
        return spec
    keep_slash = "/" if name.endswith("/") else ""
    return f"scripted:{os.path.normpath(os.path.abspath(name))}{keep_slash}"
