"""Server-sent events framing: an incremental decoder and the encoder.

The decoder follows the WHATWG event-stream rules: lines end in CRLF, LF or a
lone CR (also when the CR and LF arrive in different chunks), a leading BOM is
dropped, ``:`` lines are comments, multi-line ``data`` is joined with ``\\n``, and
a blank line ends an event. Every decoded `Event` keeps the exact bytes it came
from in ``raw``, so a same-protocol proxy can forward them unchanged.

A line longer than ``max_line_bytes`` raises `LineTooLong` instead of growing the
buffer without bound.
"""

from __future__ import annotations

import attrs

KEEPALIVE = b": hopbase-keepalive\n\n"
DONE = b"data: [DONE]\n\n"
_BOM = b"\xef\xbb\xbf"


class LineTooLong(ValueError):
    """An SSE line exceeded the configured cap."""


@attrs.frozen
class Event:
    """One SSE event: its ``event:`` name (or None), joined ``data`` and raw bytes."""

    name: str | None
    data: bytes
    raw: bytes


def encode(data: bytes, name: str | None = None) -> bytes:
    """Frame ``data`` (one line of JSON) as an SSE event."""
    if name is None:
        return b"data: " + data + b"\n\n"
    return b"event: " + name.encode() + b"\ndata: " + data + b"\n\n"


@attrs.define
class Decoder:
    """Turns arbitrary byte chunks into whole `Event` values."""

    max_line_bytes: int = 1 << 20
    _buffer: bytearray = attrs.field(factory=bytearray)
    _raw: bytearray = attrs.field(factory=bytearray)
    _name: str | None = None
    _data: list[bytes] = attrs.field(factory=list)
    _has_fields: bool = False
    _skip_lf: bool = False
    _started: bool = False

    def feed(self, chunk: bytes) -> list[Event]:
        """Decode ``chunk`` and return the events it completed, in order."""
        if not self._started:
            self._buffer += chunk
            if len(self._buffer) < 3 and _BOM.startswith(bytes(self._buffer)):
                return []
            self._started = True
            if self._buffer.startswith(_BOM):
                del self._buffer[:3]
            chunk = bytes(self._buffer)
            self._buffer.clear()
        if self._skip_lf and chunk:
            self._skip_lf = False
            if chunk[:1] == b"\n":
                self._raw += b"\n"
                chunk = chunk[1:]
        if b"\r" not in chunk and not self._buffer:
            return self._feed_lf(chunk)
        return self._feed_general(chunk)

    def _feed_lf(self, chunk: bytes) -> list[Event]:
        """Fast path for the common LF-only stream."""
        events: list[Event] = []
        start = 0
        while True:
            end = chunk.find(b"\n", start)
            if end < 0:
                break
            self._raw += chunk[start : end + 1]
            event = self._line(chunk[start:end])
            if event is not None:
                events.append(event)
            start = end + 1
        rest = chunk[start:]
        if rest:
            self._buffer += rest
            self._check_length()
        return events

    def _feed_general(self, chunk: bytes) -> list[Event]:
        self._buffer += chunk
        events: list[Event] = []
        buffer = self._buffer
        position = 0
        while position < len(buffer):
            lf = buffer.find(b"\n", position)
            cr = buffer.find(b"\r", position)
            if lf < 0 and cr < 0:
                break
            end = lf if cr < 0 or (0 <= lf < cr) else cr
            line = bytes(buffer[position:end])
            terminator = 1
            if end == cr:
                if end + 1 < len(buffer):
                    terminator = 2 if buffer[end + 1 : end + 2] == b"\n" else 1
                else:
                    self._skip_lf = True
            self._raw += buffer[position : end + terminator]
            position = end + terminator
            event = self._line(line)
            if event is not None:
                events.append(event)
        del buffer[:position]
        self._check_length()
        return events

    def _check_length(self) -> None:
        if len(self._buffer) > self.max_line_bytes:
            raise LineTooLong(f"SSE line longer than {self.max_line_bytes} bytes")

    def _line(self, line: bytes) -> Event | None:
        if not line:
            return self._dispatch()
        if line[:1] == b":":
            if not self._has_fields:
                self._raw.clear()
            return None
        field, _, value = line.partition(b":")
        if value[:1] == b" ":
            value = value[1:]
        self._has_fields = True
        if field == b"data":
            self._data.append(value)
        elif field == b"event":
            self._name = value.decode("utf-8", "replace")
        return None

    def _dispatch(self) -> Event | None:
        if not self._data:
            # WHATWG: a block without a data line dispatches nothing, so a stray line
            # without a colon ("field" with no value) or a bare ``event:`` is dropped
            self._raw.clear()
            self._name, self._has_fields = None, False
            return None
        data = self._data[0] if len(self._data) == 1 else b"\n".join(self._data)
        event = Event(self._name, data, bytes(self._raw))
        self._raw.clear()
        self._name, self._data, self._has_fields = None, [], False
        return event

    def pending(self) -> bool:
        """True when bytes of an unfinished event are buffered (stream cut mid-event)."""
        return self._has_fields or bool(self._buffer)
