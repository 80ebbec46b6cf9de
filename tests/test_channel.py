"""The byte-bounded channel between a stream's pumps and its relay."""

from __future__ import annotations

import asyncio

from hopbase.proxy.channel import Channel


async def test_items_come_out_in_order() -> None:
    channel = Channel(limit=100)
    await channel.put("a", 10)
    channel.put_nowait("tick")
    await channel.put("b", 10)
    assert [await channel.get() for _ in range(3)] == ["a", "tick", "b"]


async def test_a_writer_waits_past_the_byte_limit_until_the_reader_takes_an_item() -> None:
    channel = Channel(limit=100)
    await channel.put("big", 150)  # one item larger than the limit passes when below it
    assert channel.full() is True
    blocked = asyncio.create_task(channel.put("next", 10))
    await asyncio.sleep(0.01)
    assert blocked.done() is False
    assert await channel.get() == "big"
    await asyncio.wait_for(blocked, 1)
    assert channel.full() is False
    assert await channel.get() == "next"


async def test_control_items_never_wait_for_room() -> None:
    channel = Channel(limit=10)
    await channel.put("data", 50)
    channel.put_nowait("end")
    assert [await channel.get(), await channel.get()] == ["data", "end"]


async def test_a_cancelled_writer_leaves_no_waiter_behind() -> None:
    channel = Channel(limit=10)
    await channel.put("data", 50)
    blocked = asyncio.create_task(channel.put("more", 5))
    await asyncio.sleep(0.01)
    blocked.cancel()
    await asyncio.gather(blocked, return_exceptions=True)
    assert await channel.get() == "data"
    await channel.put("after", 5)
    assert await channel.get() == "after"


async def test_the_reader_waits_for_an_item() -> None:
    channel = Channel(limit=10)
    reader = asyncio.create_task(channel.get())
    await asyncio.sleep(0.01)
    assert reader.done() is False
    channel.put_nowait("x")
    assert await asyncio.wait_for(reader, 1) == "x"
