"""Limits on repetition that live in the kernel, and the words the model and users see."""

from __future__ import annotations

# A model call cut while its worker lived on (or cut before ADR-0080 told the cases
# apart): ModelCalled without a reply, in one turn. The poison request's cap.
MAX_MODEL_ATTEMPTS = 3
MODEL_KEPT_BEING_INTERRUPTED = (
    f"llm_error: the model call kept being interrupted ({MAX_MODEL_ATTEMPTS} times in a turn, "
    "while the workers running it lived on)"
)

# A model call whose worker was lost (died, froze, lost the store) or never sent it: the
# infrastructure's fault, so a bigger cap, kept only so that a request that kills every
# worker it touches still fails its turn (ADR-0080).
MAX_WORKERS_LOST = 10
INFRASTRUCTURE_LOST_THE_CALL = (
    "infrastructure: the workers running this call were lost {lost} times ({unsent} of "
    "them before the request was sent; they died, froze or lost the store). If this "
    "happens on every try, the request itself may be killing them"
)

TRUNCATED_REPLIES_LIMIT = 3  # in a row
TRUNCATED_TOO_OFTEN = (
    "llm_truncated: the model's reply was cut off by the output token limit "
    f"{TRUNCATED_REPLIES_LIMIT} times in a row"
)

EMPTY_REPLIES_LIMIT = 3  # in a row; then the turn ends without an answer

# A bug in the runner or a plugin hook: the first fails the turn, the second the task.
INTERNAL_ERRORS_LIMIT = 2

# What the fold tells the model when a wake-up falls due, a background job is lost, or a
# late result corrects a call settled "outcome unknown".
WOKEN_UP = "[noeta] Your scheduled wake-up ({due}) is due. You asked to be told: {prompt}"

JOB_LOST = (
    "[noeta] Background job {job_id} was lost: the worker running it lost this task "
    "(it stopped, or was cut off) and the job was stopped with it. It may have run in "
    "part. Check its effects before running it again."
)

# Said with the next request after a late result came for a call settled "outcome unknown"
# (ADR-0083): the earlier result stays in the conversation, this one follows it.
RESULT_CORRECTED = (
    "[noeta] Correction: tool call {call_id} was reported to you as interrupted, its outcome "
    "unknown. It did run to its end: its result came after the call was settled. Its {kind}:"
    "\n{content}"
)

# The call id an `on_budget: ask` task waits on: `noeta answer ID budget allow` allows
# one more model call past the budget; `deny` fails the task.
BUDGET_CALL = "budget"
