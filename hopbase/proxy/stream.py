"""A streaming exchange: upstream readers on one side, the client writer on the other.

Each attempt runs a *pump* task that sends the upstream request, reads its body,
stamps chunks on receipt, decodes SSE, observes every event and puts whole
client-ready events into one bounded queue. The *relay* (the request's own task)
takes items off that queue and writes them to the client, so upstream timing
and slot release never wait for a slow reader.

Before output starts, events are held per attempt (the role chunk,
``message_start``, ``response.created``, pings): a failed or stuck attempt is
dropped with its held events and the next one is tried, invisibly. The first
attempt to produce output wins; a hedge that loses is closed as ``cancelled``.

Keepalive comments come from a ticker that drops a TICK into the same queue, so
they always fall between two whole events. If nothing was sent within
``keepalive_interval_s`` the 200 response is committed so keepalives can flow;
failures before output are then reported as the protocol's error event.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import aiohttp
import orjson
from aiohttp import web

from hopbase import canonical, errors, sse
from hopbase.proxy.attempt import Attempt, Failure
from hopbase.proxy.channel import Channel
from hopbase.proxy.flow import Exchange, Plan
from routing import Outcome

if TYPE_CHECKING:
    from hopbase.gateway import Gateway

PIECE, END, TICK, HEDGE, SHUTDOWN = 0, 1, 2, 3, 4
INTERRUPTED = canonical.Error("api_error", "Response stream interrupted, please retry")


class ClientGone(Exception):
    """The client hung up or stopped reading for longer than the send timeout."""


class Relay:
    """Runs one streaming exchange to its end."""

    def __init__(self, gateway: Gateway, exchange: Exchange, request: web.Request) -> None:
        self.gateway = gateway
        self.exchange = exchange
        self.http_request = request
        self.plan = Plan.for_exchange(gateway, exchange)
        # bounded in bytes: one event larger than the limit still passes when below it
        self.queue = Channel(gateway.config.server.stream_buffer_bytes)
        self.response: web.StreamResponse | None = None
        self.pumps: dict[Attempt, asyncio.Task[None]] = {}
        self.pump_objects: dict[Attempt, Pump] = {}
        self.held: dict[Attempt, list[bytes]] = {}
        self.winner: Attempt | None = None
        self.last_write = 0.0
        self.write_started: float | None = None
        settings = gateway.config.server
        self.keepalive_s = settings.keepalive_interval_s
        self.send_timeout_s = settings.send_timeout_s
        self._ticker: asyncio.TimerHandle | None = None
        self._hedge_timer: asyncio.TimerHandle | None = None
        self._shutting_down = False

    async def run(self) -> web.StreamResponse:
        """Serve the exchange; always leaves no attempt unreleased."""
        loop = asyncio.get_running_loop()
        self.last_write = loop.time()
        self.gateway.open_relays.add(self)
        try:
            first = await self.plan.next_attempt()
            if isinstance(first, errors.GatewayError):
                raise first
            self._start(first)
            self._tick()
            return await self._relay()
        except asyncio.CancelledError:
            self.exchange.client_disconnected = True
            raise
        except ClientGone:
            self.exchange.client_disconnected = True
            return self._finished()
        finally:
            self.gateway.open_relays.discard(self)
            self._stop_timers()
            await self._end_attempts()

    def _start(self, attempt: Attempt) -> None:
        self.held[attempt] = []
        pump = self.pump_objects[attempt] = Pump(self, attempt)
        self.pumps[attempt] = asyncio.create_task(pump.run())
        if not attempt.hedge and not self.plan.hedged:
            self._arm_hedge(attempt)

    async def _relay(self) -> web.StreamResponse:
        get = self.queue.get
        while True:
            item = await get()
            kind = item[0]
            if self._shutting_down:
                return await self._give_up(errors.AllCoolingDown("the server is shutting down"))
            if kind == PIECE:
                attempt, data, output = item[1], item[2], item[3]
                if self.winner is attempt:
                    await self._write(data)
                elif self.winner is None:
                    if output:
                        await self._win(attempt, data)
                    elif attempt in self.held:
                        self.held[attempt].append(data)
            elif kind == END:
                done = await self._ended(item[1], item[2], item[3], item[4])
                if done is not None:
                    return done
            elif kind == TICK:
                await self._keepalive()
            else:
                await self._hedge()

    async def _win(self, attempt: Attempt, data: bytes) -> None:
        self.winner = attempt
        self.exchange.served_group = attempt.model_group
        for other in list(self.pumps):
            if other is not attempt:
                await self._drop(other, Outcome.CANCELLED)
        held = self.held.pop(attempt, [])
        held.append(data)
        await self._write(b"".join(held))

    async def _ended(
        self, attempt: Attempt, outcome: Outcome, failure: Failure | None, tail: bytes
    ) -> web.StreamResponse | None:
        loop = asyncio.get_running_loop()
        if self.winner is None and outcome is Outcome.SUCCESS:
            await self._win(attempt, tail)
            tail = b""
        if attempt is self.winner:
            attempt.finish(outcome, loop.time())
            self.pumps.pop(attempt, None)
            await self._write(tail + self._ending(attempt, outcome, failure))
            if failure is not None:
                self.exchange.error_type = failure.error.type
            return self._finished()
        if attempt not in self.pumps:
            return None  # a loser's late end
        attempt.finish(outcome, loop.time())
        self.pumps.pop(attempt, None)
        self.held.pop(attempt, None)
        if failure is None:
            failure = Failure(outcome, errors.UpstreamFailed("upstream failed"), retryable=True)
        self.plan.note_failure(attempt, failure.error)
        if self.pumps:
            return None  # the other (hedged) attempt is still running
        if not failure.retryable:
            return await self._give_up(failure.error)
        following = await self.plan.next_attempt()
        if isinstance(following, errors.GatewayError):
            return await self._give_up(following)
        self._start(following)
        return None

    def _ending(self, attempt: Attempt, outcome: Outcome, failure: Failure | None) -> bytes:
        """What follows the winner's last event: a terminal marker or an error event."""
        client = self.exchange.client.NAME
        if outcome is Outcome.SUCCESS:
            return sse.DONE if client == "openai_responses" else b""
        if failure is not None and failure.forwarded:
            return sse.DONE if client == "openai_chat" else b""
        error = INTERRUPTED
        if failure is not None:
            error = canonical.Error(failure.error.type, failure.error.message)
        return self._renderer_after_output(attempt).render_error(error)

    def _renderer_after_output(self, attempt: Attempt):  # type: ignore[no-untyped-def]
        """The renderer that continues the stream the client has seen so far.

        Translated streams keep their pump's renderer; for passthrough a fresh one is
        told the stream already started, so it adds no second start event.
        """
        pump = self.pump_objects.get(attempt)
        if pump is not None and pump.renderer is not None:
            return pump.renderer
        renderer = self._renderer()
        renderer.render(canonical.Start(self.exchange.id, self.exchange.model_group))
        return renderer

    async def _give_up(self, error: errors.GatewayError) -> web.StreamResponse:
        self.exchange.error_type = error.type
        if self.response is None:
            raise error
        await self._write(self._renderer().render_error(canonical.Error(error.type, error.message)))
        return self._finished()

    def _renderer(self):  # type: ignore[no-untyped-def]
        return self.exchange.client.StreamRenderer(
            self.exchange.model_group, self.exchange.request.include_usage, self.exchange.id
        )

    def _finished(self) -> web.StreamResponse:
        assert self.response is not None
        return self.response

    async def _commit(self) -> web.StreamResponse:
        if self.response is None:
            response = web.StreamResponse(
                status=200,
                headers={
                    "Content-Type": "text/event-stream; charset=utf-8",
                    "Cache-Control": "no-cache",
                    "X-Accel-Buffering": "no",
                    "x-request-id": self.exchange.id,
                },
            )
            served = self.exchange.served_group
            if served is not None and served != self.exchange.model_group:
                response.headers["x-hopbase-fallback"] = served
            await response.prepare(self.http_request)
            self.response = response
            self.exchange.committed = True
        return self.response

    async def _write(self, data: bytes) -> None:
        if not data:
            return
        response = self.response or await self._commit()
        loop = asyncio.get_running_loop()
        self.write_started = loop.time()
        try:
            await response.write(data)
        except (ConnectionError, aiohttp.ClientConnectionResetError) as error:
            raise ClientGone() from error
        self.write_started = None
        self.last_write = loop.time()

    async def _keepalive(self) -> None:
        loop = asyncio.get_running_loop()
        if loop.time() - self.last_write >= self.keepalive_s * 0.95:
            await self._write(sse.KEEPALIVE)
            self.gateway.keepalive(self.exchange)

    def _tick(self) -> None:
        loop = asyncio.get_running_loop()
        now = loop.time()
        if self.write_started is not None and now - self.write_started > self.send_timeout_s:
            transport = self.http_request.transport
            if transport is not None:
                # a client that reads nothing is let go; not the deployment's fault
                transport.abort()
        elif now - self.last_write >= self.keepalive_s * 0.95:
            self._offer((TICK,))
        self._ticker = loop.call_later(self.keepalive_s / 2, self._tick)

    def shut_down(self) -> None:
        """End this stream with the protocol's error event (graceful shutdown ran out)."""
        self._shutting_down = True
        self._offer((SHUTDOWN,))

    async def put_piece(self, attempt: Attempt, data: bytes, output: bool) -> None:
        """Queue one event for the client, waiting while the buffer is full in bytes."""
        await self.queue.put((PIECE, attempt, data, output), len(data))

    def buffer_full(self) -> bool:
        """True when the client side is not keeping up (items or bytes at their bound)."""
        return self.queue.full()

    def _offer(self, item: tuple) -> None:
        """Queue a timer's item (it never waits for room: it is a few bytes)."""
        self.queue.put_nowait(item)

    def _arm_hedge(self, attempt: Attempt) -> None:
        delay = self.gateway.hedge_delay(attempt)
        if delay is not None:
            loop = asyncio.get_running_loop()
            self._hedge_timer = loop.call_later(delay, self._offer, (HEDGE,))

    async def _hedge(self) -> None:
        if self.winner is not None or self.plan.hedged or len(self.pumps) != 1:
            return
        attempt = await self.plan.hedge_for(next(iter(self.pumps)))
        if attempt is not None:
            self._start(attempt)

    def _stop_timers(self) -> None:
        for timer in (self._ticker, self._hedge_timer):
            if timer is not None:
                timer.cancel()

    async def _drop(self, attempt: Attempt, outcome: Outcome) -> None:
        task = self.pumps.pop(attempt, None)
        self.held.pop(attempt, None)
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        attempt.finish(outcome)

    async def _end_attempts(self) -> None:
        for attempt in list(self.pumps):
            await self._drop(attempt, Outcome.CANCELLED)
        for attempt in self.exchange.attempts:
            attempt.finish(Outcome.CANCELLED)


class Pump:
    """Reads one attempt's upstream stream; the only writer of its queue items."""

    def __init__(self, relay: Relay, attempt: Attempt) -> None:
        self.relay = relay
        self.attempt = attempt
        gateway = relay.gateway
        exchange = relay.exchange
        self.passthrough = attempt.protocol is exchange.client
        self.strip_usage = (
            self.passthrough
            and exchange.client.NAME == "openai_chat"
            and not exchange.request.include_usage
        )
        self.parser = attempt.protocol.StreamParser()
        self.renderer = None if self.passthrough else relay._renderer()
        self.decoder = sse.Decoder(max_line_bytes=gateway.config.server.max_sse_line_bytes)
        self.stuck_after_s = relay.plan.routing(attempt.model_group).stuck_after_s
        self.stuck = False
        self.last_output = 0.0
        self._watchdog: asyncio.TimerHandle | None = None

    async def run(self) -> None:
        """Send the attempt and feed its events into the channel until it ends."""
        relay, attempt = self.relay, self.attempt
        end = relay.queue.put_nowait  # an attempt's end never waits for room
        failure = await attempt.send(
            relay.gateway.transport,
            relay.plan.body_for(attempt),
            relay.exchange.client_headers,
            relay.plan.headers_timeout(attempt),
            relay.gateway.redact,
        )
        if failure is not None:
            end((END, attempt, failure.outcome, failure, b""))
            return
        loop = asyncio.get_running_loop()
        self.last_output = loop.time()
        self._arm_watchdog(self.stuck_after_s)
        try:
            outcome, failure, tail = await self._read()
        except asyncio.CancelledError:
            if not self.stuck:
                raise
            current = asyncio.current_task()
            if current is not None:
                current.uncancel()
            outcome, tail = Outcome.STUCK, b""
            stopped = errors.UpstreamTimeout("upstream stopped sending")
            failure = Failure(Outcome.STUCK, stopped, retryable=True)
        finally:
            if self._watchdog is not None:
                self._watchdog.cancel()
        end((END, attempt, outcome, failure, tail))

    async def _read(self) -> tuple[Outcome, Failure | None, bytes]:
        attempt = self.attempt
        assert attempt.response is not None
        loop = asyncio.get_running_loop()
        put = self.relay.put_piece
        try:
            async for chunk in attempt.response.iter_chunks():
                now = loop.time()
                attempt.last_chunk_at = now
                for event in self.decoder.feed(chunk):
                    data, output, error = self._observe(event, now)
                    if error is not None:
                        return self._upstream_error(error, event)
                    if data:
                        await put(attempt, data, output)
        except sse.LineTooLong:
            message = "upstream sent an over-long SSE line"
            return Outcome.ERROR, Failure(Outcome.ERROR, errors.UpstreamFailed(message), True), b""
        except (aiohttp.ClientError, OSError):
            return Outcome.ERROR, self._interrupted(), b""
        if self.parser.complete:
            return Outcome.SUCCESS, None, b""
        return Outcome.ERROR, self._interrupted(), b""

    def _interrupted(self) -> Failure:
        error = errors.UpstreamFailed(INTERRUPTED.message)
        return Failure(Outcome.ERROR, error, retryable=True)

    def _upstream_error(
        self, error: canonical.Error, event: sse.Event
    ) -> tuple[Outcome, Failure, bytes]:
        failed = errors.UpstreamFailed(error.message)
        failed.type = error.type
        # Only the upstream's own well-formed error event is forwarded as it is: an event
        # that does not even parse (invalid JSON or UTF-8) would break the client's SDK,
        # so HopBase ends the stream with its own error event instead.
        forward = self.passthrough and _parses(event.data)
        failure = Failure(Outcome.ERROR, failed, retryable=True, forwarded=forward)
        return Outcome.ERROR, failure, event.raw if forward else b""

    def _observe(self, event: sse.Event, now: float) -> tuple[bytes, bool, canonical.Error | None]:
        """Parse one event: (bytes for the client, carries output, upstream error)."""
        events = self.parser.feed(event)
        output = False
        error = None
        usage_only = bool(events)
        for item in events:
            if isinstance(item, canonical.OUTPUT_EVENTS):
                output = True
                usage_only = False
            elif isinstance(item, canonical.UsageEvent):
                self.attempt.usage = item.usage
            elif isinstance(item, canonical.Error):
                error = item
            elif not isinstance(item, canonical.Finish):
                usage_only = False
        if output:
            self.attempt.mark_output(now)
            self.last_output = now
        if self.renderer is None:
            if self.strip_usage and usage_only and b'"choices":[]' in event.data.replace(b" ", b""):
                return b"", False, error
            return event.raw, output, error
        if error is not None:
            return b"", False, error
        return b"".join([self.renderer.render(item) for item in events]), output, None

    def _arm_watchdog(self, delay: float) -> None:
        loop = asyncio.get_running_loop()
        self._watchdog = loop.call_later(max(delay, 0.001), self._check_stuck)

    def _check_stuck(self) -> None:
        loop = asyncio.get_running_loop()
        silent_for = loop.time() - self.last_output
        if self.relay.buffer_full():
            silent_for = 0.0  # a full buffer means the client is slow, not the upstream
            self.last_output = loop.time()
        if silent_for >= self.stuck_after_s:
            self.stuck = True
            task = self.relay.pumps.get(self.attempt)
            if task is not None:
                task.cancel()
            return
        self._arm_watchdog(self.stuck_after_s - silent_for)


def _parses(data: bytes) -> bool:
    """True when ``data`` is valid JSON (which implies valid UTF-8)."""
    try:
        orjson.loads(data)
    except orjson.JSONDecodeError:
        return False
    return True
