"""The incremental SSE decoder: framing rules, raw bytes, limits, re-chunking."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hopbase import sse

STREAM = (
    b'data: {"a":1}\n\n'
    b": ping comment\n\n"
    b"event: message_start\ndata: {\"type\":\"message_start\"}\n\n"
    b"data: line one\ndata: line two\n\n"
    b"data: [DONE]\n\n"
)


def decode_all(chunks: list[bytes]) -> list[sse.Event]:
    decoder = sse.Decoder()
    events: list[sse.Event] = []
    for chunk in chunks:
        events.extend(decoder.feed(chunk))
    return events


def summary(events: list[sse.Event]) -> list[tuple[str | None, bytes]]:
    return [(event.name, event.data) for event in events]


EXPECTED = [
    (None, b'{"a":1}'),
    ("message_start", b'{"type":"message_start"}'),
    (None, b"line one\nline two"),
    (None, b"[DONE]"),
]


def test_decodes_events_names_and_multiline_data() -> None:
    assert summary(decode_all([STREAM])) == EXPECTED


def test_raw_bytes_of_each_event_are_exact() -> None:
    events = decode_all([STREAM])
    assert events[0].raw == b'data: {"a":1}\n\n'
    assert events[1].raw == b'event: message_start\ndata: {"type":"message_start"}\n\n'


@pytest.mark.parametrize(
    "variant",
    [
        STREAM.replace(b"\n", b"\r\n"),
        STREAM.replace(b"\n", b"\r"),
        b"\xef\xbb\xbf" + STREAM,
    ],
    ids=["crlf", "lone-cr", "bom"],
)
def test_line_ending_variants_decode_identically(variant: bytes) -> None:
    assert summary(decode_all([variant])) == EXPECTED


def test_one_byte_chunks_and_split_crlf() -> None:
    crlf = STREAM.replace(b"\n", b"\r\n")
    assert summary(decode_all([bytes([b]) for b in crlf])) == EXPECTED


def test_over_long_line_raises_and_buffer_stays_bounded() -> None:
    decoder = sse.Decoder(max_line_bytes=1024)
    decoder.feed(b"data: " + b"x" * 1000)
    with pytest.raises(sse.LineTooLong):
        decoder.feed(b"x" * 100)


def test_pending_reports_a_cut_event() -> None:
    decoder = sse.Decoder()
    decoder.feed(b"data: partial\n")
    assert decoder.pending() is True


@settings(max_examples=200, deadline=None)
@given(
    cuts=st.lists(st.integers(min_value=1, max_value=len(STREAM) - 1), max_size=20),
    ending=st.sampled_from([b"\n", b"\r\n", b"\r"]),
)
def test_rechunking_never_changes_events(cuts: list[int], ending: bytes) -> None:
    stream = STREAM.replace(b"\n", ending)
    points = sorted({min(c, len(stream) - 1) for c in cuts})
    chunks = [stream[a:b] for a, b in zip([0, *points], [*points, len(stream)], strict=True)]
    assert summary(decode_all(chunks)) == EXPECTED
