"""Chat Completions requests: the client's body → canonical, canonical → an upstream body."""

from __future__ import annotations

import logging
from typing import Any

from hopbase import canonical, errors
from hopbase.canonical import (
    ImagePart,
    Message,
    Part,
    ReasoningPart,
    TextPart,
    ToolCall,
    ToolResult,
)
from hopbase.protocols.validation import fail as _fail
from hopbase.protocols.validation import string as _string

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
    calls = [render_tool_call(part) for part in parts if isinstance(part, ToolCall)]
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


def render_tool_call(call: ToolCall) -> dict[str, Any]:
    """A Chat ``tool_calls`` entry (requests and whole answers alike)."""
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
