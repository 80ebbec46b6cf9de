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
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any, Literal, NoReturn

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
_MINTED_REASONING = "rs_hopbase"
_OPENAI_ERROR_TYPES = {
    "invalid_request_error": "invalid_request_error", "not_found_error": "invalid_request_error",
    "request_too_large": "invalid_request_error", "authentication_error": "authentication_error",
    "permission_error": "permission_error", "rate_limit_error": "rate_limit_error",
}
_STATUS_ERROR_TYPES = {401: "authentication_error", 403: "permission_error",
                       429: "rate_limit_error"}
# Responses error codes -> canonical (Anthropic) error words; anything else is api_error.
_CANONICAL_ERROR_TYPES = {
    "rate_limit_exceeded": "rate_limit_error", "server_error": "api_error",
    "invalid_prompt": "invalid_request_error", "vector_store_timeout": "timeout_error",
}


def _fail(path: str, problem: str) -> NoReturn:
    raise errors.InvalidRequest(f"{path}: {problem}")


def _string(value: Any, path: str) -> str:
    if not isinstance(value, str):
        _fail(path, "must be a string")
    return value


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
    signature = _reasoning_signature(item_id, encrypted)
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


def _reasoning_signature(item_id: str | None, encrypted: str | None) -> str | None:
    """The canonical signature of a reasoning item (see the module docstring)."""
    if not item_id or item_id.startswith(_MINTED_REASONING):
        return encrypted
    return item_id if encrypted is None else f"{item_id}:{encrypted}"


def _reasoning_identity(signature: str | None) -> tuple[str | None, str | None]:
    """``(OpenAI item id or None, encrypted_content)`` of a canonical signature."""
    if signature and signature.startswith("rs_") and not signature.startswith(_MINTED_REASONING):
        item_id, _, encrypted = signature.partition(":")
        return item_id, encrypted or None
    return None, signature


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
        item_id, encrypted = _reasoning_identity(part.signature)
        if item_id is not None:
            return _reasoning_item(item_id, part.text, encrypted, None)
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
            reasoning = _reasoning_part(item)
            if reasoning.text or reasoning.signature:
                parts.append(reasoning)
    stop = _stop_reason(body.get("status"), body.get("incomplete_details"), has_call, refused)
    return canonical.Response(str(body.get("id") or ""), str(body.get("model") or ""),
                              tuple(parts), stop, _parse_usage(body.get("usage")))


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


def _reasoning_part(item: dict[str, Any]) -> ReasoningPart:
    summary = item.get("summary")
    texts = [part["text"] for part in summary if isinstance(part, dict)
             and isinstance(part.get("text"), str)] if isinstance(summary, list) else []
    item_id, encrypted = item.get("id"), item.get("encrypted_content")
    signature = _reasoning_signature(item_id if isinstance(item_id, str) else None,
                                     encrypted if isinstance(encrypted, str) else None)
    return ReasoningPart("\n\n".join(texts), signature)


def _stop_reason(status: Any, incomplete: Any, has_call: bool, refused: bool) -> StopReason | None:
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


def _parse_usage(value: Any) -> canonical.Usage:
    return canonical.Usage(
        input_tokens=_count(value, "input_tokens"),
        output_tokens=_count(value, "output_tokens"),
        cached_input_tokens=_count(_get(value, "input_tokens_details"), "cached_tokens"),
        reasoning_tokens=_count(_get(value, "output_tokens_details"), "reasoning_tokens"),
    )


def _get(value: Any, key: str) -> Any:
    return value.get(key) if isinstance(value, dict) else None


def _render_usage(usage: canonical.Usage) -> dict[str, Any]:
    return {
        "input_tokens": usage.input_tokens,
        "input_tokens_details": {"cached_tokens": usage.cached_input_tokens,
                                 "cache_write_tokens": 0},
        "output_tokens": usage.output_tokens,
        "output_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
        "total_tokens": usage.total_tokens,
    }


def _response_id(candidate: str) -> str:
    return candidate if candidate.startswith("resp_") else f"resp_{uuid.uuid4().hex}"


def _mint(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


def _message_item(item_id: str, text: str, status: str) -> dict[str, Any]:
    return {"id": item_id, "type": "message", "status": status, "role": "assistant",
            "content": [{"type": "output_text", "annotations": [], "logprobs": [], "text": text}]}


def _function_call_item(item_id: str, call: ToolCall, status: str) -> dict[str, Any]:
    return {"id": item_id, "type": "function_call", "status": status,
            "arguments": call.arguments, "call_id": call.id, "name": call.name}


def _reasoning_item(item_id: str, text: str, encrypted: str | None,
                    status: str | None) -> dict[str, Any]:
    item: dict[str, Any] = {"id": item_id, "type": "reasoning",
                            "summary": [{"type": "summary_text", "text": text}] if text else []}
    if encrypted is not None:
        item["encrypted_content"] = encrypted
    if status is not None:
        item["status"] = status
    return item


def _finished_status(stop_reason: StopReason | None) -> tuple[str, dict[str, str] | None]:
    if stop_reason is StopReason.MAX_TOKENS:
        return "incomplete", {"reason": "max_output_tokens"}
    if stop_reason is StopReason.CONTENT_FILTER:
        return "incomplete", {"reason": "content_filter"}
    return "completed", None


def _response_object(response_id: str, created_at: int, model: str, status: str,
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


def render_response(response: canonical.Response, model: str) -> dict[str, Any]:
    """Render a whole answer as a Responses response object carrying ``model``."""
    output: list[dict[str, Any]] = []
    for part in response.parts:
        if isinstance(part, TextPart):
            output.append(_message_item(_mint("msg"), part.text, "completed"))
        elif isinstance(part, ToolCall):
            output.append(_function_call_item(_mint("fc"), part, "completed"))
        elif isinstance(part, ReasoningPart):
            item_id, encrypted = _reasoning_identity(part.signature)
            output.append(_reasoning_item(item_id or _mint(_MINTED_REASONING), part.text,
                                          encrypted, None))
    status, incomplete = _finished_status(response.stop_reason)
    return _response_object(_response_id(response.id), int(time.time()), model, status, output,
                            _render_usage(response.usage), incomplete=incomplete)


def render_error(error: errors.GatewayError) -> dict[str, Any]:
    """The OpenAI error body for ``error``, sent before any stream starts."""
    if isinstance(error, errors.UpstreamRejected):
        kind = "invalid_request_error"
    elif error.status >= 500:
        kind = "server_error"
    else:
        kind = _STATUS_ERROR_TYPES.get(error.status, _OPENAI_ERROR_TYPES.get(
            error.type, "invalid_request_error"))
    return {"error": {"message": error.message, "type": kind, "param": None, "code": error.code}}


def _stream_error(error: Any) -> canonical.Error:
    """A canonical error from a Responses ``error`` object (``code`` and ``message``)."""
    if not isinstance(error, dict):
        return canonical.Error("api_error", "upstream stream failed")
    code, message = error.get("code"), error.get("message")
    kind = _CANONICAL_ERROR_TYPES.get(code, "api_error") if isinstance(code, str) else "api_error"
    return canonical.Error(kind, message if isinstance(message, str) else "upstream stream failed")


def _output_index(payload: dict[str, Any]) -> int:
    index = payload.get("output_index")
    return index if isinstance(index, int) else -1


def _text(payload: Any, key: str) -> str:
    value = payload.get(key) if isinstance(payload, dict) else None
    return value if isinstance(value, str) else ""


@attrs.define
class StreamParser:
    """Turns upstream Responses stream events into canonical events.

    ``ToolCallStart.index`` counts function calls in this answer; ``complete`` turns True
    on ``response.completed``, ``response.incomplete``, ``response.failed`` and ``error``.
    """

    complete: bool = False
    _tool_indices: dict[int, int] = attrs.field(factory=dict)  # output_index -> tool index
    _arguments_seen: set[int] = attrs.field(factory=set)
    _refused: bool = False

    def feed(self, event: sse.Event) -> list[canonical.Event]:
        """Parse one upstream SSE event."""
        try:
            payload = orjson.loads(event.data)
        except orjson.JSONDecodeError:
            if event.data.strip() == b"[DONE]":
                return []
            return [canonical.Error("api_error", "invalid JSON from upstream")]
        if not isinstance(payload, dict):
            return [canonical.Error("api_error", "invalid JSON from upstream")]
        kind = payload.get("type") or event.name
        handler = _PARSE_HANDLERS.get(kind) if isinstance(kind, str) else None
        if handler is not None:
            return handler(self, payload)
        if "error" in payload:  # an OpenAI-compatible server's Chat-style error
            self.complete = True
            return [_stream_error(payload["error"])]
        return []

    def _created(self, payload: dict[str, Any]) -> list[canonical.Event]:
        response = _get(payload, "response")
        return [canonical.Start(_text(response, "id"), _text(response, "model"))]

    def _text_delta(self, payload: dict[str, Any]) -> list[canonical.Event]:
        delta = _text(payload, "delta")
        return [canonical.TextDelta(delta)] if delta else []

    def _refusal_delta(self, payload: dict[str, Any]) -> list[canonical.Event]:
        self._refused = True
        return self._text_delta(payload)

    def _reasoning_delta(self, payload: dict[str, Any]) -> list[canonical.Event]:
        delta = _text(payload, "delta")
        return [canonical.ReasoningDelta(delta)] if delta else []

    def _summary_part_added(self, payload: dict[str, Any]) -> list[canonical.Event]:
        index = payload.get("summary_index")
        # Summary parts are separate paragraphs, as parse_response joins them.
        return [canonical.ReasoningDelta("\n\n")] if isinstance(index, int) and index > 0 else []

    def _item_added(self, payload: dict[str, Any]) -> list[canonical.Event]:
        item = _get(payload, "item")
        if not isinstance(item, dict) or item.get("type") != "function_call":
            return []
        return [self._start_tool(_output_index(payload), item)]

    def _start_tool(self, output_index: int, item: dict[str, Any]) -> canonical.ToolCallStart:
        index = len(self._tool_indices)
        self._tool_indices[output_index] = index
        return canonical.ToolCallStart(index, _text(item, "call_id"), _text(item, "name"))

    def _arguments_delta(self, payload: dict[str, Any]) -> list[canonical.Event]:
        index = self._tool_indices.get(_output_index(payload))
        delta = _text(payload, "delta")
        if index is None or not delta:
            return []
        self._arguments_seen.add(index)
        return [canonical.ToolCallDelta(index, delta)]

    def _arguments_done(self, payload: dict[str, Any]) -> list[canonical.Event]:
        index = self._tool_indices.get(_output_index(payload))
        arguments = _text(payload, "arguments")
        if index is None or index in self._arguments_seen or not arguments:
            return []
        self._arguments_seen.add(index)  # a server that sends only the whole arguments
        return [canonical.ToolCallDelta(index, arguments)]

    def _item_done(self, payload: dict[str, Any]) -> list[canonical.Event]:
        item = _get(payload, "item")
        kind = _get(item, "type")
        if kind == "message":
            return [canonical.BlockStop()]
        if kind == "reasoning":
            signature = _reasoning_part(item).signature
            if signature is None:
                return [canonical.BlockStop()]
            return [canonical.ReasoningDelta("", signature), canonical.BlockStop()]
        if kind == "function_call":
            return [*self._finish_tool(_output_index(payload), item), canonical.BlockStop()]
        return []

    def _finish_tool(self, output_index: int, item: dict[str, Any]) -> list[canonical.Event]:
        events: list[canonical.Event] = []
        index = self._tool_indices.get(output_index)
        if index is None:  # the server skipped output_item.added
            start = self._start_tool(output_index, item)
            index = start.index
            events.append(start)
        arguments = _text(item, "arguments")
        if index not in self._arguments_seen and arguments:
            self._arguments_seen.add(index)
            events.append(canonical.ToolCallDelta(index, arguments))
        return events

    def _finished(self, payload: dict[str, Any]) -> list[canonical.Event]:
        self.complete = True
        response = _get(payload, "response")
        status = "incomplete" if payload.get("type") == "response.incomplete" else "completed"
        stop = _stop_reason(status, _get(response, "incomplete_details"),
                            bool(self._tool_indices), self._refused)
        usage = _get(response, "usage")
        events: list[canonical.Event] = []
        if isinstance(usage, dict):
            events.append(canonical.UsageEvent(_parse_usage(usage)))
        events.append(canonical.Finish(stop or StopReason.END_TURN))
        return events

    def _failed(self, payload: dict[str, Any]) -> list[canonical.Event]:
        self.complete = True
        return [_stream_error(_get(_get(payload, "response"), "error"))]

    def _error(self, payload: dict[str, Any]) -> list[canonical.Event]:
        self.complete = True
        nested = payload.get("error")
        return [_stream_error(nested if isinstance(nested, dict) else payload)]


_PARSE_HANDLERS: dict[str, Callable[[StreamParser, dict[str, Any]], list[canonical.Event]]] = {
    "response.created": StreamParser._created,
    "response.output_item.added": StreamParser._item_added,
    "response.output_text.delta": StreamParser._text_delta,
    "response.refusal.delta": StreamParser._refusal_delta,
    "response.reasoning_summary_part.added": StreamParser._summary_part_added,
    "response.reasoning_summary_text.delta": StreamParser._reasoning_delta,
    "response.reasoning_text.delta": StreamParser._reasoning_delta,
    "response.function_call_arguments.delta": StreamParser._arguments_delta,
    "response.function_call_arguments.done": StreamParser._arguments_done,
    "response.output_item.done": StreamParser._item_done,
    "response.completed": StreamParser._finished,
    "response.incomplete": StreamParser._finished,
    "response.failed": StreamParser._failed,
    "error": StreamParser._error,
}


def _delta_head(kind: str) -> bytes:
    return f'event: {kind}\ndata: {{"type":"{kind}","sequence_number":'.encode()


_TEXT_DELTA_HEAD = _delta_head("response.output_text.delta")
_REASONING_DELTA_HEAD = _delta_head("response.reasoning_summary_text.delta")
_ARGUMENTS_DELTA_HEAD = _delta_head("response.function_call_arguments.delta")
_TEXT_DELTA_TAIL = b',"logprobs":[]}\n\n'
_DELTA_TAIL = b"}\n\n"


@attrs.define
class _Item:
    """One output item the renderer has opened: a message, reasoning or a function call."""

    kind: str
    id: str
    output_index: int
    delta_middle: bytes  # the constant JSON between sequence_number and the delta text
    call_id: str = ""
    name: str = ""
    texts: list[str] = attrs.field(factory=list)
    signature: str | None = None
    summary_started: bool = False
    done: bool = False

    def snapshot(self, status: str) -> dict[str, Any]:
        """This item as a whole output item with ``status``."""
        text = "".join(self.texts)
        if self.kind == "message":
            return _message_item(self.id, text, status)
        if self.kind == "function_call":
            return _function_call_item(self.id, ToolCall(self.call_id, self.name, text), status)
        return _reasoning_item(self.id, text, self.signature, status)


def _middle(item_id: str, output_index: int, index_field: str | None) -> bytes:
    index = f',"{index_field}":0' if index_field else ""
    return f',"item_id":"{item_id}","output_index":{output_index}{index},"delta":'.encode()


@attrs.define
class StreamRenderer:
    """Renders canonical events as a Responses event stream the official SDKs accept.

    Usage is native to Responses, so ``include_usage`` changes nothing: the final
    response object carries usage whenever the upstream reported it.
    """

    model: str
    include_usage: bool = True
    request_id: str = ""
    response_id: str = attrs.field(init=False, default="")
    created_at: int = attrs.field(init=False, factory=lambda: int(time.time()))
    _sequence: int = attrs.field(init=False, default=0)
    _items: list[_Item] = attrs.field(init=False, factory=list)
    _open: _Item | None = attrs.field(init=False, default=None)
    _tools: dict[int, _Item] = attrs.field(init=False, factory=dict)
    _usage: canonical.Usage | None = attrs.field(init=False, default=None)
    _started: bool = attrs.field(init=False, default=False)
    _finished: bool = attrs.field(init=False, default=False)

    def __attrs_post_init__(self) -> None:
        suffix = self.request_id.removeprefix("req_")
        self.response_id = f"resp_{suffix}" if suffix else _mint("resp")

    def render(self, event: canonical.Event) -> bytes:
        """Zero or more whole SSE events for ``event``."""
        if self._finished:
            return b""
        if isinstance(event, canonical.Error):
            return self.render_error(event)
        chunks: list[bytes] = []
        if not self._started:
            self._start(chunks, event if isinstance(event, canonical.Start) else None)
        handler = _RENDER_HANDLERS.get(type(event))
        if handler is not None:
            handler(self, event, chunks)
        return b"".join(chunks)

    def render_error(self, error: canonical.Error) -> bytes:
        """``event: response.failed`` (status failed, ``error {code, message}``), ending it."""
        if self._finished:
            return b""
        chunks: list[bytes] = []
        if not self._started:
            self._start(chunks, None)
        self._finished = True
        code = "rate_limit_exceeded" if error.type == "rate_limit_error" else "server_error"
        output = [item.snapshot("completed" if item.done else "incomplete") for item in self._items]
        response = self._response("failed", output, {"code": code, "message": error.message})
        chunks.append(self._event("response.failed", {"response": response}))
        return b"".join(chunks)

    def _next(self) -> int:
        sequence = self._sequence
        self._sequence += 1
        return sequence

    def _event(self, kind: str, fields: dict[str, Any]) -> bytes:
        payload = {"type": kind, "sequence_number": self._next(), **fields}
        return sse.encode(orjson.dumps(payload), kind)

    def _response(self, status: str, output: list[dict[str, Any]],
                  error: dict[str, str] | None = None,
                  incomplete: dict[str, str] | None = None) -> dict[str, Any]:
        usage = _render_usage(self._usage) if self._usage is not None else None
        return _response_object(self.response_id, self.created_at, self.model, status, output,
                                usage, error, incomplete)

    def _start(self, chunks: list[bytes], start: canonical.Start | None) -> None:
        self._started = True
        if start is not None and start.id.startswith("resp_"):
            self.response_id = start.id
        response = self._response("in_progress", [])
        chunks.append(self._event("response.created", {"response": response}))
        chunks.append(self._event("response.in_progress", {"response": response}))

    def _open_item(self, kind: str, chunks: list[bytes], call: ToolCall | None = None) -> _Item:
        """Close the open item and open a new one of ``kind``."""
        self._close(chunks)
        prefix, index_field = {"message": ("msg", "content_index"),
                               "reasoning": (_MINTED_REASONING, "summary_index"),
                               "function_call": ("fc", None)}[kind]
        item_id, output_index = _mint(prefix), len(self._items)
        item = _Item(kind, item_id, output_index, _middle(item_id, output_index, index_field),
                     call.id if call else "", call.name if call else "")
        self._items.append(item)
        self._open = item
        added = item.snapshot("in_progress")
        if kind == "message":
            added["content"] = []  # the part arrives in content_part.added
        chunks.append(self._event("response.output_item.added", {
            "output_index": output_index, "item": added}))
        if kind == "message":
            chunks.append(self._event("response.content_part.added", {
                "item_id": item_id, "output_index": output_index, "content_index": 0,
                "part": {"type": "output_text", "annotations": [], "logprobs": [], "text": ""}}))
        return item

    def _current(self, kind: str, chunks: list[bytes]) -> _Item:
        if self._open is not None and self._open.kind == kind:
            return self._open
        return self._open_item(kind, chunks)

    def _on_text(self, event: canonical.TextDelta, chunks: list[bytes]) -> None:
        if not event.text:
            return
        item = self._current("message", chunks)
        item.texts.append(event.text)
        chunks.append(b"".join((_TEXT_DELTA_HEAD, b"%d" % self._next(), item.delta_middle,
                                orjson.dumps(event.text), _TEXT_DELTA_TAIL)))

    def _on_reasoning(self, event: canonical.ReasoningDelta, chunks: list[bytes]) -> None:
        if not event.text and not event.signature:
            return
        item = self._current("reasoning", chunks)
        if event.signature:
            item.signature = event.signature
        if not event.text:
            return
        if not item.summary_started:
            item.summary_started = True
            chunks.append(self._event("response.reasoning_summary_part.added", {
                "item_id": item.id, "output_index": item.output_index, "summary_index": 0,
                "part": {"type": "summary_text", "text": ""}}))
        item.texts.append(event.text)
        chunks.append(b"".join((_REASONING_DELTA_HEAD, b"%d" % self._next(), item.delta_middle,
                                orjson.dumps(event.text), _DELTA_TAIL)))

    def _on_tool_start(self, event: canonical.ToolCallStart, chunks: list[bytes]) -> None:
        call = ToolCall(event.id, event.name, "")
        self._tools[event.index] = self._open_item("function_call", chunks, call)

    def _on_tool_delta(self, event: canonical.ToolCallDelta, chunks: list[bytes]) -> None:
        item = self._tools.get(event.index)
        if item is None or not event.arguments:
            return
        item.texts.append(event.arguments)
        chunks.append(b"".join((_ARGUMENTS_DELTA_HEAD, b"%d" % self._next(), item.delta_middle,
                                orjson.dumps(event.arguments), _DELTA_TAIL)))

    def _on_block_stop(self, event: canonical.BlockStop, chunks: list[bytes]) -> None:
        self._close(chunks)

    def _on_usage(self, event: canonical.UsageEvent, chunks: list[bytes]) -> None:
        self._usage = event.usage

    def _on_finish(self, event: canonical.Finish, chunks: list[bytes]) -> None:
        self._close(chunks)
        self._finished = True
        status, incomplete = _finished_status(event.stop_reason)
        output = [item.snapshot("completed") for item in self._items]
        response = self._response(status, output, incomplete=incomplete)
        chunks.append(self._event(f"response.{status}", {"response": response}))

    def _close(self, chunks: list[bytes]) -> None:
        item = self._open
        if item is None:
            return
        self._open, item.done = None, True
        text, where = "".join(item.texts), {"item_id": item.id, "output_index": item.output_index}
        if item.kind == "message":
            part = {"type": "output_text", "annotations": [], "logprobs": [], "text": text}
            chunks.append(self._event("response.output_text.done", {
                **where, "content_index": 0, "text": text, "logprobs": []}))
            chunks.append(self._event("response.content_part.done", {
                **where, "content_index": 0, "part": part}))
        elif item.kind == "function_call":
            chunks.append(self._event("response.function_call_arguments.done", {
                **where, "arguments": text}))
        elif item.summary_started:
            chunks.append(self._event("response.reasoning_summary_text.done", {
                **where, "summary_index": 0, "text": text}))
            chunks.append(self._event("response.reasoning_summary_part.done", {
                **where, "summary_index": 0, "part": {"type": "summary_text", "text": text}}))
        chunks.append(self._event("response.output_item.done", {
            "output_index": item.output_index, "item": item.snapshot("completed")}))


_RENDER_HANDLERS: dict[type, Callable[[StreamRenderer, Any, list[bytes]], None]] = {
    canonical.TextDelta: StreamRenderer._on_text,
    canonical.ReasoningDelta: StreamRenderer._on_reasoning,
    canonical.ToolCallStart: StreamRenderer._on_tool_start,
    canonical.ToolCallDelta: StreamRenderer._on_tool_delta,
    canonical.BlockStop: StreamRenderer._on_block_stop,
    canonical.UsageEvent: StreamRenderer._on_usage,
    canonical.Finish: StreamRenderer._on_finish,
}
