"""The fair FIFO queue in front of the router's in-flight slots."""

from __future__ import annotations

import asyncio
import random

from hopbase.admission import Admission
from routing import (
    AttemptReport,
    Deployment,
    FakeClock,
    GroupPolicy,
    Lease,
    NoCapacity,
    Outcome,
    Router,
)

ONE_SLOT = {"gpt": [Deployment(id="a", model_group="gpt", max_in_flight=1)]}
POLICIES = {"gpt": GroupPolicy(strategy="weighted")}


def admission() -> Admission:
    return Admission(Router(ONE_SLOT, POLICIES, FakeClock(), random.Random(1)))


def released() -> AttemptReport:
    return AttemptReport(outcome=Outcome.SUCCESS, status=200)


async def test_waiters_are_served_in_arrival_order() -> None:
    queue = admission()
    holder = await queue.acquire("gpt", frozenset(), 1.0)
    assert isinstance(holder, Lease)
    first = asyncio.create_task(queue.acquire("gpt", frozenset(), 1.0))
    await asyncio.sleep(0)
    second = asyncio.create_task(queue.acquire("gpt", frozenset(), 1.0))
    await asyncio.sleep(0)
    assert queue.waiting("gpt") == 2
    holder.release(released())
    lease = await asyncio.wait_for(first, 1)
    assert isinstance(lease, Lease)
    assert second.done() is False
    lease.release(released())
    assert isinstance(await asyncio.wait_for(second, 1), Lease)


async def test_no_slot_within_the_queue_timeout_is_no_capacity() -> None:
    queue = admission()
    holder = await queue.acquire("gpt", frozenset(), 1.0)
    assert isinstance(holder, Lease)
    assert isinstance(await queue.acquire("gpt", frozenset(), 0.05), NoCapacity)
    assert queue.waiting("gpt") == 0


async def test_a_reload_removing_the_group_ends_the_wait_without_an_error() -> None:
    queue = admission()
    holder = await queue.acquire("gpt", frozenset(), 1.0)
    assert isinstance(holder, Lease)
    waiting = asyncio.create_task(queue.acquire("gpt", frozenset(), 1.0))
    await asyncio.sleep(0)
    queue.router.reconfigure({}, {})
    holder.release(released())
    assert isinstance(await asyncio.wait_for(waiting, 1), NoCapacity)
