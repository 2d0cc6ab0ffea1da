"""A fault-injecting TCP proxy on loopback, between Kafka clients and one broker.

The broker advertises the proxy's address, so every client connection to that cluster passes
through it. A test can cut the cluster off (existing connections closed, new ones refused), make
it a black hole (connections accepted, nothing forwarded), add latency, limit bandwidth, reset
connections periodically, and restore it. The proxy runs its own event loop in a thread, so
tests drive it from plain synchronous code.

Without a proxy, a whole broker can be frozen (SIGSTOP: it stops answering) and thawed,
or killed (:func:`freeze`, :func:`thaw`, :func:`frozen`, :func:`kill_broker`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

from aiokafka import AIOKafkaClient
from aiokafka.errors import KafkaError

from replicator.devtools.apache_kafka import ApacheKafkaCluster
from replicator.devtools.embedded import free_port
from tests.integration.harness import Broker, Cluster, new_cluster


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
        # Requests clients sent through the proxy, by Kafka API key (Metadata is 3, ...).
        self.requests: Counter[int] = Counter()
        self.requests_by_client: Counter[tuple[int, str]] = Counter()

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
        pumps = [
            asyncio.ensure_future(
                self._pump(
                    reader, up_writer, _RequestFrames(self.requests, self.requests_by_client)
                )
            ),
            asyncio.ensure_future(self._pump(up_reader, writer)),
        ]
        # Either side closing closes the other, as a broker's death closes its clients' sockets.
        await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
        for pump in pumps:
            pump.cancel()
        await asyncio.gather(*pumps, return_exceptions=True)
        for w in (writer, up_writer):
            self._writers.discard(w)
            w.transport.abort()

    async def _pump(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        frames: _RequestFrames | None = None,
    ) -> None:
        while True:
            chunk = await reader.read(65536)
            if not chunk:
                return
            if frames is not None:
                frames.feed(chunk)
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


def behind_proxy(alias: str) -> tuple[Cluster, FaultProxy]:
    """A started broker for ``alias`` that advertises a started proxy in front of it, so that
    every client connection to it passes through the proxy; the caller stops both."""
    proxy_port = free_port()
    broker = new_cluster(alias, advertised_port=proxy_port)
    proxy = FaultProxy(proxy_port, broker.port).start()
    try:
        broker.start()
    except BaseException:
        proxy.stop()
        raise
    return broker, proxy


class _RequestFrames:
    """Counts the Kafka requests in a client's byte stream, by API key and by (API key, client
    id): each request is a 4-byte size, then its header (API key, version, correlation id,
    client id as a 2-byte length and its bytes)."""

    def __init__(self, counts: Counter[int], by_client: Counter[tuple[int, str]]) -> None:
        self._counts = counts
        self._by_client = by_client
        self._buffer = bytearray()
        self._skip = 0  # bytes of the current request still to pass

    def feed(self, chunk: bytes) -> None:
        data = memoryview(chunk)
        while data:
            if self._skip:
                taken = min(self._skip, len(data))
                self._skip -= taken
                data = data[taken:]
                continue
            need = max(14, 14 + self._client_id_length()) - len(self._buffer)
            self._buffer += data[:need]
            data = data[need:]
            if len(self._buffer) < 14 + self._client_id_length():
                continue
            size = int.from_bytes(self._buffer[:4], "big")
            key = int.from_bytes(self._buffer[4:6], "big")
            length = self._client_id_length()
            client = bytes(self._buffer[14 : 14 + length]).decode(errors="replace")
            self._counts[key] += 1
            self._by_client[key, client] += 1
            self._skip = size - (10 + length)
            self._buffer.clear()

    def _client_id_length(self) -> int:
        if len(self._buffer) < 14:
            return 0
        return max(0, int.from_bytes(self._buffer[12:14], "big", signed=True))


# -- a whole broker that stops answering or dies (no proxy needed) ------------------------------


def freeze(broker: Cluster) -> None:
    """The broker stops answering (SIGSTOP): the kernel still accepts connections, but every
    request hangs, as with a datacenter whose network black-holes traffic."""
    assert broker.process is not None, "the broker is not running"
    os.kill(broker.process.pid, signal.SIGSTOP)


def thaw(broker: Cluster, timeout: float = 60.0) -> None:
    """Undo :func:`freeze` (SIGCONT): the broker answers the requests it held, then new ones.

    Returns once its metadata lists a broker again: a KRaft broker frozen past its session is
    fenced by its controller, and until it registers again it answers metadata requests with
    no broker (a client then fails "Unable to get cluster metadata over all known brokers").
    """
    if broker.process is None or broker.process.poll() is not None:
        return
    os.kill(broker.process.pid, signal.SIGCONT)
    deadline = time.monotonic() + timeout
    while not asyncio.run(_lists_a_broker(broker.bootstrap_servers)):
        assert time.monotonic() < deadline, (
            f"{broker.alias} lists no broker {timeout} s after a thaw"
        )
        time.sleep(0.25)


async def _lists_a_broker(bootstrap: str) -> bool:
    client = AIOKafkaClient(bootstrap_servers=bootstrap, request_timeout_ms=5_000)
    try:
        await client.bootstrap()
        metadata = await client.fetch_all_metadata()
        return bool(metadata.brokers())
    except KafkaError:
        return False
    finally:
        await client.close()


@contextlib.contextmanager
def frozen(broker: Cluster) -> Iterator[None]:
    """:func:`freeze` for the block, thawed on the way out whatever happened (a broker left
    stopped would make its own ``stop`` wait for nothing)."""
    freeze(broker)
    try:
        yield
    finally:
        thaw(broker)


def kill_broker(broker: Cluster) -> None:
    """SIGKILL the broker process: connections reset, its address refuses new ones. Apache Kafka
    keeps its log on disk for a later start; the embedded broker keeps its data in memory only,
    so whatever it held is gone."""
    broker.kill()


@contextlib.contextmanager
def second_listener_proxy(cluster: Broker) -> Iterator[FaultProxy]:
    """A fault proxy in front of the second (``WAN``) listener of a single-node Apache Kafka
    cluster started with ``start_clusters(..., second_listener=True)``: the clients given
    ``cluster.listener("WAN")`` pass through it, every other one reaches the cluster directly."""
    assert isinstance(cluster, ApacheKafkaCluster) and cluster.wan_port
    (node,) = cluster.nodes
    assert node.wan_port is not None
    proxy = FaultProxy(cluster.wan_port, node.wan_port).start()
    try:
        yield proxy
    finally:
        proxy.stop()
