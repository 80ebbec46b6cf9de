"""A non-streaming exchange: attempts in turn until one answers whole.

The upstream is asked without streaming. When client and upstream speak the same
protocol the upstream's body reaches the client byte for byte; otherwise it is
parsed into a canonical `Response` and rendered in the client's protocol with
the model group name the client asked for. A body that stops arriving for
``stuck_after_s`` makes the attempt stuck.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

import aiohttp
import orjson
from aiohttp import web

from hopbase import errors
from hopbase.proxy.attempt import Attempt, Failure
from hopbase.proxy.flow import Exchange, Plan
from routing import Outcome

if TYPE_CHECKING:
    from hopbase.gateway import Gateway


TryAttempt = Callable[[Plan, Attempt], Coroutine[Any, Any, "web.Response | Failure"]]


async def serve_unary(gateway: Gateway, exchange: Exchange) -> web.Response:
    """Answer ``exchange`` with one whole JSON body, retrying before any answer."""
    return await run_attempts(Plan.for_exchange(gateway, exchange), try_attempt)


async def run_attempts(plan: Plan, attempt_once: TryAttempt) -> web.Response:
    """Attempts in turn (``attempt_once`` each) until one answers whole or none is left."""
    exchange = plan.exchange
    attempt = await plan.next_attempt()
    try:
        while True:
            if isinstance(attempt, errors.GatewayError):
                raise attempt
            answer = await hedged(plan, attempt, attempt_once)
            if isinstance(answer, web.Response):
                return answer
            if not answer.retryable:
                raise answer.error
            attempt = await plan.next_attempt()
    except asyncio.CancelledError:
        exchange.client_disconnected = True
        raise
    finally:
        for each in exchange.attempts:
            each.finish(Outcome.CANCELLED)


async def hedged(plan: Plan, attempt: Attempt, attempt_once: TryAttempt) -> web.Response | Failure:
    """``attempt``, plus one hedge on another deployment if it has not answered in time.

    The first whole answer wins and the other attempt is closed as ``cancelled``. A
    failed attempt is finished and remembered here; the failure returned is the last one.
    """
    delay = plan.gateway.hedge_delay(attempt)
    if delay is None or plan.hedged:
        return _settled(plan, attempt, await attempt_once(plan, attempt))
    first = asyncio.create_task(attempt_once(plan, attempt))
    running = {first: attempt}
    try:
        done, _ = await asyncio.wait(running, timeout=delay)
        if not done:
            await _start_hedge(plan, attempt, attempt_once, running)
        return await _race(plan, running)
    finally:
        for task, each in running.items():
            task.cancel()
            each.finish(Outcome.CANCELLED)
        await asyncio.gather(*running, return_exceptions=True)


async def _start_hedge(
    plan: Plan, attempt: Attempt, attempt_once: TryAttempt, running: dict[Any, Attempt]
) -> None:
    hedge = await plan.hedge_for(attempt)
    if hedge is not None:
        running[asyncio.create_task(attempt_once(plan, hedge))] = hedge


async def _race(plan: Plan, running: dict[Any, Attempt]) -> web.Response | Failure:
    """The first whole answer among ``running``, or the last failure when all fail."""
    failure: Failure | None = None
    while running:
        done, _ = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            answer = _settled(plan, running.pop(task), task.result())
            if isinstance(answer, web.Response):
                return answer
            failure = answer
    assert failure is not None
    return failure


def _settled(
    plan: Plan, attempt: Attempt, answer: web.Response | Failure
) -> web.Response | Failure:
    """Finish a failed attempt and remember it, so no retry goes back to it."""
    if isinstance(answer, Failure):
        attempt.finish(answer.outcome)
        plan.note_failure(attempt, answer.error)
    return answer


async def try_attempt(plan: Plan, attempt: Attempt) -> web.Response | Failure:
    """One attempt of a chat exchange: its whole answer, or why it failed."""
    gateway, exchange = plan.gateway, plan.exchange
    failure = await attempt.send(
        gateway.transport,
        plan.body_for(attempt),
        exchange.client_headers,
        plan.headers_timeout(attempt),
        gateway.redact,
    )
    if failure is not None:
        return failure
    stuck_after_s = plan.routing(attempt.model_group).stuck_after_s
    body = await read_body(attempt, stuck_after_s)
    if isinstance(body, Failure):
        attempt.failure = body
        return body
    return _answer(attempt, exchange, body)


async def read_body(attempt: Attempt, stuck_after_s: float) -> bytes | Failure:
    """The whole upstream body; a pause of ``stuck_after_s`` makes the attempt stuck."""
    assert attempt.response is not None
    loop = asyncio.get_running_loop()
    chunks: list[bytes] = []
    # moving the deadline costs a timer each time: move it only once a tenth of it went by
    step = stuck_after_s / 10
    try:
        async with asyncio.timeout(stuck_after_s) as deadline:
            moved_at = loop.time()
            async for chunk in attempt.response.iter_chunks():
                now = loop.time()
                attempt.mark_output(now)
                attempt.last_chunk_at = now
                chunks.append(chunk)
                if now - moved_at > step:
                    deadline.reschedule(now + stuck_after_s)
                    moved_at = now
    except TimeoutError:
        return Failure(Outcome.STUCK, errors.UpstreamTimeout("upstream stopped sending"), True)
    except (aiohttp.ClientError, OSError):
        return Failure(Outcome.ERROR, errors.UpstreamFailed("upstream connection broke"), True)
    return b"".join(chunks)


def _answer(attempt: Attempt, exchange: Exchange, body: bytes) -> web.Response | Failure:
    passthrough = attempt.protocol is exchange.client
    try:
        payload = orjson.loads(body)
        if passthrough:  # the bytes go out as they came: read only the usage
            attempt.usage = attempt.protocol.response_usage(payload)
        else:
            response = attempt.protocol.parse_response(payload)
            attempt.usage = response.usage
            body = orjson.dumps(exchange.client.render_response(response, exchange.model_group))
    except (orjson.JSONDecodeError, errors.GatewayError, KeyError, TypeError, ValueError,
            AttributeError):
        invalid = errors.UpstreamFailed("upstream sent an invalid answer")
        return Failure(Outcome.ERROR, invalid, retryable=True)
    attempt.finish(Outcome.SUCCESS)
    exchange.served_group = attempt.model_group
    headers = {"Content-Type": "application/json"}
    if attempt.model_group != exchange.model_group:
        headers["x-hopbase-fallback"] = attempt.model_group
    return web.Response(body=body, headers=headers)
