"""The bounded buffer between a stream's upstream pumps and its client relay.

Lighter than an `asyncio.Queue` plus an `asyncio.Event` (a few hundred bytes per
open stream instead of several kilobytes), and bounded in bytes: a pump waits
while the events not yet written to the client reach ``limit`` bytes, so a slow
client holds a bounded amount of memory. Timer items (keepalive ticks, hedges,
shutdown) and attempt ends never wait.
"""

from __future__ import annotations

import asyncio
import collections
from typing import Any


class Channel:
    """A FIFO of items for one reader, with writers held back past ``limit`` bytes."""

    __slots__ = ("_items", "_reader", "_writers", "_size", "limit")

    def __init__(self, limit: int) -> None:
        self._items: collections.deque[tuple[int, Any]] = collections.deque()
        self._reader: asyncio.Future[None] | None = None
        self._writers: list[asyncio.Future[None]] | None = None  # made when a writer waits
        self._size = 0
        self.limit = limit

    def full(self) -> bool:
        """True while the bytes waiting for the client are at the bound."""
        return self._size >= self.limit

    def put_nowait(self, item: Any, size: int = 0) -> None:
        """Add ``item`` at once, whatever the bound (for small control items)."""
        self._items.append((size, item))
        self._size += size
        reader = self._reader
        if reader is not None and not reader.done():
            reader.set_result(None)

    async def put(self, item: Any, size: int) -> None:
        """Add ``item`` of ``size`` bytes, first waiting while the channel is full."""
        while self._size >= self.limit:
            waiter = asyncio.get_running_loop().create_future()
            if self._writers is None:
                self._writers = []
            self._writers.append(waiter)
            try:
                await waiter
            finally:
                if self._writers is not None and waiter in self._writers:
                    self._writers.remove(waiter)
        self.put_nowait(item, size)

    async def get(self) -> Any:
        """The oldest item, waiting for one if there is none."""
        while not self._items:
            self._reader = asyncio.get_running_loop().create_future()
            try:
                await self._reader
            finally:
                self._reader = None
        size, item = self._items.popleft()
        if size:
            self._size -= size
            if self._size < self.limit:
                self._wake_writers()
        return item

    def _wake_writers(self) -> None:
        writers, self._writers = self._writers, None
        for writer in writers or ():
            if not writer.done():
                writer.set_result(None)
