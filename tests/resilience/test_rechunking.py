"""Property: re-chunking a recorded stream at random boundaries never changes its events (issue 8).

``hypothesis`` picks a golden recording, a line ending (LF, CRLF or a lone CR),
whether a BOM leads, and the cut points; the decoder must give the same
(name, data) events as the SDK's decoder on the whole stream, and the raw bytes
of those events, joined, must be the stream itself minus the BOM (so a
passthrough forwards exactly what it received, however the chunks fell).

One allowance: an event whose closing CRLF is cut between CR and LF is
dispatched at the CR (a lone CR ends a line, and waiting for the next chunk
would delay every event of a CR-framed stream); its LF travels with the next
event, or is dropped after the last one. An SDK reads the same events either way.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from openai._streaming import SSEDecoder

from hopbase import sse
from tests.fakes import GOLDEN_DIRECTORY

RECORDINGS = sorted(path.name for path in GOLDEN_DIRECTORY.glob("*.sse"))
BOM = b"\xef\xbb\xbf"


def sdk_events(stream: bytes) -> list[tuple[str | None, str]]:
    return [(event.event, event.data) for event in SSEDecoder().iter_bytes(iter([stream]))]


def cut(stream: bytes, points: list[int]) -> list[bytes]:
    edges = sorted({0, len(stream), *(point % (len(stream) + 1) for point in points)})
    return [stream[start:end] for start, end in zip(edges, edges[1:], strict=False)]


@st.composite
def framed_streams(draw: st.DrawFn) -> tuple[bytes, list[bytes]]:
    """(the stream without BOM, its chunks as they arrive)."""
    recording = draw(st.sampled_from(RECORDINGS))
    ending = draw(st.sampled_from([b"\n", b"\r\n", b"\r"]))
    stream = (GOLDEN_DIRECTORY / recording).read_bytes().replace(b"\n", ending)
    sent = (BOM if draw(st.booleans()) else b"") + stream
    points = draw(st.lists(st.integers(min_value=0, max_value=len(sent)), max_size=40))
    return stream, cut(sent, points)


@settings(max_examples=300, deadline=None)
@given(framed_streams())
def test_rechunked_streams_decode_to_the_same_events(case: tuple[bytes, list[bytes]]) -> None:
    stream, chunks = case
    decoder = sse.Decoder()
    events = [event for chunk in chunks for event in decoder.feed(chunk)]
    assert [(event.name, event.data.decode()) for event in events] == sdk_events(stream)
    forwarded = b"".join(event.raw for event in events)
    dropped_lf = forwarded.endswith(b"\r") and stream == forwarded + b"\n"
    assert forwarded == stream or dropped_lf
    assert decoder.pending() is False


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(RECORDINGS), st.integers(min_value=1, max_value=64))
def test_fixed_size_chunks_decode_like_one_chunk(recording: str, size: int) -> None:
    stream = (GOLDEN_DIRECTORY / recording).read_bytes().replace(b"\n", b"\r\n")
    whole = [(event.name, event.data) for event in sse.Decoder().feed(stream)]
    decoder = sse.Decoder()
    pieces = [decoder.feed(stream[start : start + size]) for start in range(0, len(stream), size)]
    assert [(event.name, event.data) for piece in pieces for event in piece] == whole
