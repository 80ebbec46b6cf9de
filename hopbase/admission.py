"""Waiting for a free in-flight slot: a fair FIFO queue in front of the pure router.

`routing.Router.acquire` answers at once. When it answers `NoCapacity`, the
request joins its model group's queue and waits until a lease of that group is
released (the router's release listener wakes the head of the queue) or until
``queue_timeout_s`` passes. A newcomer never overtakes a waiter of its group.
"""

from __future__ import annotations

import asyncio
import collections

from routing import AllCoolingDown, Lease, NoCapacity, Router


class Admission:
    """Hands out leases, queueing fairly when every usable deployment is full."""

    def __init__(self, router: Router) -> None:
        self._router = router
        self._waiters: dict[str, collections.deque[asyncio.Future[None]]] = {}
        router.add_release_listener(self._released)

    @property
    def router(self) -> Router:
        return self._router

    def waiting(self, model_group: str) -> int:
        """How many requests of ``model_group`` are queued."""
        return len(self._waiters.get(model_group, ()))

    async def acquire(
        self,
        model_group: str,
        exclude: frozenset[str],
        queue_timeout_s: float,
        estimated_tokens: int = 0,
    ) -> Lease | NoCapacity | AllCoolingDown:
        """A lease, or why none could be had within ``queue_timeout_s``."""
        queue = self._waiters.setdefault(model_group, collections.deque())
        if not queue:
            result = self._try(model_group, exclude, estimated_tokens)
            if not isinstance(result, NoCapacity):
                return result
        loop = asyncio.get_running_loop()
        deadline = loop.time() + queue_timeout_s
        while True:
            remaining = deadline - loop.time()
            if remaining <= 0:
                return self._try(model_group, exclude, estimated_tokens)
            waiter: asyncio.Future[None] = loop.create_future()
            queue.append(waiter)
            try:
                async with asyncio.timeout(remaining):
                    await waiter
            except TimeoutError:
                pass
            except asyncio.CancelledError:
                if waiter.done():
                    self._wake(model_group)  # woken, but gone: hand the turn on
                raise
            finally:
                if waiter in queue:
                    queue.remove(waiter)
            result = self._try(model_group, exclude, estimated_tokens)
            if not isinstance(result, NoCapacity):
                self._wake(model_group)
                return result

    def _try(
        self, model_group: str, exclude: frozenset[str], estimated_tokens: int
    ) -> Lease | NoCapacity | AllCoolingDown:
        try:
            return self._router.acquire(model_group, exclude, estimated_tokens)
        except KeyError:  # a reload removed the group while this request waited
            return NoCapacity(1.0)

    def _released(self, model_group: str) -> None:
        self._wake(model_group)

    def _wake(self, model_group: str) -> None:
        queue = self._waiters.get(model_group)
        while queue:
            waiter = queue.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
