"""Limits on repetition that live in the kernel, and the words the model and users see."""

from __future__ import annotations

# Worker died during a model call: ModelCalled without a reply, in one turn.
MAX_MODEL_ATTEMPTS = 3
MODEL_KEPT_BEING_INTERRUPTED = "llm_error: the model call kept being interrupted"

TRUNCATED_REPLIES_LIMIT = 3  # in a row
TRUNCATED_TOO_OFTEN = (
    "llm_truncated: the model's reply was cut off by the output token limit "
    f"{TRUNCATED_REPLIES_LIMIT} times in a row"
)

EMPTY_REPLIES_LIMIT = 3  # in a row; then the turn ends without an answer

# A bug in the runner or a plugin hook: the first fails the turn, the second the task.
INTERNAL_ERRORS_LIMIT = 2
