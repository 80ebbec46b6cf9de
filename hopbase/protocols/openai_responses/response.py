"""Whole (non-stream) Responses answers to and from canonical `Response`."""

from __future__ import annotations

import time
import uuid
from typing import Any

from hopbase import canonical
from hopbase.canonical import (
    Part,
    ReasoningPart,
    TextPart,
    ToolCall,
)
from hopbase.protocols.openai_responses.wire import (
    MINTED_REASONING,
    finished_status,
    function_call_item,
    message_item,
    mint,
    parse_stop_reason,
    parse_usage,
    reasoning_identity,
    reasoning_item,
    reasoning_part,
    render_usage,
    response_object,
)


def parse_response(body: dict[str, Any]) -> canonical.Response:
    """Parse a whole (non-stream) Responses answer into a canonical `Response`."""
    output = body.get("output")
    parts: list[Part] = []
    has_call = refused = False
    for item in output if isinstance(output, list) else ():
        if not isinstance(item, dict):
            continue
        kind = item.get("type")
        if kind == "message":
            text, item_refused = _message_text(item.get("content"))
            refused = refused or item_refused
            if text:
                parts.append(TextPart(text))
        elif kind == "function_call":
            has_call = True
            parts.append(ToolCall(str(item.get("call_id") or ""), str(item.get("name") or ""),
                                  str(item.get("arguments") or "{}")))
        elif kind == "reasoning":
            reasoning = reasoning_part(item)
            if reasoning.text or reasoning.signature:
                parts.append(reasoning)
    stop = parse_stop_reason(body.get("status"), body.get("incomplete_details"), has_call, refused)
    return canonical.Response(str(body.get("id") or ""), str(body.get("model") or ""),
                              tuple(parts), stop, parse_usage(body.get("usage")))


def _message_text(content: Any) -> tuple[str, bool]:
    """The joined text of an output message, and whether it was a refusal."""
    texts, refused = [], False
    for part in content if isinstance(content, list) else ():
        if not isinstance(part, dict):
            continue
        if part.get("type") == "output_text" and isinstance(part.get("text"), str):
            texts.append(part["text"])
        elif part.get("type") == "refusal" and isinstance(part.get("refusal"), str):
            texts.append(part["refusal"])
            refused = True
    return "".join(texts), refused


def _response_id(candidate: str) -> str:
    return candidate if candidate.startswith("resp_") else f"resp_{uuid.uuid4().hex}"


def render_response(response: canonical.Response, model: str) -> dict[str, Any]:
    """Render a whole answer as a Responses response object carrying ``model``."""
    output: list[dict[str, Any]] = []
    for part in response.parts:
        if isinstance(part, TextPart):
            output.append(message_item(mint("msg"), part.text, "completed"))
        elif isinstance(part, ToolCall):
            output.append(function_call_item(mint("fc"), part, "completed"))
        elif isinstance(part, ReasoningPart):
            item_id, encrypted = reasoning_identity(part.signature)
            output.append(reasoning_item(item_id or mint(MINTED_REASONING), part.text,
                                          encrypted, None))
    status, incomplete = finished_status(response.stop_reason)
    return response_object(_response_id(response.id), int(time.time()), model, status, output,
                            render_usage(response.usage), incomplete=incomplete)


def response_usage(body: dict[str, Any]) -> canonical.Usage:
    """Only the usage of a whole Responses answer (a passthrough answer is not parsed further)."""
    return parse_usage(body.get("usage"))
