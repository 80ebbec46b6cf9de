"""OpenAI Chat Completions (``POST /v1/chat/completions``) to and from the canonical model.

What Chat carries differently, or cannot carry:

- ``system``/``developer`` messages, wherever they stand, become ``Request.system`` (joined
  by a blank line, the text parts of one message by a newline); they render back as one
  leading ``system`` message.
- ``tool`` messages become user messages of `ToolResult` parts (consecutive ones merge);
  ``ToolResult.is_error`` has no Chat field and is dropped when rendering.
- An assistant's ``reasoning``/``reasoning_content`` parses into a `ReasoningPart` but is
  not rendered for an upstream: Chat has no standard input field for it and some servers
  reject one. Reasoning signatures are dropped everywhere.
- ``max_completion_tokens`` (preferred) or ``max_tokens`` parse into ``max_tokens``, which
  renders as ``max_completion_tokens`` (reasoning models reject ``max_tokens``).
- A reasoning budget without an effort (from Anthropic) renders as the nearest
  ``reasoning_effort``; ``Reasoning.summary`` is dropped.
- A streaming request always asks the upstream for usage; ``include_usage`` only says
  whether the client gets the usage chunk.
- ``refusal`` text parses as text with `StopReason.REFUSAL`, which renders as
  ``content_filter``; ``STOP_SEQUENCE`` renders as ``stop``.
- Audio and file content parts and non-function tools are rejected (400): the canonical
  model has no place for them.

Streams: the parser holds a ``finish_reason`` until the usage chunk or ``[DONE]``, so it
yields ``UsageEvent`` before ``Finish`` like every parser; the renderer writes the finish
chunk, the usage chunk (if asked for) and ``[DONE]`` on `Finish`. An in-stream error is
``data: {"error": {"message", "type", "code"}}`` then ``[DONE]``: ``type`` is an OpenAI
word and ``code`` the canonical (Anthropic) type word, so the parser gets it back exactly.

    request.py   parse_request, render_request
    response.py  parse_response, render_response, response_usage
    errors.py    render_error, in-stream errors
    stream.py    StreamParser, StreamRenderer
"""

# The property tests draw request fields from _KNOWN_FIELDS and freeze the clock
# through this package's ``time``: both stay reachable here.
import time as time

from hopbase.protocols.openai_chat.errors import render_error
from hopbase.protocols.openai_chat.request import _KNOWN_FIELDS as _KNOWN_FIELDS
from hopbase.protocols.openai_chat.request import NAME, parse_request, render_request
from hopbase.protocols.openai_chat.response import (
    parse_response,
    render_response,
    response_usage,
)
from hopbase.protocols.openai_chat.stream import StreamParser, StreamRenderer

__all__ = [
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
