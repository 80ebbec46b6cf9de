"""response_usage reads just the usage of a whole answer, as parse_response would."""

from __future__ import annotations

import pytest

from hopbase import canonical
from hopbase.protocols import BY_NAME

ANSWER = canonical.Response(
    id="answer-1",
    model="group",
    parts=(canonical.TextPart("Paris."),),
    stop_reason=canonical.StopReason.END_TURN,
    usage=canonical.Usage(input_tokens=14, output_tokens=7),
)


@pytest.mark.parametrize("name", sorted(BY_NAME))
def test_response_usage_matches_the_full_parse(name: str) -> None:
    module = BY_NAME[name]
    body = module.render_response(ANSWER, "group")
    assert module.response_usage(body) == module.parse_response(body).usage
    assert module.response_usage(body).total_tokens == 21


@pytest.mark.parametrize("name", sorted(BY_NAME))
def test_response_usage_of_an_answer_without_usage_is_zero(name: str) -> None:
    assert BY_NAME[name].response_usage({}) == canonical.Usage()
