"""A fault-injecting TCP proxy on loopback, between Kafka clients and one broker.

The broker advertises the proxy's address, so every client connection to that cluster passes
through it. A test can cut the cluster off (existing connections closed, new ones refused), make
it a black hole (connections accepted, nothing forwarded), add latency, limit bandwidth, reset
connections periodically, and restore it. The proxy runs its own event loop in a thread, so
tests drive it from plain synchronous code.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from dataclasses import dataclass


@dataclass
class Faults:
    """What the proxy currently does to traffic."""

    refuse: bool = False  # close every connection at once
    black_hole: bool = False  # accept and hold connections, forward nothing
    delay: float = 0.0  # seconds added to every chunk forwarded
    bytes_per_second: float = 0.0  # 0: unlimited
    reset_every: float = 0.0  # close every connection this often (seconds); 0: never


class FaultProxy:
    """Forwards ``127.0.0.1:<port>`` to ``127.0.0.1:<target_port>``, with injectable faults."""

    def __init__(self, port: int, target_port: int) -> None:
        self.port = port
        self.target_port = target_port
        self.faults = Faults()
        self.connections_accepted = 0
        self.connections_reset = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None
        self._resetting: asyncio.Task[None] | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    def start(self) -> FaultProxy:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        return self

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    # -- what tests call --------------------------------------------------------------------------

    def cut(self) -> None:
        """The cluster becomes unreachable: connections closed, new ones refused."""
        self._set(Faults(refuse=True))
        self._run(self._close_all())

    def black_hole(self) -> None:
        """Connections hang: accepted, nothing forwarded either way."""
        self._set(Faults(black_hole=True))

    def slow(self, delay: float = 0.0, bytes_per_second: float = 0.0) -> None:
        self._set(Faults(delay=delay, bytes_per_second=bytes_per_second))

    def reset_connections(self, every: float) -> None:
        self._set(Faults(reset_every=every))

    def restore(self) -> None:
        self._set(Faults())

    # -- inside the proxy's loop ------------------------------------------------------------------

    def _set(self, faults: Faults) -> None:
        self.faults = faults

    def _run(self, coro: object) -> None:
        asyncio.run_coroutine_threadsafe(coro, self._loop).result(10)  # type: ignore[arg-type]

    async def _start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", self.port)
        self._resetting = self._loop.create_task(self._resetter())

    async def _stop(self) -> None:
        if self._resetting is not None:
            self._resetting.cancel()
        if self._server is not None:
            self._server.close()
        await self._close_all()

    async def _close_all(self) -> None:
        for writer in list(self._writers):
            self.connections_reset += 1
            with contextlib.suppress(Exception):
                writer.transport.abort()
        self._writers.clear()

    async def _resetter(self) -> None:
        last = time.monotonic()
        while True:
            await asyncio.sleep(0.05)
            every = self.faults.reset_every
            if every and time.monotonic() - last >= every:
                last = time.monotonic()
                await self._close_all()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections_accepted += 1
        if self.faults.refuse:
            writer.transport.abort()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.transport.abort()
            return
        self._writers.update((writer, up_writer))
        await asyncio.gather(
            self._pump(reader, up_writer), self._pump(up_reader, writer), return_exceptions=True
        )
        for w in (writer, up_writer):
            self._writers.discard(w)
            w.transport.abort()

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            chunk = await reader.read(65536)
            if not chunk:
                return
            while self.faults.black_hole and not writer.is_closing():  # noqa: ASYNC110
                await asyncio.sleep(0.05)  # set from the test's thread: polled, not awaited
            if self.faults.refuse or writer.is_closing():
                return
            if self.faults.delay:
                await asyncio.sleep(self.faults.delay)
            if self.faults.bytes_per_second:
                await asyncio.sleep(len(chunk) / self.faults.bytes_per_second)
            writer.write(chunk)
            await writer.drain()
