"""What the simulated provider answers, and when: canonical events on a schedule.

A `SimulatedAnswer` is one simulated request's answer as `Step` values: an offset
from the request's start and the canonical events due then. `Start` is due at
once; the first output after ``first_output_ms``; then one token (one word) every
``1 / tokens_per_s`` seconds. When that interval is under 2 ms several words share
a step, so a fast simulation costs a few writes, not one per token. The answer
text is ``settings.text`` when given, else ``output_tokens`` deterministic
lorem-ipsum words. Input tokens are estimated as the prompt's characters / 4.

Failures are scripted by ``fail_every``: request N of a deployment fails when N is
a multiple of it (0 never, 1 always), as `planned_failure` says.

Rendering the events into a wire protocol is `hopbase.sim.inprocess`'s job.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from typing import Any, Literal, Protocol

import attrs

from hopbase import canonical

LOREM = (
    "lorem", "ipsum", "dolor", "sit", "amet", "consectetur", "adipiscing", "elit", "sed", "do",
    "eiusmod", "tempor", "incididunt", "ut", "labore", "et", "dolore", "magna", "aliqua", "ut",
    "enim", "ad", "minim", "veniam", "quis", "nostrud", "exercitation", "ullamco", "laboris",
    "nisi", "ut", "aliquip", "ex", "ea", "commodo", "consequat",
)
MIN_STEP_S = 0.002
_PROMPT_KEYS = ("messages", "input", "system", "instructions", "prompt")
_MAX_TOKEN_KEYS = ("max_tokens", "max_completion_tokens", "max_output_tokens")


class SimulatedSettings(Protocol):
    """What the simulator reads from its settings (`hopbase.config.SimulatedConfig` fits)."""

    @property
    def first_output_ms(self) -> float: ...
    @property
    def tokens_per_s(self) -> float: ...
    @property
    def output_tokens(self) -> int: ...
    @property
    def text(self) -> str | None: ...
    @property
    def fail_status(self) -> int | None: ...
    @property
    def fail_every(self) -> int: ...
    @property
    def retry_after_s(self) -> float | None: ...
    @property
    def reset_after_chunks(self) -> int | None: ...
    @property
    def stall_after_chunks(self) -> int | None: ...


@attrs.frozen
class Step:
    """Canonical ``events`` due ``at_s`` seconds after the request started."""

    at_s: float
    events: tuple[canonical.Event, ...]


@attrs.frozen
class Failure:
    """A scripted failure: an error ``status``, or a reset or stall after ``after_chunks``."""

    kind: Literal["status", "reset", "stall"]
    status: int = 0
    retry_after_s: float | None = None
    after_chunks: int = 0


@attrs.define
class RequestCounter:
    """Counts one simulated deployment's requests, so ``fail_every`` picks every Nth."""

    _count: int = 0

    def next(self) -> int:
        """Count a new request and return its number, from 1."""
        self._count += 1
        return self._count


def planned_failure(settings: SimulatedSettings, request_number: int) -> Failure | None:
    """The failure scripted for request ``request_number``, or None when it succeeds.

    A failing request answers ``fail_status`` if set, else resets after
    ``reset_after_chunks``, else stalls after ``stall_after_chunks`` chunks.
    """
    if settings.fail_every <= 0 or request_number % settings.fail_every != 0:
        return None
    if settings.fail_status is not None:
        return Failure("status", settings.fail_status, settings.retry_after_s)
    if settings.reset_after_chunks is not None:
        return Failure("reset", after_chunks=settings.reset_after_chunks)
    if settings.stall_after_chunks is not None:
        return Failure("stall", after_chunks=settings.stall_after_chunks)
    return None


def prompt_chars(body: Mapping[str, Any]) -> int:
    """Characters of prompt text in a wire request (messages, input, system, …)."""
    return sum(_string_chars(body.get(key)) for key in _PROMPT_KEYS)


def _string_chars(value: Any) -> int:
    if isinstance(value, str):
        return len(value)
    if isinstance(value, list):
        return sum(_string_chars(item) for item in value)
    if isinstance(value, dict):
        return sum(_string_chars(item) for item in value.values())
    return 0


def requested_max_tokens(body: Mapping[str, Any]) -> int | None:
    """The output-token limit the request set, in whichever protocol's word."""
    for key in _MAX_TOKEN_KEYS:
        value = body.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
    return None


def answer_words(settings: SimulatedSettings) -> tuple[str, ...]:
    """The answer's tokens: ``settings.text`` split into words, else lorem ipsum."""
    if settings.text is not None:
        return _pieces(tuple(settings.text.split()))
    return _lorem(settings.output_tokens)


@functools.lru_cache(maxsize=64)
def _lorem(count: int) -> tuple[str, ...]:
    words = [LOREM[index % len(LOREM)] for index in range(count)]
    if words:
        words[0] = words[0].capitalize()
        words[-1] += "."
    return _pieces(tuple(words))


@functools.lru_cache(maxsize=64)
def _pieces(words: tuple[str, ...]) -> tuple[str, ...]:
    """Words as text deltas: every word but the first carries its leading space."""
    return tuple(word if index == 0 else " " + word for index, word in enumerate(words))


@functools.lru_cache(maxsize=256)
def _text_steps(
    pieces: tuple[str, ...], first_output_ms: float, tokens_per_s: float
) -> tuple[Step, ...]:
    """The text deltas of ``pieces`` on their schedule (shared by every request alike)."""
    interval = 1.0 / tokens_per_s
    per_step = max(1, math.ceil(MIN_STEP_S / interval - 1e-9))
    first_s = first_output_ms / 1000.0
    steps = []
    for index in range(0, len(pieces), per_step):
        batch = pieces[index : index + per_step]
        # A batch leaves with its last token, so no token is ever early.
        at_s = first_s + (index + len(batch) - 1) * interval
        steps.append(Step(at_s, (canonical.TextDelta("".join(batch)),)))
    return tuple(steps)


@attrs.frozen
class SimulatedAnswer:
    """One simulated answer: its stream as `Step` values, and the same answer whole."""

    steps: tuple[Step, ...]
    response: canonical.Response

    @property
    def duration_s(self) -> float:
        """Seconds from the request to the last event."""
        return self.steps[-1].at_s

    @classmethod
    def create(
        cls, settings: SimulatedSettings, body: Mapping[str, Any], model: str, answer_id: str
    ) -> SimulatedAnswer:
        """The answer to wire request ``body`` under ``settings``, naming ``model``."""
        pieces = answer_words(settings)
        stop_reason = canonical.StopReason.END_TURN
        limit = requested_max_tokens(body)
        if limit is not None and limit < len(pieces):
            pieces, stop_reason = pieces[:limit], canonical.StopReason.MAX_TOKENS
        text_steps = _text_steps(pieces, settings.first_output_ms, settings.tokens_per_s)
        usage = canonical.Usage(
            input_tokens=math.ceil(prompt_chars(body) / 4), output_tokens=len(pieces)
        )
        ending: tuple[canonical.Event, ...] = (
            canonical.UsageEvent(usage), canonical.Finish(stop_reason),
        )
        start = Step(0.0, (canonical.Start(answer_id, model),))
        if text_steps:
            last = text_steps[-1]
            final = Step(last.at_s, (*last.events, canonical.BlockStop(), *ending))
            steps = (start, *text_steps[:-1], final)
        else:
            steps = (start, Step(settings.first_output_ms / 1000.0, ending))
        parts = (canonical.TextPart("".join(pieces)),) if pieces else ()
        response = canonical.Response(answer_id, model, parts, stop_reason, usage)
        return cls(steps, response)
