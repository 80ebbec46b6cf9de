"""Responses shapes that requests, whole answers and streams share.

Output items, the response object, usage, the finish status, and how a reasoning
item's id and ``encrypted_content`` pack into a canonical signature.
"""

from __future__ import annotations

import uuid
from typing import Any

from hopbase import canonical
from hopbase.canonical import (
    ReasoningPart,
    StopReason,
    ToolCall,
)

# The id prefix of reasoning items HopBase makes up (their content is not OpenAI's).
MINTED_REASONING = "rs_hopbase"


def reasoning_signature(item_id: str | None, encrypted: str | None) -> str | None:
    """The canonical signature of a reasoning item (see the package docstring)."""
    if not item_id or item_id.startswith(MINTED_REASONING):
        return encrypted
    return item_id if encrypted is None else f"{item_id}:{encrypted}"


def reasoning_identity(signature: str | None) -> tuple[str | None, str | None]:
    """``(OpenAI item id or None, encrypted_content)`` of a canonical signature."""
    if signature and signature.startswith("rs_") and not signature.startswith(MINTED_REASONING):
        item_id, _, encrypted = signature.partition(":")
        return item_id, encrypted or None
    return None, signature


def reasoning_part(item: dict[str, Any]) -> ReasoningPart:
    """The canonical part of an output ``reasoning`` item (summary texts joined)."""
    summary = item.get("summary")
    texts = [part["text"] for part in summary if isinstance(part, dict)
             and isinstance(part.get("text"), str)] if isinstance(summary, list) else []
    item_id, encrypted = item.get("id"), item.get("encrypted_content")
    signature = reasoning_signature(item_id if isinstance(item_id, str) else None,
                                     encrypted if isinstance(encrypted, str) else None)
    return ReasoningPart("\n\n".join(texts), signature)


def parse_stop_reason(status: Any, incomplete: Any, has_call: bool,
                      refused: bool) -> StopReason | None:
    """The canonical stop reason of a finished response's status (None while unfinished)."""
    if status == "completed":
        if has_call:
            return StopReason.TOOL_USE
        return StopReason.REFUSAL if refused else StopReason.END_TURN
    if status == "incomplete":
        reason = incomplete.get("reason") if isinstance(incomplete, dict) else None
        return StopReason.CONTENT_FILTER if reason == "content_filter" else StopReason.MAX_TOKENS
    return None


def _count(details: Any, key: str) -> int:
    value = details.get(key) if isinstance(details, dict) else None
    return value if isinstance(value, int) else 0


def parse_usage(value: Any) -> canonical.Usage:
    """Responses ``usage`` → canonical usage (absent counts are 0)."""
    return canonical.Usage(
        input_tokens=_count(value, "input_tokens"),
        output_tokens=_count(value, "output_tokens"),
        cached_input_tokens=_count(get_field(value, "input_tokens_details"), "cached_tokens"),
        reasoning_tokens=_count(get_field(value, "output_tokens_details"), "reasoning_tokens"),
    )


def get_field(value: Any, key: str) -> Any:
    """``value[key]`` when ``value`` is an object, else None."""
    return value.get(key) if isinstance(value, dict) else None


def render_usage(usage: canonical.Usage) -> dict[str, Any]:
    """Canonical usage → Responses ``usage``."""
    return {
        "input_tokens": usage.input_tokens,
        "input_tokens_details": {"cached_tokens": usage.cached_input_tokens,
                                 "cache_write_tokens": 0},
        "output_tokens": usage.output_tokens,
        "output_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
        "total_tokens": usage.total_tokens,
    }


def mint(prefix: str) -> str:
    """A fresh id with ``prefix`` (``msg``, ``fc``, ``resp``, …)."""
    return f"{prefix}_{uuid.uuid4().hex}"


def message_item(item_id: str, text: str, status: str) -> dict[str, Any]:
    """An assistant ``message`` output item holding one ``output_text`` part."""
    return {"id": item_id, "type": "message", "status": status, "role": "assistant",
            "content": [{"type": "output_text", "annotations": [], "logprobs": [], "text": text}]}


def function_call_item(item_id: str, call: ToolCall, status: str) -> dict[str, Any]:
    """A ``function_call`` output item."""
    return {"id": item_id, "type": "function_call", "status": status,
            "arguments": call.arguments, "call_id": call.id, "name": call.name}


def reasoning_item(item_id: str, text: str, encrypted: str | None,
                    status: str | None) -> dict[str, Any]:
    """A ``reasoning`` item; ``status`` None leaves the field out (as input items do)."""
    item: dict[str, Any] = {"id": item_id, "type": "reasoning",
                            "summary": [{"type": "summary_text", "text": text}] if text else []}
    if encrypted is not None:
        item["encrypted_content"] = encrypted
    if status is not None:
        item["status"] = status
    return item


def finished_status(stop_reason: StopReason | None) -> tuple[str, dict[str, str] | None]:
    """The response ``status`` and ``incomplete_details`` of a finished answer."""
    if stop_reason is StopReason.MAX_TOKENS:
        return "incomplete", {"reason": "max_output_tokens"}
    if stop_reason is StopReason.CONTENT_FILTER:
        return "incomplete", {"reason": "content_filter"}
    return "completed", None


def response_object(response_id: str, created_at: int, model: str, status: str,
                     output: list[dict[str, Any]], usage: dict[str, Any] | None,
                     error: dict[str, str] | None = None,
                     incomplete: dict[str, str] | None = None) -> dict[str, Any]:
    """A whole response object; request echoes HopBase does not know are neutral."""
    return {
        "id": response_id, "object": "response", "created_at": created_at, "status": status,
        "background": False, "error": error, "incomplete_details": incomplete,
        "instructions": None, "max_output_tokens": None, "model": model, "output": output,
        "parallel_tool_calls": True, "previous_response_id": None,
        "reasoning": {"effort": None, "summary": None}, "store": False, "temperature": None,
        "text": {"format": {"type": "text"}}, "tool_choice": "auto", "tools": [],
        "top_p": None, "truncation": "disabled", "usage": usage, "user": None, "metadata": {},
    }
