"""OpenAI Responses (``POST /v1/responses``) to and from the canonical model.

What Responses carries differently, or cannot carry:

- ``instructions`` and ``system``/``developer`` input messages, wherever they stand,
  become ``Request.system`` (instructions first, joined by a blank line); ``system``
  renders back as ``instructions``.
- Input items group into canonical messages by role: ``function_call`` and ``reasoning``
  items join the assistant message they follow, ``function_call_output`` items the user
  message; consecutive messages of one role merge. Only ``message``, ``function_call``,
  ``function_call_output`` and ``reasoning`` items and text and ``image_url`` images are
  accepted; anything else (files, audio, item references, hosted-tool items) is a 400,
  since no other protocol could carry it.
- Same protocol fidelity: where the canonical model is lossy (item ids, ``phase``,
  annotations, ``strict``, hosted tools, other ``tool_choice`` forms, extra reasoning
  options) the client's own ``input``, ``instructions``, ``tools``, ``tool_choice`` or
  ``reasoning`` is kept in ``Request.extra``, so a Responses upstream receives exactly what
  the client sent. Other protocols get the canonical view (non-function tools dropped).
- Reasoning: ``ReasoningPart.text`` is the summary (parts joined by a blank line). The
  canonical model has no reasoning item id, so ``signature`` packs it: ``"<rs_id>"`` or
  ``"<rs_id>:<encrypted_content>"`` for an OpenAI item, so a client of another protocol
  can hand the item back; a reasoning item HopBase minted (id ``rs_hopbase…``) carries a
  foreign signature (e.g. Anthropic's) verbatim in ``encrypted_content``. Reasoning parts
  that are not OpenAI's are not sent to an upstream (it would reject them).
- ``stop`` has no Responses field and is dropped; ``ToolResult.is_error`` likewise. A
  reasoning budget (Anthropic) renders as the nearest effort, and a request from another
  protocol that asks for reasoning gets ``summary: auto`` so its reasoning streams back.
- ``STOP_SEQUENCE`` and ``REFUSAL`` render as ``completed`` (they parse back as
  ``END_TURN``); ``MAX_TOKENS`` and ``CONTENT_FILTER`` as ``incomplete``.

Streams: every event is ``event: <type>`` + ``data: {"type", "sequence_number", …}``. The
renderer synthesizes items, content parts, ``*.done`` events with the full text and the
final response object; it does not write ``data: [DONE]`` (the proxy appends it). Its
in-stream error is ``event: response.failed`` with status ``failed`` and ``error {code,
message}``. The parser yields a `BlockStop` for every ``output_item.done`` of a message,
reasoning or function call, so a renderer-closed block (on a switch of kind, or at the
finish) comes back with an explicit `BlockStop`.

    request.py          parse_request, render_request
    response.py         parse_response, render_response, response_usage
    errors.py           render_error, in-stream errors
    stream_parser.py    StreamParser
    stream_renderer.py  StreamRenderer
    wire.py             items, usage and the response object, shared by the others
"""

from hopbase.protocols.openai_responses.errors import render_error
from hopbase.protocols.openai_responses.request import NAME, parse_request, render_request
from hopbase.protocols.openai_responses.response import (
    parse_response,
    render_response,
    response_usage,
)
from hopbase.protocols.openai_responses.stream_parser import StreamParser
from hopbase.protocols.openai_responses.stream_renderer import StreamRenderer

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
