"""A wide-area link on loopback: a TCP relay that delays every byte by a fixed one-way latency
without limiting bandwidth, for benchmarks across datacenters (this kernel has no ``netem``
queueing discipline to do it in the network stack).

Each direction reads as fast as the sender writes and delivers each chunk ``delay`` seconds after
it arrived, so many requests are in the air at once, as on a real long link: a client that waits
for each answer before sending the next request pays the round trip every time, one that
pipelines does not. (The suite's fault proxy instead holds each chunk back before reading the
next, which is what a failing link does, not a long one.)

    python -m replicator.devtools.wan --listen 9101 --to 9092 --delay-ms 25

A cluster is put behind it with a second listener advertised at the relay's port
(:class:`~replicator.devtools.apache_kafka.ApacheKafkaCluster` ``wan_port``): clients that
bootstrap there cross the link on every connection; the rest of the run talks to the cluster
directly.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import subprocess
import sys

import uvloop

from replicator.devtools.embedded import terminate, wait_for_port

_CHUNK = 1 << 16


async def _carry(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: float) -> None:
    """Bytes from ``reader`` to ``writer``, each chunk ``delay`` seconds after it was read; the
    end of the stream travels the same way."""
    loop = asyncio.get_running_loop()
    in_flight: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

    async def receive() -> None:
        while True:
            chunk = await reader.read(_CHUNK)
            in_flight.put_nowait((loop.time() + delay, chunk))
            if not chunk:
                return

    async def deliver() -> None:
        while True:
            due, chunk = await in_flight.get()
            if (wait := due - loop.time()) > 0:
                await asyncio.sleep(wait)
            if not chunk:
                writer.write_eof()
                return
            writer.write(chunk)
            await writer.drain()

    async with asyncio.TaskGroup() as group:
        group.create_task(receive())
        group.create_task(deliver())


async def _connection(
    client_reader: asyncio.StreamReader,
    client_writer: asyncio.StreamWriter,
    target_port: int,
    delay: float,
    open_writers: set[asyncio.StreamWriter],
) -> None:
    try:
        server_reader, server_writer = await asyncio.open_connection("127.0.0.1", target_port)
    except OSError:
        client_writer.transport.abort()
        return
    open_writers.update((client_writer, server_writer))
    try:
        async with asyncio.TaskGroup() as group:
            group.create_task(_carry(client_reader, server_writer, delay))
            group.create_task(_carry(server_reader, client_writer, delay))
    except* (OSError, RuntimeError):
        pass  # either side reset: the other goes too, as on a real link
    finally:
        for writer in (client_writer, server_writer):
            open_writers.discard(writer)
            writer.transport.abort()


async def relay(listen_port: int, target_port: int, delay: float) -> None:
    """Serve ``127.0.0.1:listen_port``, each connection carried to ``target_port`` with
    ``delay`` seconds each way, until SIGTERM; then every connection is reset."""
    open_writers: set[asyncio.StreamWriter] = set()
    server = await asyncio.start_server(
        lambda r, w: _connection(r, w, target_port, delay, open_writers), "127.0.0.1", listen_port
    )
    stopped = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stopped.set)
    async with server:
        await stopped.wait()
        server.close()
        for writer in list(open_writers):
            writer.transport.abort()
        await asyncio.sleep(0.1)  # the connections' tasks see their streams end


class Link:
    """A relay process: ``listen_port`` carried to ``target_port`` with ``one_way_ms`` of delay
    each way (a round trip of twice that); stopped with :meth:`stop` or on exit."""

    def __init__(self, listen_port: int, target_port: int, one_way_ms: float) -> None:
        self.listen_port, self.one_way_ms = listen_port, one_way_ms
        args = ["--listen", str(listen_port), "--to", str(target_port)]
        args += ["--delay-ms", str(one_way_ms)]
        self.process = subprocess.Popen(
            [sys.executable, "-m", __name__, *args], stdin=subprocess.DEVNULL
        )
        wait_for_port("127.0.0.1", listen_port, 30, self.process)

    def stop(self) -> None:
        terminate(self.process)

    def __enter__(self) -> Link:
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--listen", type=int, required=True, help="port to serve on 127.0.0.1")
    parser.add_argument("--to", type=int, required=True, help="port to carry connections to")
    parser.add_argument("--delay-ms", type=float, required=True, help="delay each way")
    args = parser.parse_args(argv)
    uvloop.run(relay(args.listen, args.to, args.delay_ms / 1000))


if __name__ == "__main__":
    main()
