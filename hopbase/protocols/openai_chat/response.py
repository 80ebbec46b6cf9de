"""Non-streaming ``chat.completion`` answers, and the usage and finish words streams share."""

from __future__ import annotations

import secrets
import time
from typing import Any

from hopbase import canonical, errors
from hopbase.canonical import Part, ReasoningPart, StopReason, TextPart, ToolCall
from hopbase.protocols.openai_chat.request import render_tool_call

_STOP_REASONS = {
    "stop": StopReason.END_TURN, "length": StopReason.MAX_TOKENS,
    "tool_calls": StopReason.TOOL_USE, "function_call": StopReason.TOOL_USE,
    "content_filter": StopReason.CONTENT_FILTER,
}
# Canonical stop reasons -> Chat finish_reason words.
FINISH_REASONS = {
    StopReason.END_TURN: "stop", StopReason.MAX_TOKENS: "length",
    StopReason.TOOL_USE: "tool_calls", StopReason.STOP_SEQUENCE: "stop",
    StopReason.CONTENT_FILTER: "content_filter", StopReason.REFUSAL: "content_filter",
}


def parse_response(body: dict[str, Any]) -> canonical.Response:
    """Parse a non-streaming ``chat.completion`` answer.

    Raises:
        errors.UpstreamFailed: the body has no choice to read.
    """
    choices = body.get("choices") if isinstance(body, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise errors.UpstreamFailed("invalid chat.completion from upstream: no choices")
    message = choices[0].get("message")
    if not isinstance(message, dict):
        message = {}
    refused = isinstance(message.get("refusal"), str)
    return canonical.Response(
        id=str(body.get("id") or ""),
        model=str(body.get("model") or ""),
        parts=_response_parts(message),
        stop_reason=parse_stop_reason(choices[0].get("finish_reason"), refused),
        usage=parse_usage(body.get("usage")),
    )


def _response_parts(message: dict[str, Any]) -> tuple[Part, ...]:
    parts: list[Part] = []
    reasoning = message.get("reasoning") or message.get("reasoning_content")
    if isinstance(reasoning, str) and reasoning:
        parts.append(ReasoningPart(reasoning))
    for key in ("content", "refusal"):
        if isinstance(message.get(key), str) and message[key]:
            parts.append(TextPart(message[key]))
    tool_calls = message.get("tool_calls")
    for call in tool_calls if isinstance(tool_calls, list) else ():
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict):
            parts.append(ToolCall(str(call.get("id") or ""), str(function.get("name") or ""),
                                  str(function.get("arguments") or "{}")))
    return tuple(parts)


def parse_stop_reason(word: Any, refused: bool) -> StopReason | None:
    """The canonical stop reason of a ``finish_reason`` word (None when there is none)."""
    if not word:
        return None
    # Servers invent their own words (vLLM "abort", ...): a natural end is the safest reading.
    reason = _STOP_REASONS.get(word, StopReason.END_TURN) if isinstance(word, str) else (
        StopReason.END_TURN)
    return StopReason.REFUSAL if refused and reason is StopReason.END_TURN else reason


def _count(details: Any, key: str) -> int:
    value = details.get(key) if isinstance(details, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def parse_usage(value: Any) -> canonical.Usage:
    """Chat ``usage`` → canonical usage (absent counts are 0)."""
    if not isinstance(value, dict):
        return canonical.Usage()
    return canonical.Usage(
        input_tokens=_count(value, "prompt_tokens"),
        output_tokens=_count(value, "completion_tokens"),
        cached_input_tokens=_count(value.get("prompt_tokens_details"), "cached_tokens"),
        reasoning_tokens=_count(value.get("completion_tokens_details"), "reasoning_tokens"),
    )


def render_usage(usage: canonical.Usage) -> dict[str, Any]:
    """Canonical usage → Chat ``usage``."""
    return {
        "prompt_tokens": usage.input_tokens,
        "completion_tokens": usage.output_tokens,
        "total_tokens": usage.total_tokens,
        "prompt_tokens_details": {"cached_tokens": usage.cached_input_tokens},
        "completion_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
    }


def render_response(response: canonical.Response, model: str) -> dict[str, Any]:
    """Render ``response`` as a non-streaming ``chat.completion`` for the client."""
    text = "".join(part.text for part in response.parts if isinstance(part, TextPart))
    reasoning = "".join(part.text for part in response.parts if isinstance(part, ReasoningPart))
    calls = [render_tool_call(part) for part in response.parts if isinstance(part, ToolCall)]
    message: dict[str, Any] = {
        "role": "assistant", "content": text or (None if calls else ""), "refusal": None}
    if reasoning:
        message["reasoning"] = reasoning
    if calls:
        message["tool_calls"] = calls
    return {
        "id": response.id or "chatcmpl-" + secrets.token_hex(12),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason":
                     FINISH_REASONS[response.stop_reason or StopReason.END_TURN]}],
        "usage": render_usage(response.usage),
    }


def response_usage(body: dict[str, Any]) -> canonical.Usage:
    """Only the usage of a whole Chat answer (a passthrough answer is not parsed further)."""
    return parse_usage(body.get("usage"))
