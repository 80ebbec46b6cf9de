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
"""

from __future__ import annotations

import logging
import secrets
import time
from typing import Any, NoReturn

import attrs
import orjson

from hopbase import canonical, errors, sse
from hopbase.canonical import (
    ImagePart,
    Message,
    Part,
    ReasoningPart,
    StopReason,
    TextPart,
    ToolCall,
    ToolResult,
)

NAME = "openai_chat"

_log = logging.getLogger(__name__)

_KNOWN_FIELDS = frozenset({
    "model", "messages", "tools", "tool_choice", "max_tokens", "max_completion_tokens",
    "temperature", "top_p", "stop", "stream", "stream_options", "reasoning_effort",
    "parallel_tool_calls", "user", "metadata",
})
_USER_PART_TYPES = frozenset({"text", "image_url"})
_ASSISTANT_PART_TYPES = frozenset({"text", "refusal"})
_TEXT_PART_TYPES = frozenset({"text"})
_TOOL_CHOICES = {mode.mode: mode for mode in (
    canonical.ToolChoice("auto"), canonical.ToolChoice("none"), canonical.ToolChoice("required"))}
_STOP_REASONS = {
    "stop": StopReason.END_TURN, "length": StopReason.MAX_TOKENS,
    "tool_calls": StopReason.TOOL_USE, "function_call": StopReason.TOOL_USE,
    "content_filter": StopReason.CONTENT_FILTER,
}
_FINISH_REASONS = {
    StopReason.END_TURN: "stop", StopReason.MAX_TOKENS: "length",
    StopReason.TOOL_USE: "tool_calls", StopReason.STOP_SEQUENCE: "stop",
    StopReason.CONTENT_FILTER: "content_filter", StopReason.REFUSAL: "content_filter",
}
# Canonical (Anthropic) error words -> OpenAI error type words; anything else is server_error.
_OPENAI_ERROR_TYPES = {
    "invalid_request_error": "invalid_request_error", "not_found_error": "invalid_request_error",
    "request_too_large": "invalid_request_error", "authentication_error": "authentication_error",
    "permission_error": "permission_error", "rate_limit_error": "rate_limit_error",
}
_CANONICAL_ERROR_TYPES = frozenset({*_OPENAI_ERROR_TYPES, "api_error", "overloaded_error",
                                    "timeout_error"})
_STATUS_ERROR_TYPES = {401: "authentication_error", 403: "permission_error",
                       429: "rate_limit_error"}


def _fail(path: str, problem: str) -> NoReturn:
    raise errors.InvalidRequest(f"{path}: {problem}")


def _string(value: Any, path: str) -> str:
    if not isinstance(value, str):
        _fail(path, "must be a string")
    return value


def _optional(body: dict[str, Any], key: str, kind: type | tuple[type, ...], what: str) -> Any:
    """``body[key]`` if it is absent, null or of ``kind`` (bool counts only as bool)."""
    value = body.get(key)
    if value is not None and (not isinstance(value, kind)
                              or isinstance(value, bool) != (kind is bool)):
        _fail(key, f"must be {what}")
    return value


def parse_request(body: dict[str, Any]) -> canonical.Request:
    """Parse a Chat Completions request body into a canonical `Request`.

    Raises:
        errors.InvalidRequest: a field is missing or has the wrong shape; the message
            names the field by its path (``messages[2].content: ...``).
    """
    if not isinstance(body, dict):
        raise errors.InvalidRequest("the request body must be a JSON object")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        _fail("model", "required, a non-empty string")
    system, messages = _parse_messages(body.get("messages"))
    max_tokens = _optional(body, "max_completion_tokens", int, "an integer")
    if max_tokens is None:
        max_tokens = _optional(body, "max_tokens", int, "an integer")
    effort = _optional(body, "reasoning_effort", str, "a string")
    return canonical.Request(
        model=model, messages=messages, system=system,
        tools=_parse_tools(body.get("tools")),
        tool_choice=_parse_tool_choice(body.get("tool_choice")),
        max_tokens=max_tokens,
        temperature=_optional(body, "temperature", (int, float), "a number"),
        top_p=_optional(body, "top_p", (int, float), "a number"),
        stop=_parse_stop(body.get("stop")),
        stream=bool(_optional(body, "stream", bool, "true or false")),
        include_usage=_parse_include_usage(body.get("stream_options")),
        reasoning=canonical.Reasoning(effort=effort) if effort else None,
        parallel_tool_calls=_optional(body, "parallel_tool_calls", bool, "true or false"),
        user=_optional(body, "user", str, "a string"),
        metadata=_parse_metadata(body.get("metadata")),
        source_protocol=NAME,
        extra={key: value for key, value in body.items() if key not in _KNOWN_FIELDS},
    )


def _parse_messages(value: Any) -> tuple[str | None, tuple[Message, ...]]:
    if not isinstance(value, list) or not value:
        _fail("messages", "required, a non-empty list of messages")
    system: list[str] = []
    messages: list[Message] = []
    previous_role = None
    for position, entry in enumerate(value):
        path = f"messages[{position}]"
        if not isinstance(entry, dict):
            _fail(path, "must be an object")
        role = entry.get("role")
        if role in ("system", "developer"):
            system.append(_joined_text(entry.get("content"), f"{path}.content"))
        elif role == "user":
            parts = _content_parts(entry.get("content"), f"{path}.content", _USER_PART_TYPES)
            messages.append(Message("user", tuple(parts)))
        elif role == "assistant":
            messages.append(Message("assistant", _assistant_parts(entry, path)))
        elif role == "tool":
            result = _tool_result(entry, path)
            if previous_role == "tool":
                messages[-1] = Message("user", (*messages[-1].parts, result))
            else:
                messages.append(Message("user", (result,)))
        else:
            _fail(f"{path}.role", "must be one of system, developer, user, assistant, tool")
        previous_role = role
    return ("\n\n".join(system) if system else None), tuple(messages)


def _content_parts(content: Any, path: str, allowed: frozenset[str]) -> list[Part]:
    if isinstance(content, str):
        return [TextPart(content)]
    if not isinstance(content, list):
        _fail(path, "must be a string or a list of content parts")
    parts: list[Part] = []
    for position, item in enumerate(content):
        item_path = f"{path}[{position}]"
        kind = item.get("type") if isinstance(item, dict) else None
        if not isinstance(kind, str) or kind not in allowed:
            _fail(f"{item_path}.type", f"{kind!r} is not supported here "
                  f"(expected {' or '.join(sorted(allowed))})")
        if kind == "image_url":
            parts.append(_image_part(item.get("image_url"), f"{item_path}.image_url"))
        else:
            # The text of a "text" part is under "text", of a "refusal" part under "refusal".
            parts.append(TextPart(_string(item.get(kind), f"{item_path}.{kind}")))
    return parts


def _image_part(value: Any, path: str) -> ImagePart:
    if isinstance(value, str):
        return ImagePart(value)
    if not isinstance(value, dict):
        _fail(path, "must be an object with a url")
    detail = value.get("detail")
    return ImagePart(_string(value.get("url"), f"{path}.url"),
                     None if detail is None else _string(detail, f"{path}.detail"))


def _joined_text(content: Any, path: str) -> str:
    if isinstance(content, str):
        return content
    parts = _content_parts(content, path, _TEXT_PART_TYPES)
    return "\n".join(part.text for part in parts if isinstance(part, TextPart))


def _assistant_parts(entry: dict[str, Any], path: str) -> tuple[Part, ...]:
    parts: list[Part] = []
    key = "reasoning" if entry.get("reasoning") is not None else "reasoning_content"
    if entry.get(key) is not None and _string(entry[key], f"{path}.{key}"):
        parts.append(ReasoningPart(entry[key]))
    if entry.get("content") is not None:
        content = _content_parts(entry["content"], f"{path}.content", _ASSISTANT_PART_TYPES)
        # Empty text (common beside tool calls) carries nothing, and some upstreams reject it.
        parts.extend(part for part in content if not isinstance(part, TextPart) or part.text)
    tool_calls = entry.get("tool_calls")
    if tool_calls is not None and not isinstance(tool_calls, list):
        _fail(f"{path}.tool_calls", "must be a list")
    for position, call in enumerate(tool_calls or ()):
        parts.append(_tool_call(call, f"{path}.tool_calls[{position}]"))
    return tuple(parts)


def _tool_call(call: Any, path: str) -> ToolCall:
    if not isinstance(call, dict):
        _fail(path, "must be an object")
    if call.get("type", "function") != "function":
        _fail(f"{path}.type", "only function tool calls are supported")
    function = call.get("function")
    if not isinstance(function, dict):
        _fail(f"{path}.function", "required, an object with name and arguments")
    return ToolCall(_string(call.get("id"), f"{path}.id"),
                    _string(function.get("name"), f"{path}.function.name"),
                    _string(function.get("arguments"), f"{path}.function.arguments"))


def _tool_result(entry: dict[str, Any], path: str) -> ToolResult:
    return ToolResult(_string(entry.get("tool_call_id"), f"{path}.tool_call_id"),
                      _joined_text(entry.get("content"), f"{path}.content"))


def _parse_tools(value: Any) -> tuple[canonical.Tool, ...]:
    if value is not None and not isinstance(value, list):
        _fail("tools", "must be a list")
    tools = []
    for position, tool in enumerate(value or ()):
        path = f"tools[{position}]"
        if not isinstance(tool, dict) or tool.get("type") != "function":
            _fail(f"{path}.type", 'only {"type": "function"} tools are supported')
        function = tool.get("function")
        if not isinstance(function, dict):
            _fail(f"{path}.function", "required, an object with a name")
        name, description = function.get("name"), function.get("description")
        if not isinstance(name, str) or not name:
            _fail(f"{path}.function.name", "required, a non-empty string")
        if description is not None:
            _string(description, f"{path}.function.description")
        parameters = function.get("parameters")
        if parameters is not None and not isinstance(parameters, dict):
            _fail(f"{path}.function.parameters", "must be a JSON Schema object")
        tools.append(canonical.Tool(name, description, parameters or {}))
    return tuple(tools)


def _parse_tool_choice(value: Any) -> canonical.ToolChoice | None:
    if value is None:
        return None
    if isinstance(value, str) and value in _TOOL_CHOICES:
        return _TOOL_CHOICES[value]
    if isinstance(value, dict) and value.get("type") == "function":
        function = value.get("function")
        name = function.get("name") if isinstance(function, dict) else None
        if isinstance(name, str) and name:
            return canonical.ToolChoice("tool", name)
    _fail("tool_choice", '"auto", "none", "required" or '
          '{"type": "function", "function": {"name": ...}} expected')


def _parse_stop(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return tuple(value)
    _fail("stop", "must be a string or a list of strings")


def _parse_include_usage(value: Any) -> bool:
    if value is not None and not isinstance(value, dict):
        _fail("stream_options", "must be an object")
    return bool(value and _optional(value, "include_usage", bool, "true or false"))


def _parse_metadata(value: Any) -> dict[str, str] | None:
    if value is not None and (not isinstance(value, dict)
                              or not all(isinstance(item, str) for item in value.values())):
        _fail("metadata", "must be an object of string values")
    return value


def render_request(request: canonical.Request, model: str) -> dict[str, Any]:
    """Render ``request`` as a Chat Completions body for an upstream serving ``model``."""
    body: dict[str, Any] = {"model": model, "messages": _render_messages(request)}
    if request.tools:
        body["tools"] = [_render_tool(tool) for tool in request.tools]
    choice = request.tool_choice
    optional = {
        "tool_choice": None if choice is None else choice.mode if choice.mode != "tool"
        else {"type": "function", "function": {"name": choice.name}},
        "max_completion_tokens": request.max_tokens,
        "temperature": request.temperature,
        "top_p": request.top_p,
        "stop": list(request.stop) or None,
        "reasoning_effort": _reasoning_effort(request.reasoning),
        "parallel_tool_calls": request.parallel_tool_calls,
        "user": request.user,
        "metadata": None if request.metadata is None else dict(request.metadata),
    }
    body.update((key, value) for key, value in optional.items() if value is not None)
    if request.stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    if request.source_protocol == NAME:
        for key, value in request.extra.items():
            body.setdefault(key, value)
    elif request.extra:
        _log.debug("dropping fields %s of a %s request: Chat has no place for them",
                   sorted(request.extra), request.source_protocol)
    return body


def _render_messages(request: canonical.Request) -> list[dict[str, Any]]:
    rendered: list[dict[str, Any]] = []
    if request.system is not None:
        rendered.append({"role": "system", "content": request.system})
    for message in request.messages:
        if message.role == "assistant":
            rendered.append(_render_assistant(message.parts))
        else:
            rendered.extend(_render_user(message.parts))
    return rendered


def _render_user(parts: tuple[Part, ...]) -> list[dict[str, Any]]:
    """One user message per run of text and images, one tool message per tool result."""
    rendered: list[dict[str, Any]] = []
    content: list[dict[str, Any]] = []
    for part in parts:
        if isinstance(part, TextPart):
            content.append({"type": "text", "text": part.text})
        elif isinstance(part, ImagePart):
            image = {"url": part.url} if part.detail is None else {
                "url": part.url, "detail": part.detail}
            content.append({"type": "image_url", "image_url": image})
        elif isinstance(part, ToolResult):
            _flush_user_content(rendered, content)
            rendered.append({"role": "tool", "tool_call_id": part.tool_call_id,
                             "content": part.content})
        else:
            _log.debug("dropping a %s of a user message", type(part).__name__)
    _flush_user_content(rendered, content)
    return rendered


def _flush_user_content(rendered: list[dict[str, Any]], content: list[dict[str, Any]]) -> None:
    if content:
        single_text = len(content) == 1 and content[0]["type"] == "text"
        rendered.append({"role": "user",
                         "content": content[0]["text"] if single_text else list(content)})
        content.clear()


def _render_assistant(parts: tuple[Part, ...]) -> dict[str, Any]:
    texts = [part.text for part in parts if isinstance(part, TextPart)]
    calls = [_render_tool_call(part) for part in parts if isinstance(part, ToolCall)]
    dropped = [type(part).__name__ for part in parts if not isinstance(part, TextPart | ToolCall)]
    if dropped:
        _log.debug("dropping %s of an assistant message: Chat has no input field for them",
                   dropped)
    content: str | list[dict[str, str]] | None = None if calls else ""
    if len(texts) == 1:
        content = texts[0]
    elif texts:
        content = [{"type": "text", "text": text} for text in texts]
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = calls
    return message


def _render_tool_call(call: ToolCall) -> dict[str, Any]:
    return {"id": call.id, "type": "function",
            "function": {"name": call.name, "arguments": call.arguments}}


def _render_tool(tool: canonical.Tool) -> dict[str, Any]:
    function: dict[str, Any] = {"name": tool.name}
    if tool.description is not None:
        function["description"] = tool.description
    if tool.parameters:
        function["parameters"] = dict(tool.parameters)
    return {"type": "function", "function": function}


def _reasoning_effort(reasoning: canonical.Reasoning | None) -> str | None:
    if reasoning is None or reasoning.effort is not None:
        return None if reasoning is None else reasoning.effort
    if reasoning.budget_tokens is None:
        return None
    # Rough bands of Anthropic thinking budgets: light, normal and deep thinking.
    if reasoning.budget_tokens < 4096:
        return "low"
    return "medium" if reasoning.budget_tokens < 16384 else "high"


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
        stop_reason=_stop_reason(choices[0].get("finish_reason"), refused),
        usage=_parse_usage(body.get("usage")),
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


def _stop_reason(word: Any, refused: bool) -> StopReason | None:
    if not word:
        return None
    # Servers invent their own words (vLLM "abort", ...): a natural end is the safest reading.
    reason = _STOP_REASONS.get(word, StopReason.END_TURN) if isinstance(word, str) else (
        StopReason.END_TURN)
    return StopReason.REFUSAL if refused and reason is StopReason.END_TURN else reason


def _count(details: Any, key: str) -> int:
    value = details.get(key) if isinstance(details, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _parse_usage(value: Any) -> canonical.Usage:
    if not isinstance(value, dict):
        return canonical.Usage()
    return canonical.Usage(
        input_tokens=_count(value, "prompt_tokens"),
        output_tokens=_count(value, "completion_tokens"),
        cached_input_tokens=_count(value.get("prompt_tokens_details"), "cached_tokens"),
        reasoning_tokens=_count(value.get("completion_tokens_details"), "reasoning_tokens"),
    )


def _render_usage(usage: canonical.Usage) -> dict[str, Any]:
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
    calls = [_render_tool_call(part) for part in response.parts if isinstance(part, ToolCall)]
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
                     _FINISH_REASONS[response.stop_reason or StopReason.END_TURN]}],
        "usage": _render_usage(response.usage),
    }


def render_error(error: errors.GatewayError) -> dict[str, Any]:
    """The OpenAI error body for ``error``, sent before any stream starts."""
    if isinstance(error, errors.UpstreamRejected):
        kind = "invalid_request_error"
    elif error.status >= 500:
        kind = "server_error"
    else:
        kind = _STATUS_ERROR_TYPES.get(error.status, "invalid_request_error")
    code = error.code or ("rate_limit_exceeded" if error.status == 429 else None)
    return {"error": {"message": error.message, "type": kind, "param": None, "code": code}}


def _stream_error(error: Any) -> canonical.Error:
    if not isinstance(error, dict):
        return canonical.Error("api_error", str(error))
    code, kind, message = error.get("code"), error.get("type"), error.get("message")
    if isinstance(code, str) and code in _CANONICAL_ERROR_TYPES:
        kind = code
    elif not isinstance(kind, str) or kind not in _OPENAI_ERROR_TYPES:
        kind = "api_error"
    return canonical.Error(kind, message if isinstance(message, str) else str(error))


@attrs.define
class StreamParser:
    """Turns upstream ``chat.completion.chunk`` events into canonical events.

    A ``finish_reason`` is held until the usage chunk (or ``[DONE]``) arrives, so the
    canonical order is ``UsageEvent`` then ``Finish``.
    """

    complete: bool = False
    _started: bool = False
    _tool_indices: dict[int, int] = attrs.field(factory=dict)
    _held_finish: canonical.Finish | None = None
    _finished: bool = False
    _usage: canonical.Usage | None = None
    _refused: bool = False

    def feed(self, event: sse.Event) -> list[canonical.Event]:
        """The canonical events carried by one upstream SSE event."""
        if event.data == b"[DONE]":
            self.complete = True
            return self._release()
        try:
            chunk = orjson.loads(event.data)
        except orjson.JSONDecodeError:
            return [canonical.Error("api_error", "invalid JSON from upstream")]
        if not isinstance(chunk, dict):
            return [canonical.Error("api_error", "unexpected chunk from upstream")]
        if chunk.get("error") is not None:
            return [_stream_error(chunk["error"])]
        events: list[canonical.Event] = []
        if not self._started:
            self._started = True
            events.append(canonical.Start(str(chunk.get("id") or ""),
                                          str(chunk.get("model") or "")))
        choices = chunk.get("choices")
        if choices and isinstance(choices, list) and isinstance(choices[0], dict):
            self._choice(choices[0], events)
        if isinstance(chunk.get("usage"), dict):
            self._usage = _parse_usage(chunk["usage"])
            events.extend(self._release())
        return events

    def _choice(self, choice: dict[str, Any], events: list[canonical.Event]) -> None:
        delta = choice.get("delta")
        if isinstance(delta, dict):
            reasoning = delta.get("reasoning") or delta.get("reasoning_content")
            if reasoning and isinstance(reasoning, str):
                events.append(canonical.ReasoningDelta(reasoning))
            if delta.get("content") and isinstance(delta["content"], str):
                events.append(canonical.TextDelta(delta["content"]))
            if delta.get("refusal") and isinstance(delta["refusal"], str):
                self._refused = True
                events.append(canonical.TextDelta(delta["refusal"]))
            if delta.get("tool_calls") and isinstance(delta["tool_calls"], list):
                for position, call in enumerate(delta["tool_calls"]):
                    if isinstance(call, dict):
                        self._tool_call(call, position, events)
        reason = choice.get("finish_reason")
        if reason and not self._finished:
            self._held_finish = canonical.Finish(
                _stop_reason(reason, self._refused) or StopReason.END_TURN)

    def _tool_call(self, call: dict[str, Any], position: int,
                   events: list[canonical.Event]) -> None:
        chat_index = call.get("index")
        if not isinstance(chat_index, int):
            chat_index = position
        function = call.get("function")
        if not isinstance(function, dict):
            function = {}
        index = self._tool_indices.get(chat_index)
        if index is None:
            # A new call; canonical indices count calls in order of appearance.
            index = self._tool_indices[chat_index] = len(self._tool_indices)
            call_id = call.get("id")
            if not isinstance(call_id, str) or not call_id:
                call_id = "call_" + secrets.token_hex(12)
            events.append(canonical.ToolCallStart(index, call_id, str(function.get("name") or "")))
        arguments = function.get("arguments")
        if arguments and isinstance(arguments, str):
            events.append(canonical.ToolCallDelta(index, arguments))

    def _release(self) -> list[canonical.Event]:
        if self._held_finish is None:
            return []
        events: list[canonical.Event] = []
        if self._usage is not None:
            events.append(canonical.UsageEvent(self._usage))
        events.append(self._held_finish)
        self._held_finish, self._finished = None, True
        return events


_CHOICE_HEAD = b'{"index":0,"delta":'
_CHOICE_TAIL = b',"logprobs":null,"finish_reason":null}]}\n\n'
_ROLE_DELTA = b'{"role":"assistant","content":"","refusal":null}'


@attrs.define
class StreamRenderer:
    """Renders canonical events as ``chat.completion.chunk`` SSE events for the client.

    Chunks share one id (``chatcmpl-<request_id>``, random without one), one ``created``
    time and the client's ``model``. `Finish` writes the finish chunk, the usage chunk
    (with ``include_usage`` and when usage was seen) and ``[DONE]``.
    """

    model: str
    include_usage: bool = True
    request_id: str = ""
    _prefix: bytes = attrs.field(init=False, default=b"")
    _usage: canonical.Usage | None = attrs.field(init=False, default=None)
    _started: bool = attrs.field(init=False, default=False)
    _ended: bool = attrs.field(init=False, default=False)

    def __attrs_post_init__(self) -> None:
        head = orjson.dumps({
            "id": "chatcmpl-" + (self.request_id or secrets.token_hex(12)),
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": self.model,
        })
        # Every chunk is this prefix, the choice (or usage) JSON and a constant tail.
        self._prefix = b"data: " + head[:-1] + b',"choices":['

    def render(self, event: canonical.Event) -> bytes:
        """Zero or more whole SSE events for ``event``."""
        if self._ended:
            return b""
        if isinstance(event, canonical.TextDelta):
            return self._delta(b'{"content":%b}' % orjson.dumps(event.text)) if event.text else b""
        if isinstance(event, canonical.ReasoningDelta):
            return self._delta(b'{"reasoning":%b}' % orjson.dumps(event.text)) if event.text \
                else b""
        if isinstance(event, canonical.ToolCallDelta):
            return self._delta(b'{"tool_calls":[{"index":%d,"function":{"arguments":%b}}]}' % (
                event.index, orjson.dumps(event.arguments)))
        if isinstance(event, canonical.ToolCallStart):
            call = {"index": event.index, "id": event.id, "type": "function",
                    "function": {"name": event.name, "arguments": ""}}
            return self._delta(b'{"tool_calls":[%b]}' % orjson.dumps(call))
        if isinstance(event, canonical.Start):
            return self._role_chunk()
        if isinstance(event, canonical.UsageEvent):
            self._usage = event.usage
        elif isinstance(event, canonical.Finish):
            return self._finish(event.stop_reason)
        elif isinstance(event, canonical.Error):
            return self.render_error(event)
        return b""  # also for BlockStop: Chat has no content blocks to close

    def render_error(self, error: canonical.Error) -> bytes:
        """The Chat in-stream error event, then ``[DONE]``; ends the stream."""
        if self._ended:
            return b""
        self._ended = True
        body = {"error": {"message": error.message,
                          "type": _OPENAI_ERROR_TYPES.get(error.type, "server_error"),
                          "code": error.type}}
        return sse.encode(orjson.dumps(body)) + sse.DONE

    def _role_chunk(self) -> bytes:
        if self._started:
            return b""
        self._started = True
        return self._prefix + _CHOICE_HEAD + _ROLE_DELTA + _CHOICE_TAIL

    def _delta(self, delta: bytes) -> bytes:
        return self._role_chunk() + self._prefix + _CHOICE_HEAD + delta + _CHOICE_TAIL

    def _finish(self, stop_reason: StopReason) -> bytes:
        self._ended = True
        out = [self._role_chunk(), self._prefix, _CHOICE_HEAD,
               b'{},"logprobs":null,"finish_reason":"%b"}]}\n\n'
               % _FINISH_REASONS[stop_reason].encode()]
        if self.include_usage and self._usage is not None:
            out += [self._prefix, b'],"usage":', orjson.dumps(_render_usage(self._usage)),
                    b"}\n\n"]
        out.append(sse.DONE)
        return b"".join(out)
