"""Messages requests: the client's body → canonical, canonical → an upstream body."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Literal

import orjson

from hopbase import canonical
from hopbase.protocols.validation import fail as _fail
from hopbase.protocols.validation import string as _string

NAME = "anthropic_messages"
DEFAULT_MAX_TOKENS = 4096
MINIMUM_THINKING_BUDGET = 1024
EFFORT_BUDGETS = {"minimal": 1024, "low": 1024, "medium": 4096, "high": 16384,
                  "xhigh": 32768, "max": 32768}

_log = logging.getLogger(__name__)
_KNOWN_FIELDS = frozenset({"model", "max_tokens", "messages", "system", "tools", "tool_choice",
                           "temperature", "top_p", "stop_sequences", "stream", "thinking",
                           "metadata"})
_TOOL_KEYS = frozenset({"name", "description", "input_schema", "type"})
_CHOICE_FROM_WIRE: dict[Any, Literal["auto", "none", "required", "tool"]] = {
    "auto": "auto", "any": "required", "tool": "tool", "none": "none"}
_CHOICE_TO_WIRE = {"auto": "auto", "required": "any", "tool": "tool", "none": "none"}




def _integer(value: Any, path: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        _fail(path, "must be an integer")
    return value


def _number(value: Any, path: str) -> float:
    if not isinstance(value, int | float) or isinstance(value, bool):
        _fail(path, "must be a number")
    return float(value)


def _object(value: Any, path: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        _fail(path, "must be an object")
    return value


def _list(value: Any, path: str) -> list[Any]:
    if not isinstance(value, list):
        _fail(path, "must be a list")
    return value


def _boolean(value: Any, path: str) -> bool:
    if not isinstance(value, bool):
        _fail(path, "must be true or false")
    return value


def parse_request(body: dict[str, Any]) -> canonical.Request:
    """Parse a Messages request body into a canonical `Request`.

    Raises:
        errors.InvalidRequest: a required field is missing or a field has the wrong shape.
    """
    body = _object(body, "body")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        _fail("model", "required, a non-empty string")
    if "max_tokens" not in body:
        _fail("max_tokens", "required by the Messages API")
    max_tokens = _integer(body["max_tokens"], "max_tokens")
    if max_tokens < 1:
        _fail("max_tokens", "must be at least 1")
    lossy: set[str] = set()  # fields whose raw form must also travel in `extra`
    tool_choice, parallel = _parse_tool_choice(body.get("tool_choice"))
    stream = body.get("stream")
    stream = False if stream is None else _boolean(stream, "stream")
    return canonical.Request(
        model=model,
        messages=_parse_messages(body.get("messages"), lossy),
        system=_parse_system(body.get("system"), lossy),
        tools=_parse_tools(body.get("tools"), lossy),
        tool_choice=tool_choice,
        max_tokens=max_tokens,
        temperature=_optional_number(body, "temperature"),
        top_p=_optional_number(body, "top_p"),
        stop=_parse_stop(body.get("stop_sequences")),
        stream=stream,
        include_usage=stream,
        reasoning=_parse_thinking(body.get("thinking"), lossy),
        parallel_tool_calls=parallel,
        user=_parse_metadata(body.get("metadata"), lossy),
        source_protocol=NAME,
        extra={key: value for key, value in body.items()
               if key not in _KNOWN_FIELDS or key in lossy},
    )


def _optional_number(body: dict[str, Any], key: str) -> float | None:
    value = body.get(key)
    return None if value is None else _number(value, key)


def _parse_stop(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    return tuple(_string(item, f"stop_sequences[{i}]")
                 for i, item in enumerate(_list(value, "stop_sequences")))


def _parse_system(value: Any, lossy: set[str]) -> str | None:
    if value is None or isinstance(value, str):
        return value
    if not isinstance(value, list):
        _fail("system", "must be a string or a list of text blocks")
    texts = []
    for i, item in enumerate(value):
        block = _object(item, f"system[{i}]")
        if block.get("type") != "text":
            _fail(f"system[{i}].type", "must be 'text'")
        texts.append(_string(block.get("text"), f"system[{i}].text"))
        if block.keys() - {"type", "text"}:
            lossy.add("system")
    if len(texts) != 1:
        lossy.add("system")
    return "\n\n".join(texts)


def _parse_tools(value: Any, lossy: set[str]) -> tuple[canonical.Tool, ...]:
    if value is None:
        return ()
    tools = []
    for i, item in enumerate(_list(value, "tools")):
        tool = _object(item, f"tools[{i}]")
        if tool.get("type") not in (None, "custom") or tool.keys() - _TOOL_KEYS:
            lossy.add("tools")  # server tools (web search, bash, ...) and cache_control
        if tool.get("type") not in (None, "custom"):
            continue
        name = _string(tool.get("name"), f"tools[{i}].name")
        description = tool.get("description")
        if description is not None:
            _string(description, f"tools[{i}].description")
        schema = _object(tool.get("input_schema"), f"tools[{i}].input_schema")
        tools.append(canonical.Tool(name, description, schema))
    return tuple(tools)


def _parse_tool_choice(value: Any) -> tuple[canonical.ToolChoice | None, bool | None]:
    if value is None:
        return None, None
    choice = _object(value, "tool_choice")
    kind = choice.get("type")
    mode = _CHOICE_FROM_WIRE.get(kind) if isinstance(kind, str) else None
    if mode is None:
        _fail("tool_choice.type", "must be one of 'auto', 'any', 'tool', 'none'")
    name = _string(choice.get("name"), "tool_choice.name") if mode == "tool" else None
    disable = choice.get("disable_parallel_tool_use")
    if disable is None:
        return canonical.ToolChoice(mode, name), None
    return canonical.ToolChoice(mode, name), not _boolean(
        disable, "tool_choice.disable_parallel_tool_use")


def _parse_thinking(value: Any, lossy: set[str]) -> canonical.Reasoning | None:
    if value is None:
        return None
    thinking = _object(value, "thinking")
    kind = thinking.get("type")
    if kind == "enabled":
        budget = _integer(thinking.get("budget_tokens"), "thinking.budget_tokens")
        if thinking.keys() - {"type", "budget_tokens"}:
            lossy.add("thinking")
        return canonical.Reasoning(budget_tokens=budget)
    if not isinstance(kind, str):
        _fail("thinking.type", "must be a string such as 'enabled' or 'disabled'")
    lossy.add("thinking")
    return None if kind == "disabled" else canonical.Reasoning()


def _parse_metadata(value: Any, lossy: set[str]) -> str | None:
    if value is None:
        return None
    metadata = _object(value, "metadata")
    if metadata.keys() - {"user_id"}:
        lossy.add("metadata")
    user = metadata.get("user_id")
    return None if user is None else _string(user, "metadata.user_id")


def _parse_messages(value: Any, lossy: set[str]) -> tuple[canonical.Message, ...]:
    if value is None:
        _fail("messages", "required, a list of messages")
    items = _list(value, "messages")
    if not items:
        _fail("messages", "must hold at least one message")
    return tuple(_parse_message(item, f"messages[{i}]", lossy) for i, item in enumerate(items))


def _parse_message(value: Any, path: str, lossy: set[str]) -> canonical.Message:
    message = _object(value, path)
    role = message.get("role")
    if role != "user" and role != "assistant":
        _fail(f"{path}.role", "must be 'user' or 'assistant'")
    content = message.get("content")
    if isinstance(content, str):
        return canonical.Message(role, (canonical.TextPart(content),))
    if not isinstance(content, list):
        _fail(f"{path}.content", "must be a string or a list of content blocks")
    parts = []
    for i, item in enumerate(content):
        part = _parse_block(item, f"{path}.content[{i}]", lossy)
        if part is not None:
            parts.append(part)
    return canonical.Message(role, tuple(parts))


def _parse_block(value: Any, path: str, lossy: set[str]) -> canonical.Part | None:
    block = _object(value, path)
    kind = block.get("type")
    if not isinstance(kind, str):
        _fail(f"{path}.type", "must be a string")
    parser = _BLOCK_PARSERS.get(kind)
    if "cache_control" in block or "citations" in block:
        lossy.add("messages")
    if parser is None:
        _log.debug("%s: %s block kept for Anthropic upstreams only", path, kind)
        lossy.add("messages")
        return None
    return parser(block, path, lossy)


def _parse_text(block: dict[str, Any], path: str, lossy: set[str]) -> canonical.Part:
    return canonical.TextPart(_string(block.get("text"), f"{path}.text"))


def _parse_image(block: dict[str, Any], path: str, lossy: set[str]) -> canonical.Part | None:
    source = _object(block.get("source"), f"{path}.source")
    kind = source.get("type")
    if kind == "base64":
        media_type = _string(source.get("media_type"), f"{path}.source.media_type")
        data = _string(source.get("data"), f"{path}.source.data")
        return canonical.ImagePart(f"data:{media_type};base64,{data}")
    if kind == "url":
        return canonical.ImagePart(_string(source.get("url"), f"{path}.source.url"))
    if not isinstance(kind, str):
        _fail(f"{path}.source.type", "must be 'base64' or 'url'")
    lossy.add("messages")  # a file id: only an Anthropic upstream can resolve it
    return None


def _parse_tool_use(block: dict[str, Any], path: str, lossy: set[str]) -> canonical.Part:
    arguments = _object(block.get("input"), f"{path}.input")
    return canonical.ToolCall(_string(block.get("id"), f"{path}.id"),
                              _string(block.get("name"), f"{path}.name"),
                              orjson.dumps(arguments).decode())


def _parse_tool_result(block: dict[str, Any], path: str, lossy: set[str]) -> canonical.Part:
    tool_call_id = _string(block.get("tool_use_id"), f"{path}.tool_use_id")
    content = block.get("content")
    if content is None or isinstance(content, str):
        text = content or ""
    else:
        texts = []
        for i, item in enumerate(_list(content, f"{path}.content")):
            inner = _object(item, f"{path}.content[{i}]")
            if inner.get("type") == "text":
                texts.append(_string(inner.get("text"), f"{path}.content[{i}].text"))
            else:
                lossy.add("messages")  # images and documents inside a tool result
        text = "\n".join(texts)
    is_error = block.get("is_error")
    is_error = False if is_error is None else _boolean(is_error, f"{path}.is_error")
    return canonical.ToolResult(tool_call_id, text, is_error)


def _parse_thinking_block(block: dict[str, Any], path: str, lossy: set[str]) -> canonical.Part:
    text = _string(block.get("thinking"), f"{path}.thinking")
    signature = block.get("signature")
    return canonical.ReasoningPart(
        text, None if signature is None else _string(signature, f"{path}.signature") or None)


def _drop_redacted(block: dict[str, Any], path: str, lossy: set[str]) -> None:
    _log.debug("%s: redacted_thinking kept for Anthropic upstreams only", path)
    lossy.add("messages")


_BlockParser = Callable[[dict[str, Any], str, set[str]], canonical.Part | None]
_BLOCK_PARSERS: dict[Any, _BlockParser] = {
    "text": _parse_text, "image": _parse_image, "tool_use": _parse_tool_use,
    "tool_result": _parse_tool_result, "thinking": _parse_thinking_block,
    "redacted_thinking": _drop_redacted}


def render_request(request: canonical.Request, model: str) -> dict[str, Any]:
    """Render ``request`` as a Messages request body for ``model`` (package docstring: defaults)."""
    body: dict[str, Any] = {"model": model, "max_tokens": request.max_tokens or DEFAULT_MAX_TOKENS,
                            "messages": [rendered for message in request.messages
                                         if (rendered := _render_message(message))]}
    if request.system is not None:
        body["system"] = request.system
    if request.tools:
        body["tools"] = [_render_tool(tool) for tool in request.tools]
    tool_choice = _render_tool_choice(request.tool_choice, request.parallel_tool_calls)
    if tool_choice is not None:
        body["tool_choice"] = tool_choice
    if request.temperature is not None:
        body["temperature"] = request.temperature
    if request.top_p is not None:
        body["top_p"] = request.top_p
    if request.stop:
        body["stop_sequences"] = list(request.stop)
    if request.stream:
        body["stream"] = True  # Messages streams always carry usage
    if request.user is not None:
        body["metadata"] = {"user_id": request.user}
    if request.source_protocol == NAME:
        if request.reasoning is not None:
            body["thinking"] = {"type": "enabled", "budget_tokens": _budget(request.reasoning)}
        body.update(request.extra)
    else:
        _render_foreign_reasoning(request, body)
        dropped = [*request.extra, *(["metadata"] if request.metadata else [])]
        if dropped:
            _log.debug("not sent to %s upstream: %s", NAME, ", ".join(sorted(dropped)))
    return body


def _budget(reasoning: canonical.Reasoning) -> int:
    if reasoning.budget_tokens is not None:
        return reasoning.budget_tokens
    return EFFORT_BUDGETS.get(reasoning.effort or "medium", EFFORT_BUDGETS["medium"])


def _render_foreign_reasoning(request: canonical.Request, body: dict[str, Any]) -> None:
    """Turn another protocol's reasoning into a thinking config Anthropic accepts."""
    reasoning = request.reasoning
    if reasoning is None or (reasoning.effort == "none" and reasoning.budget_tokens is None):
        return
    budget = _budget(reasoning)
    if request.max_tokens is None:
        body["max_tokens"] = DEFAULT_MAX_TOKENS + budget
    else:
        budget = min(budget, request.max_tokens - 1)
    forced = request.tool_choice is not None and request.tool_choice.mode in ("required", "tool")
    if budget < MINIMUM_THINKING_BUDGET or forced:
        _log.debug("thinking left out: budget %d or a forced tool choice", budget)
        return
    body["thinking"] = {"type": "enabled", "budget_tokens": budget}
    body.pop("temperature", None)
    body.pop("top_p", None)


def _render_tool(tool: canonical.Tool) -> dict[str, Any]:
    rendered: dict[str, Any] = {"name": tool.name}
    if tool.description is not None:
        rendered["description"] = tool.description
    rendered["input_schema"] = dict(tool.parameters) or {"type": "object", "properties": {}}
    return rendered


def _render_tool_choice(choice: canonical.ToolChoice | None,
                        parallel: bool | None) -> dict[str, Any] | None:
    if choice is None:
        return {"type": "auto", "disable_parallel_tool_use": True} if parallel is False else None
    rendered: dict[str, Any] = {"type": _CHOICE_TO_WIRE[choice.mode]}
    if choice.mode == "tool":
        rendered["name"] = choice.name or ""
    if parallel is not None and choice.mode != "none":
        rendered["disable_parallel_tool_use"] = not parallel
    return rendered


def _render_message(message: canonical.Message) -> dict[str, Any] | None:
    blocks = [block for part in message.parts if (block := _render_part(part)) is not None]
    if message.role == "user":
        # Anthropic wants a user turn's tool results before anything else in it.
        blocks.sort(key=lambda block: block["type"] != "tool_result")
    return {"role": message.role, "content": blocks} if blocks else None


def _render_part(part: canonical.Part) -> dict[str, Any] | None:
    if isinstance(part, canonical.TextPart):
        return {"type": "text", "text": part.text} if part.text else None
    if isinstance(part, canonical.ToolCall):
        arguments = arguments_object(part.arguments)
        if arguments is None:
            _fail(f"tool call {part.id}", "arguments must be a JSON object")
        return {"type": "tool_use", "id": part.id, "name": part.name, "input": arguments}
    if isinstance(part, canonical.ToolResult):
        result = {"type": "tool_result", "tool_use_id": part.tool_call_id, "content": part.content}
        return {**result, "is_error": True} if part.is_error else result
    if isinstance(part, canonical.ImagePart):
        return _render_image(part.url)
    if part.signature:
        return {"type": "thinking", "thinking": part.text, "signature": part.signature}
    _log.debug("reasoning without a signature is not sent to %s", NAME)
    return None


def _render_image(url: str) -> dict[str, Any]:
    if not url.startswith("data:"):
        return {"type": "image", "source": {"type": "url", "url": url}}
    header, _, data = url[5:].partition(",")
    media_type, _, encoding = header.partition(";")
    if encoding != "base64" or not data:
        _fail("image", "a data: URL must be base64-encoded")
    return {"type": "image", "source": {"type": "base64", "media_type": media_type, "data": data}}


def arguments_object(arguments: str) -> dict[str, Any] | None:
    """Tool call arguments as the object Anthropic's ``input`` wants, None if they are not one."""
    try:
        value = orjson.loads(arguments or "{}")
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None
