"""Non-stream Messages answers, and the usage and stop-reason words streams share."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping
from typing import Any

import orjson

from hopbase import canonical, errors
from hopbase.canonical import StopReason
from hopbase.protocols.anthropic_messages.request import arguments_object

_log = logging.getLogger(__name__)
# Messages stop_reason words <-> canonical stop reasons.
STOP_FROM_WIRE: dict[Any, canonical.StopReason] = {
    "end_turn": StopReason.END_TURN, "max_tokens": StopReason.MAX_TOKENS,
    "tool_use": StopReason.TOOL_USE, "stop_sequence": StopReason.STOP_SEQUENCE,
    "refusal": StopReason.REFUSAL, "pause_turn": StopReason.END_TURN,
    "model_context_window_exceeded": StopReason.MAX_TOKENS}
STOP_TO_WIRE = {
    StopReason.END_TURN: "end_turn", StopReason.MAX_TOKENS: "max_tokens",
    StopReason.TOOL_USE: "tool_use", StopReason.STOP_SEQUENCE: "stop_sequence",
    StopReason.CONTENT_FILTER: "refusal", StopReason.REFUSAL: "refusal"}


def parse_usage(fields: Mapping[str, Any]) -> canonical.Usage:
    """Messages ``usage`` → canonical usage (cache reads and writes count as input)."""
    fresh = fields.get("input_tokens") or 0
    cache_read = fields.get("cache_read_input_tokens") or 0
    cache_write = fields.get("cache_creation_input_tokens") or 0
    details = fields.get("output_tokens_details") or {}
    return canonical.Usage(fresh + cache_read + cache_write, fields.get("output_tokens") or 0,
                           cache_read, details.get("thinking_tokens") or 0)


def render_usage(usage: canonical.Usage) -> dict[str, Any]:
    """Canonical usage → Messages ``usage`` (cache writes cannot be told apart again)."""
    rendered: dict[str, Any] = {
        "input_tokens": usage.input_tokens - usage.cached_input_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": usage.cached_input_tokens,
        "output_tokens": usage.output_tokens}
    if usage.reasoning_tokens:
        rendered["output_tokens_details"] = {"thinking_tokens": usage.reasoning_tokens}
    return rendered


def parse_response(body: dict[str, Any]) -> canonical.Response:
    """Parse a non-stream Messages answer.

    Raises:
        errors.UpstreamFailed: the upstream's answer is not a Messages response.
    """
    try:
        parts = [part for block in body["content"] if (part := _response_part(block)) is not None]
        return canonical.Response(
            id=body["id"], model=body["model"], parts=tuple(parts),
            stop_reason=STOP_FROM_WIRE.get(body.get("stop_reason")),
            usage=parse_usage(body.get("usage") or {}))
    except (KeyError, TypeError, AttributeError) as error:
        message = f"malformed Messages response from upstream: {error!r}"
        raise errors.UpstreamFailed(message) from None


def _response_part(block: dict[str, Any]) -> canonical.Part | None:
    kind = block["type"]
    if kind == "text":
        return canonical.TextPart(block["text"])
    if kind == "thinking":
        return canonical.ReasoningPart(block["thinking"], block.get("signature") or None)
    if kind == "tool_use":
        return canonical.ToolCall(block["id"], block["name"], orjson.dumps(block["input"]).decode())
    _log.debug("%s block of an answer has no canonical form", kind)
    return None


def render_response(response: canonical.Response, model: str) -> dict[str, Any]:
    """Render ``response`` as a non-stream Messages answer naming ``model``."""
    content: list[dict[str, Any]] = []
    for part in response.parts:
        if isinstance(part, canonical.TextPart):
            content.append({"type": "text", "text": part.text})
        elif isinstance(part, canonical.ReasoningPart):
            content.append({"type": "thinking", "thinking": part.text,
                            "signature": part.signature or ""})
        elif isinstance(part, canonical.ToolCall):
            content.append({"type": "tool_use", "id": part.id, "name": part.name,
                            "input": _answer_arguments(part)})
    stop_reason = response.stop_reason
    return {"id": response.id or f"msg_{uuid.uuid4().hex}", "type": "message",
            "role": "assistant", "model": model, "content": content,
            "stop_reason": None if stop_reason is None else STOP_TO_WIRE[stop_reason],
            "stop_sequence": None, "usage": render_usage(response.usage)}


def _answer_arguments(call: canonical.ToolCall) -> dict[str, Any]:
    arguments = arguments_object(call.arguments)
    if arguments is None:
        # The model wrote arguments that are no JSON object; Anthropic's answer has no way to
        # say so, and failing the whole answer would lose the rest of it.
        _log.warning("tool call %s: arguments are not a JSON object, sent as {}", call.id)
        return {}
    return arguments


def response_usage(body: dict[str, Any]) -> canonical.Usage:
    """Only the usage of a whole Messages answer (a passthrough answer is not parsed further)."""
    usage = body.get("usage")
    return parse_usage(usage) if isinstance(usage, dict) else canonical.Usage()
