"""One module per wire protocol, each with the same names.

Every protocol module (`openai_chat`, `openai_responses`, `anthropic_messages`)
defines:

    NAME                              "openai_chat" | "openai_responses" | "anthropic_messages"
    parse_request(body) -> Request    wire JSON (a dict) → canonical.Request; raises
                                      errors.InvalidRequest with a clear message on bad input
    render_request(request, model)   canonical.Request → wire JSON dict for an upstream of
                                      this protocol, ``model`` being the upstream model name;
                                      a streaming request always asks the upstream for usage
    parse_response(body) -> Response  non-stream wire JSON → canonical.Response
    render_response(response, model) canonical.Response → non-stream wire JSON dict
    response_usage(body) -> Usage     only the usage of a non-stream answer (passthrough)
    render_error(error) -> dict       errors.GatewayError → this protocol's error body
    StreamParser()                    .feed(sse.Event) -> list[canonical.Event]; .complete is
                                      True once the protocol's terminal event was seen
    StreamRenderer(model, include_usage=True, request_id=...)
                                      .render(canonical.Event) -> bytes (zero or more whole
                                      SSE events); .render_error(canonical.Error) -> bytes: the
                                      protocol's in-stream error, ending the stream
"""

from __future__ import annotations

from types import ModuleType

from hopbase.protocols import anthropic_messages, openai_chat, openai_responses

BY_NAME: dict[str, ModuleType] = {
    module.NAME: module for module in (openai_chat, openai_responses, anthropic_messages)
}
