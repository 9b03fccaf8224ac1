"""The names noeta's spans and metrics carry: the OpenTelemetry GenAI semantic conventions'
attribute names first, then noeta's own. A leaf: every observability module reads it."""

from __future__ import annotations

OPERATION = "gen_ai.operation.name"
PROVIDER = "gen_ai.provider.name"
REQUEST_MODEL = "gen_ai.request.model"
REQUEST_MAX_TOKENS = "gen_ai.request.max_tokens"
RESPONSE_ID = "gen_ai.response.id"
FINISH_REASONS = "gen_ai.response.finish_reasons"
INPUT_TOKENS = "gen_ai.usage.input_tokens"  # all input tokens, cached ones included
OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
CACHE_READ_TOKENS = "gen_ai.usage.cache_read.input_tokens"
CACHE_CREATION_TOKENS = "gen_ai.usage.cache_creation.input_tokens"
REASONING_TOKENS = "gen_ai.usage.reasoning.output_tokens"  # part of the output tokens
TOKEN_TYPE = "gen_ai.token.type"
TOOL_NAME = "gen_ai.tool.name"
TOOL_CALL_ID = "gen_ai.tool.call.id"
TOOL_TYPE = "gen_ai.tool.type"
CONVERSATION_ID = "gen_ai.conversation.id"
INPUT_MESSAGES = "gen_ai.input.messages"  # opt-in content
OUTPUT_MESSAGES = "gen_ai.output.messages"  # opt-in content
TOOL_ARGUMENTS = "gen_ai.tool.call.arguments"  # opt-in content
TOOL_RESULT = "gen_ai.tool.call.result"  # opt-in content
ERROR_TYPE = "error.type"

TASK_ID = "noeta.task.id"
EPOCH = "noeta.epoch"
WORKER = "noeta.worker"
SEQ_FIRST = "noeta.seq.first"  # the first log seq this span's work appended
SEQ_LAST = "noeta.seq.last"  # the log's last seq when the span ended
TAKEN_OVER = "noeta.claim.taken_over"
RECOVERY = "noeta.recovery"  # on an attempt: what the log left it to settle
TOOL_RECOVERY = "noeta.tool.recovery"  # how a half-done call was settled
RECOVERED = "noeta.recovered"  # on a span a crash cut short, emitted by the next claimer
OUTCOME = "noeta.outcome"
TURN = "noeta.turn"
STORE_OPERATION = "noeta.store.operation"
QUEUE = "noeta.queue"
CONCURRENCY_KEY = "noeta.concurrency_key"
MODEL_LIMIT = "noeta.model_limit"  # the shared limit a task waited for
BUDGET = "noeta.budget"  # the budget that refused a call: tokens, cost or fleet
FLEET_BUDGET = "noeta.fleet_budget"  # a fleet budget's queue[/key] and period

ATTEMPT_SPAN = "noeta.attempt"
TURN_SPAN = "noeta.turn"
STORE_SPAN = "noeta.store."  # + the operation: noeta.store.append, …

CAPTURE_CONTENT_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
