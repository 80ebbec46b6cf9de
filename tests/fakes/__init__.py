"""Realistic wire answers of the three protocols, for the fake upstream.

The fake server itself is `tests.fakes.upstream` (``FakeUpstream``, ``Reply``).
This module knows what real providers send: the streamed and whole successful
answers of OpenAI Chat Completions, OpenAI Responses and Anthropic Messages, their
error bodies, and the golden recordings in ``tests/fakes/golden/*.sse`` (one event
per blank-line-separated block, LF line ends). Field names follow the official
SDKs' typed models (``openai.types``, ``anthropic.types``).
"""

from __future__ import annotations

import itertools
import time
from pathlib import Path
from typing import Any

import orjson

GOLDEN_DIRECTORY = Path(__file__).parent / "golden"
DONE = b"data: [DONE]\n\n"

_TERMINAL_MARKERS = (
    b"data: [DONE]",
    b"event: message_stop",
    b"event: response.completed",
    b"event: response.failed",
    b"event: response.incomplete",
)
_ids = itertools.count(1)

# status -> (Anthropic error type, OpenAI error type, OpenAI code)
_ERRORS: dict[int, tuple[str, str, str | None]] = {
    400: ("invalid_request_error", "invalid_request_error", None),
    401: ("authentication_error", "invalid_request_error", "invalid_api_key"),
    403: ("permission_error", "invalid_request_error", "unsupported_country_region_territory"),
    404: ("not_found_error", "invalid_request_error", "model_not_found"),
    413: ("request_too_large", "invalid_request_error", None),
    422: ("invalid_request_error", "invalid_request_error", None),
    429: ("rate_limit_error", "requests", "rate_limit_exceeded"),
    500: ("api_error", "server_error", None),
    502: ("api_error", "server_error", None),
    503: ("overloaded_error", "server_error", None),
    529: ("overloaded_error", "server_error", None),
}


def golden_events(filename: str) -> list[bytes]:
    """The events of ``golden/<filename>``, each with its closing blank line."""
    content = (GOLDEN_DIRECTORY / filename).read_bytes()
    return [block + b"\n\n" for block in content.split(b"\n\n") if block.strip()]


def is_terminal(event: bytes) -> bool:
    """True for the event that ends a stream in its protocol."""
    return any(marker in event for marker in _TERMINAL_MARKERS)


def protocol_of(path: str) -> str:
    """openai_chat | openai_responses | anthropic_messages | unknown, from the request path."""
    if path.endswith("/chat/completions"):
        return "openai_chat"
    if path.endswith("/responses"):
        return "openai_responses"
    if path.endswith("/messages"):
        return "anthropic_messages"
    return "unknown"


def new_id(prefix: str) -> str:
    """A fresh id in the provider's style, e.g. ``chatcmpl-fake000001``."""
    return f"{prefix}fake{next(_ids):06d}"


def parse_body(raw: bytes) -> dict[str, Any] | bytes:
    """The request body as a JSON object, or the raw bytes when it is not one."""
    try:
        parsed = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return raw
    return parsed if isinstance(parsed, dict) else raw


def error_body(protocol: str, status: int, message: str) -> dict[str, Any]:
    """The error JSON a real provider of ``protocol`` sends with ``status``."""
    default: tuple[str, str, str | None] = ("invalid_request_error", "invalid_request_error", None)
    if status >= 500:
        default = ("api_error", "server_error", None)
    anthropic_type, openai_type, code = _ERRORS.get(status, default)
    if protocol == "anthropic_messages":
        return {
            "type": "error",
            "error": {"type": anthropic_type, "message": message},
            "request_id": new_id("req_"),
        }
    return {"error": {"message": message, "type": openai_type, "param": None, "code": code}}


def models_list() -> dict[str, Any]:
    """A ``GET /v1/models`` answer."""
    model = {"id": "fake-model", "object": "model", "created": 1700000000, "owned_by": "fake"}
    return {"object": "list", "data": [model]}


def stream_answer(protocol: str, body: dict[str, Any], text: str) -> list[bytes]:
    """The SSE events of a successful streamed answer saying ``text``."""
    model, pieces, input_tokens = _basics(body, text)
    if protocol == "openai_chat":
        stream_options = body.get("stream_options") or {}
        return _chat_stream(model, pieces, input_tokens, bool(stream_options.get("include_usage")))
    if protocol == "openai_responses":
        return _responses_stream(model, pieces, input_tokens)
    return _messages_stream(model, pieces, input_tokens)


def json_answer(protocol: str, body: dict[str, Any], text: str) -> dict[str, Any]:
    """The JSON of a successful non-stream answer saying ``text``."""
    model, pieces, input_tokens = _basics(body, text)
    output_tokens = len(pieces)
    if protocol == "openai_chat":
        message: dict[str, Any] = {
            "role": "assistant", "content": text, "refusal": None, "annotations": []
        }
        choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": "stop"}
        return {
            "id": new_id("chatcmpl-"), "object": "chat.completion", "created": int(time.time()),
            "model": model,
            "choices": [choice],
            "usage": _chat_usage(input_tokens, output_tokens),
            "service_tier": "default", "system_fingerprint": "fp_fake00001",
        }
    if protocol == "openai_responses":
        item = _response_message(new_id("msg_"), text, "completed")
        usage = _responses_usage(input_tokens, output_tokens)
        return _response_object(new_id("resp_"), model, "completed", [item], usage)
    content = [{"type": "text", "text": text}]
    return _message_object(model, content, "end_turn", _messages_usage(input_tokens, output_tokens))


def _basics(body: dict[str, Any], text: str) -> tuple[str, list[str], int]:
    model = str(body.get("model", "fake-model"))
    words = text.split(" ")
    pieces = [words[0]] + [" " + word for word in words[1:]]
    input_tokens = max(1, len(orjson.dumps(body.get("messages") or body.get("input") or "")) // 4)
    return model, pieces, input_tokens


def _data(payload: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(payload) + b"\n\n"


def _named(payload: dict[str, Any]) -> bytes:
    return b"event: " + payload["type"].encode() + b"\n" + _data(payload)


def _chat_usage(input_tokens: int, output_tokens: int) -> dict[str, Any]:
    return {
        "prompt_tokens": input_tokens,
        "completion_tokens": output_tokens,
        "total_tokens": input_tokens + output_tokens,
        "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": 0, "audio_tokens": 0,
            "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0,
        },
    }


def _chat_stream(
    model: str, pieces: list[str], input_tokens: int, include_usage: bool
) -> list[bytes]:
    head: dict[str, Any] = {
        "id": new_id("chatcmpl-"), "object": "chat.completion.chunk", "created": int(time.time()),
        "model": model, "service_tier": "default", "system_fingerprint": "fp_fake00001",
    }

    def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        extra = {"usage": None} if include_usage else {}
        return _data({**head, "choices": [choice], **extra})

    events = [chunk({"role": "assistant", "content": "", "refusal": None})]
    events += [chunk({"content": piece}) for piece in pieces]
    events.append(chunk({}, "stop"))
    if include_usage:
        usage = _chat_usage(input_tokens, len(pieces))
        events.append(_data({**head, "choices": [], "usage": usage}))
    events.append(DONE)
    return events


def _responses_usage(input_tokens: int, output_tokens: int) -> dict[str, Any]:
    return {
        "input_tokens": input_tokens,
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": input_tokens + output_tokens,
    }


def _response_object(
    response_id: str, model: str, status: str, output: list[Any], usage: dict[str, Any] | None
) -> dict[str, Any]:
    return {
        "id": response_id, "object": "response", "created_at": int(time.time()), "status": status,
        "background": False, "error": None, "incomplete_details": None, "instructions": None,
        "max_output_tokens": None, "model": model, "output": output, "parallel_tool_calls": True,
        "previous_response_id": None, "reasoning": {"effort": None, "summary": None},
        "service_tier": "default", "store": True, "temperature": 1.0,
        "text": {"format": {"type": "text"}, "verbosity": "medium"}, "tool_choice": "auto",
        "tools": [], "top_p": 1.0, "truncation": "disabled", "usage": usage, "user": None,
        "metadata": {},
    }


def _response_message(item_id: str, text: str | None, status: str) -> dict[str, Any]:
    content = [] if text is None else [_output_text(text)]
    return {
        "id": item_id, "type": "message", "status": status, "content": content, "role": "assistant"
    }


def _output_text(text: str) -> dict[str, Any]:
    return {"type": "output_text", "annotations": [], "logprobs": [], "text": text}


def _responses_stream(model: str, pieces: list[str], input_tokens: int) -> list[bytes]:
    response_id, item_id, text = new_id("resp_"), new_id("msg_"), "".join(pieces)
    start = _response_object(response_id, model, "in_progress", [], None)
    done_item = _response_message(item_id, text, "completed")
    usage = _responses_usage(input_tokens, len(pieces))
    place = {"item_id": item_id, "output_index": 0, "content_index": 0}
    payloads: list[dict[str, Any]] = [
        {"type": "response.created", "response": start},
        {"type": "response.in_progress", "response": start},
        {"type": "response.output_item.added", "output_index": 0,
         "item": _response_message(item_id, None, "in_progress")},
        {"type": "response.content_part.added", **place, "part": _output_text("")},
    ]
    payloads += [
        {"type": "response.output_text.delta", **place, "delta": piece, "logprobs": []}
        for piece in pieces
    ]
    payloads += [
        {"type": "response.output_text.done", **place, "text": text, "logprobs": []},
        {"type": "response.content_part.done", **place, "part": _output_text(text)},
        {"type": "response.output_item.done", "output_index": 0, "item": done_item},
        {"type": "response.completed",
         "response": _response_object(response_id, model, "completed", [done_item], usage)},
    ]
    return [
        _named({**payload, "sequence_number": number}) for number, payload in enumerate(payloads)
    ]


def _messages_usage(input_tokens: int, output_tokens: int) -> dict[str, Any]:
    return {
        "input_tokens": input_tokens, "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0, "output_tokens": output_tokens, "service_tier": "standard",
    }


def _message_object(
    model: str, content: list[Any], stop_reason: str | None, usage: dict[str, Any]
) -> dict[str, Any]:
    return {
        "id": new_id("msg_01"), "type": "message", "role": "assistant", "model": model,
        "content": content, "stop_reason": stop_reason, "stop_sequence": None, "usage": usage,
    }


def _messages_stream(model: str, pieces: list[str], input_tokens: int) -> list[bytes]:
    start = _message_object(model, [], None, _messages_usage(input_tokens, 1))
    payloads: list[dict[str, Any]] = [
        {"type": "message_start", "message": start},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "ping"},
    ]
    payloads += [
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": piece}}
        for piece in pieces
    ]
    payloads += [
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None},
         "usage": {"output_tokens": len(pieces)}},
        {"type": "message_stop"},
    ]
    return [_named(payload) for payload in payloads]
