"""Responses requests: the client's body → canonical, canonical → an upstream body."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any, Literal

import attrs

from hopbase import canonical
from hopbase.canonical import (
    ImagePart,
    Message,
    Part,
    ReasoningPart,
    TextPart,
    ToolCall,
    ToolResult,
)
from hopbase.protocols.openai_responses.wire import (
    reasoning_identity,
    reasoning_item,
    reasoning_signature,
)
from hopbase.protocols.validation import fail as _fail
from hopbase.protocols.validation import string as _string

NAME = "openai_responses"

_log = logging.getLogger(__name__)

_KNOWN_FIELDS = frozenset({
    "model", "input", "instructions", "tools", "tool_choice", "max_output_tokens",
    "temperature", "top_p", "stream", "reasoning", "parallel_tool_calls", "user", "metadata",
})
# Fields whose canonical form is lossy: the client's own value rides in extra when it differs.
_FIDELITY_FIELDS = ("input", "instructions", "tools", "tool_choice", "reasoning")
# Without input, the answer continues state the upstream keeps.
_STATEFUL_FIELDS = ("previous_response_id", "prompt", "conversation")
_TEXT_TYPES = ("input_text", "output_text", "text")
_TOOL_CHOICE_MODES = ("auto", "none", "required")




def _optional(body: Mapping[str, Any], key: str, kind: type | tuple[type, ...], what: str,
              path: str = "") -> Any:
    """``body[key]`` if it is absent, null or of ``kind`` (bool counts only as bool)."""
    value = body.get(key)
    if value is not None and (not isinstance(value, kind)
                              or isinstance(value, bool) != (kind is bool)):
        _fail(f"{path}.{key}" if path else key, f"must be {what}")
    return value


def parse_request(body: dict[str, Any]) -> canonical.Request:
    """Parse a Responses request body into a canonical `Request`.

    Raises:
        errors.InvalidRequest: a field is missing or of the wrong type, or an input item or
            content part is of a kind the canonical model cannot carry.
    """
    if not isinstance(body, dict):
        _fail("body", "must be a JSON object")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        _fail("model", "required, a non-empty string")
    system_texts, messages = _parse_input(body)
    instructions = _optional(body, "instructions", str, "a string")
    if instructions is not None:
        system_texts.insert(0, instructions)
    metadata = _optional(body, "metadata", dict, "an object of strings")
    if metadata is not None and not all(isinstance(v, str) for v in metadata.values()):
        _fail("metadata", "values must be strings")
    request = canonical.Request(
        model=model,
        messages=messages,
        system="\n\n".join(system_texts) if system_texts else None,
        tools=_parse_tools(body.get("tools")),
        tool_choice=_parse_tool_choice(body.get("tool_choice")),
        max_tokens=_optional(body, "max_output_tokens", int, "an integer"),
        temperature=_optional(body, "temperature", (int, float), "a number"),
        top_p=_optional(body, "top_p", (int, float), "a number"),
        stream=bool(_optional(body, "stream", bool, "a boolean")),
        include_usage=True,
        reasoning=_parse_reasoning(body.get("reasoning")),
        parallel_tool_calls=_optional(body, "parallel_tool_calls", bool, "a boolean"),
        user=_optional(body, "user", str, "a string"),
        metadata=metadata,
        source_protocol=NAME,
    )
    extra = {key: value for key, value in body.items() if key not in _KNOWN_FIELDS}
    extra.update(_fidelity_extra(body, request))
    return attrs.evolve(request, extra=extra)


def _fidelity_extra(body: dict[str, Any], request: canonical.Request) -> dict[str, Any]:
    """The client's values of lossy fields whose canonical rendering would differ."""
    rendered = _render_fields(request, same_protocol=True)
    extra: dict[str, Any] = {}
    for key in _FIDELITY_FIELDS:
        if body.get(key) is not None and rendered.get(key) != body[key]:
            extra[key] = body[key]
        elif body.get(key) is None and key in rendered:
            extra[key] = None  # e.g. instructions gathered from developer messages
    return extra


@attrs.define
class _Conversation:
    """Groups input items into canonical messages by role."""

    system: list[str] = attrs.field(factory=list)
    _turns: list[tuple[Literal["user", "assistant"], list[Part]]] = attrs.field(factory=list)

    def add(self, role: Literal["user", "assistant"], part: Part) -> None:
        if self._turns and self._turns[-1][0] == role:
            self._turns[-1][1].append(part)
        else:
            self._turns.append((role, [part]))

    def messages(self) -> tuple[Message, ...]:
        return tuple(Message(role, tuple(parts)) for role, parts in self._turns)


def _parse_input(body: dict[str, Any]) -> tuple[list[str], tuple[Message, ...]]:
    value = body.get("input")
    if value is None:
        if any(body.get(key) is not None for key in _STATEFUL_FIELDS):
            return [], ()
        _fail("input", "required, a string or a list of input items")
    if isinstance(value, str):
        return [], (Message("user", (TextPart(value),)),)
    if not isinstance(value, list):
        _fail("input", "must be a string or a list of input items")
    conversation = _Conversation()
    for index, item in enumerate(value):
        path = f"input[{index}]"
        if not isinstance(item, dict):
            _fail(path, "must be an object")
        kind = item.get("type", "message" if "role" in item else None)
        parser = _ITEM_PARSERS.get(kind) if isinstance(kind, str) else None
        if parser is None:
            _fail(f"{path}.type", f"{kind!r} is not supported; use message, function_call, "
                                  "function_call_output or reasoning")
        parser(item, path, conversation)
    return conversation.system, conversation.messages()


def _parse_message(item: dict[str, Any], path: str, conversation: _Conversation) -> None:
    role, content = item.get("role"), item.get("content")
    if role in ("system", "developer"):
        conversation.system.append(_joined_text(content, f"{path}.content"))
        return
    if role not in ("user", "assistant"):
        _fail(f"{path}.role", "must be user, assistant, system or developer")
    if isinstance(content, str):
        conversation.add(role, TextPart(content))
        return
    if not isinstance(content, list):
        _fail(f"{path}.content", "must be a string or a list of content parts")
    for index, part in enumerate(content):
        conversation.add(role, _content_part(part, f"{path}.content[{index}]", role))


def _content_part(part: Any, path: str, role: str) -> Part:
    if not isinstance(part, dict):
        _fail(path, "must be an object")
    kind = part.get("type")
    if kind in _TEXT_TYPES:
        return TextPart(_string(part.get("text"), f"{path}.text"))
    if kind == "refusal" and role == "assistant":
        return TextPart(_string(part.get("refusal"), f"{path}.refusal"))
    if kind == "input_image" and role == "user":
        url = part.get("image_url")
        if not isinstance(url, str) or not url:
            _fail(f"{path}.image_url", "required, a URL or data: URL (file_id is not supported)")
        detail = _optional(part, "detail", str, "a string", path)
        return ImagePart(url, detail)
    allowed = "input_text, input_image" if role == "user" else "output_text, refusal"
    _fail(f"{path}.type", f"{kind!r} is not supported; use {allowed}")


def _joined_text(content: Any, path: str) -> str:
    """The text of a string or a list of text parts (newline-joined)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        _fail(path, "must be a string or a list of text parts")
    texts = []
    for index, part in enumerate(content):
        if not isinstance(part, dict) or part.get("type") not in _TEXT_TYPES:
            _fail(f"{path}[{index}]", "must be an input_text part")
        texts.append(_string(part.get("text"), f"{path}[{index}].text"))
    return "\n".join(texts)


def _non_empty(item: dict[str, Any], key: str, path: str) -> str:
    value = item.get(key)
    if not isinstance(value, str) or not value:
        _fail(f"{path}.{key}", "required, a non-empty string")
    return value


def _parse_function_call(item: dict[str, Any], path: str, conversation: _Conversation) -> None:
    call_id, name = _non_empty(item, "call_id", path), _non_empty(item, "name", path)
    arguments = _string(item.get("arguments"), f"{path}.arguments")
    conversation.add("assistant", ToolCall(call_id, name, arguments))


def _parse_function_output(item: dict[str, Any], path: str, conversation: _Conversation) -> None:
    call_id = _non_empty(item, "call_id", path)
    output = _joined_text(item.get("output"), f"{path}.output")
    conversation.add("user", ToolResult(call_id, output))


def _parse_reasoning_item(item: dict[str, Any], path: str, conversation: _Conversation) -> None:
    summary = item.get("summary")
    if not isinstance(summary, list):
        _fail(f"{path}.summary", "required, a list of summary_text parts")
    texts = [_summary_text(part, f"{path}.summary[{index}]") for index, part in enumerate(summary)]
    item_id = _optional(item, "id", str, "a string", path)
    encrypted = _optional(item, "encrypted_content", str, "a string", path)
    signature = reasoning_signature(item_id, encrypted)
    conversation.add("assistant", ReasoningPart("\n\n".join(texts), signature))


def _summary_text(part: Any, path: str) -> str:
    if not isinstance(part, dict) or part.get("type") != "summary_text":
        _fail(path, "must be a summary_text part")
    return _string(part.get("text"), f"{path}.text")


_ITEM_PARSERS: dict[str, Callable[[dict[str, Any], str, _Conversation], None]] = {
    "message": _parse_message,
    "function_call": _parse_function_call,
    "function_call_output": _parse_function_output,
    "reasoning": _parse_reasoning_item,
}


def _parse_tools(value: Any) -> tuple[canonical.Tool, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        _fail("tools", "must be a list")
    tools = []
    for index, tool in enumerate(value):
        path = f"tools[{index}]"
        if not isinstance(tool, dict):
            _fail(path, "must be an object")
        if tool.get("type") != "function":
            continue  # hosted tools reach a Responses upstream through extra["tools"]
        parameters = _optional(tool, "parameters", dict, "a JSON schema object", path) or {}
        description = _optional(tool, "description", str, "a string", path)
        tools.append(canonical.Tool(_non_empty(tool, "name", path), description, parameters))
    return tuple(tools)


def _parse_tool_choice(value: Any) -> canonical.ToolChoice | None:
    if value is None:
        return None
    if isinstance(value, str):
        if value not in _TOOL_CHOICE_MODES:
            _fail("tool_choice", "must be auto, none, required or an object")
        return canonical.ToolChoice(value)  # type: ignore[arg-type]
    if not isinstance(value, dict):
        _fail("tool_choice", "must be auto, none, required or an object")
    if value.get("type") == "function":
        return canonical.ToolChoice("tool", _non_empty(value, "name", "tool_choice"))
    return None  # hosted-tool and allowed_tools choices reach a Responses upstream via extra


def _parse_reasoning(value: Any) -> canonical.Reasoning | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        _fail("reasoning", "must be an object")
    effort = _optional(value, "effort", str, "a string", "reasoning")
    summary = _optional(value, "summary", str, "a string", "reasoning")
    return canonical.Reasoning(effort=effort, summary=summary)


def render_request(request: canonical.Request, model: str) -> dict[str, Any]:
    """Render ``request`` as a Responses request body for ``model``.

    ``request.extra`` is carried only when the request came in as Responses; Responses
    streams carry usage natively, so nothing extra is asked for.
    """
    same_protocol = request.source_protocol == NAME
    body: dict[str, Any] = {"model": model}
    body.update(_render_fields(request, same_protocol))
    if request.stop:
        _log.debug("dropping stop sequences: the Responses API has no stop field")
    if same_protocol:
        body.update(request.extra)
    elif request.extra:
        _log.debug("dropping %s fields for a Responses upstream: %s",
                   request.source_protocol, ", ".join(sorted(request.extra)))
    return body


def _render_fields(request: canonical.Request, same_protocol: bool) -> dict[str, Any]:
    body: dict[str, Any] = {}
    if request.messages:
        body["input"] = _render_input(request.messages)
    if request.system is not None:
        body["instructions"] = request.system
    if request.tools:
        body["tools"] = [_render_tool(tool) for tool in request.tools]
    if request.tool_choice is not None:
        choice = request.tool_choice
        body["tool_choice"] = ({"type": "function", "name": choice.name}
                               if choice.mode == "tool" else choice.mode)
    optional = (("max_output_tokens", request.max_tokens), ("temperature", request.temperature),
                ("top_p", request.top_p), ("parallel_tool_calls", request.parallel_tool_calls),
                ("user", request.user))
    body.update((key, value) for key, value in optional if value is not None)
    if request.stream:
        body["stream"] = True
    if request.reasoning is not None:
        body["reasoning"] = _render_reasoning(request.reasoning, same_protocol)
    if request.metadata is not None:
        body["metadata"] = dict(request.metadata)
    return body


def _render_input(messages: tuple[Message, ...]) -> str | list[dict[str, Any]]:
    if len(messages) == 1 and messages[0].role == "user" and len(messages[0].parts) == 1:
        only = messages[0].parts[0]
        if isinstance(only, TextPart):
            return only.text
    items: list[dict[str, Any]] = []
    for message in messages:
        content: list[dict[str, Any]] = []
        for part in message.parts:
            rendered = _render_content(part, message.role)
            if rendered is not None:
                content.append(rendered)
                continue
            _flush_message(items, message.role, content)
            content = []
            item = _render_item(part)
            if item is not None:
                items.append(item)
        _flush_message(items, message.role, content)
    return items


def _render_content(part: Part, role: str) -> dict[str, Any] | None:
    """A content part of a message item, or None for parts that are items of their own."""
    if isinstance(part, TextPart):
        if role == "user":
            return {"type": "input_text", "text": part.text}
        return {"type": "output_text", "text": part.text, "annotations": []}
    if isinstance(part, ImagePart) and role == "user":
        image: dict[str, Any] = {"type": "input_image", "image_url": part.url}
        if part.detail is not None:
            image["detail"] = part.detail
        return image
    return None


def _flush_message(items: list[dict[str, Any]], role: str, content: list[dict[str, Any]]) -> None:
    if not content:
        return
    only_text = len(content) == 1 and content[0].get("text") is not None
    items.append({"role": role, "content": content[0]["text"] if only_text else content})


def _render_item(part: Part) -> dict[str, Any] | None:
    if isinstance(part, ToolCall):
        return {"type": "function_call", "call_id": part.id, "name": part.name,
                "arguments": part.arguments}
    if isinstance(part, ToolResult):
        return {"type": "function_call_output", "call_id": part.tool_call_id,
                "output": part.content}
    if isinstance(part, ReasoningPart):
        item_id, encrypted = reasoning_identity(part.signature)
        if item_id is not None:
            return reasoning_item(item_id, part.text, encrypted, None)
        _log.debug("dropping reasoning that an OpenAI upstream did not produce")
    elif isinstance(part, ImagePart):
        _log.debug("dropping an assistant image: Responses input has no place for it")
    return None


def _render_tool(tool: canonical.Tool) -> dict[str, Any]:
    # strict defaults to true in Responses, which most schemas written for other
    # protocols do not satisfy; a Responses client's own strict rides in extra["tools"].
    rendered: dict[str, Any] = {"type": "function", "name": tool.name}
    if tool.description is not None:
        rendered["description"] = tool.description
    rendered["parameters"] = dict(tool.parameters)
    rendered["strict"] = False
    return rendered


def _render_reasoning(reasoning: canonical.Reasoning, same_protocol: bool) -> dict[str, Any]:
    effort = reasoning.effort
    if effort is None and reasoning.budget_tokens is not None:
        budget = reasoning.budget_tokens
        effort = "low" if budget <= 2048 else "medium" if budget <= 8192 else "high"
    summary = reasoning.summary
    if summary is None and not same_protocol:
        summary = "auto"  # without a summary an OpenAI model streams no reasoning text
    rendered: dict[str, Any] = {}
    if effort is not None:
        rendered["effort"] = effort
    if summary is not None:
        rendered["summary"] = summary
    return rendered
