"""The Anthropic Messages API (``POST /v1/messages``) as a HopBase wire protocol.

Choices where the two models do not line up one to one:

- Usage: canonical ``input_tokens`` counts every prompt token (OpenAI's sense), so it is
  Anthropic's ``input_tokens + cache_read_input_tokens + cache_creation_input_tokens``;
  ``cached_input_tokens`` is ``cache_read_input_tokens`` and ``reasoning_tokens`` is
  ``output_tokens_details.thinking_tokens``. Rendering puts cache writes back into
  ``input_tokens``, so totals survive and the cache-write split does not.
- Same-protocol fidelity: when ``system``, ``messages``, ``tools``, ``thinking`` or
  ``metadata`` hold something the canonical model cannot (``cache_control``, documents,
  redacted thinking, server tools, citations, images inside tool results, adaptive
  thinking, ...), the raw field is also kept in ``Request.extra``, so an Anthropic
  upstream receives it verbatim while other protocols see the canonical part only.
- Requests from other protocols: no ``max_tokens`` → 4096 (plus the thinking budget);
  a reasoning effort becomes a thinking budget (minimal/low 1024, medium 4096, high
  16384, xhigh/max 32768, none: no thinking), clamped below ``max_tokens``; thinking
  is left out when the budget would fall under Anthropic's 1024 minimum or a tool is
  forced, and ``temperature``/``top_p`` are left out while thinking is on (Anthropic
  rejects them together). Reasoning without a signature cannot go back to Anthropic
  and is dropped; tool results are moved to the front of their user turn.
- Answers: ``stop_sequence`` is always null (``Finish`` does not carry the sequence);
  ``pause_turn`` reads as end_turn, ``model_context_window_exceeded`` as max_tokens,
  and content_filter renders as refusal. Streams always carry usage, so the
  renderer's ``include_usage`` has no effect.

    request.py   parse_request, render_request
    response.py  parse_response, render_response, response_usage
    errors.py    render_error
    stream.py    StreamParser, StreamRenderer
"""

from hopbase.protocols.anthropic_messages.errors import render_error
from hopbase.protocols.anthropic_messages.request import (
    DEFAULT_MAX_TOKENS,
    EFFORT_BUDGETS,
    MINIMUM_THINKING_BUDGET,
    NAME,
    parse_request,
    render_request,
)
from hopbase.protocols.anthropic_messages.response import (
    parse_response,
    render_response,
    response_usage,
)
from hopbase.protocols.anthropic_messages.stream import StreamParser, StreamRenderer

__all__ = [
    "DEFAULT_MAX_TOKENS",
    "EFFORT_BUDGETS",
    "MINIMUM_THINKING_BUDGET",
    "NAME",
    "StreamParser",
    "StreamRenderer",
    "parse_request",
    "parse_response",
    "response_usage",
    "render_error",
    "render_request",
    "render_response",
]
