"""The WAN relay adds its delay to each direction and carries pipelined requests together: many
requests sent at once come back after one round trip, not one round trip each."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest

from replicator.devtools.embedded import free_port
from replicator.devtools.wan import Link

ONE_WAY_MS = 40


@pytest.fixture
def echo_port() -> Iterator[int]:
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]

    def echo(connection: socket.socket) -> None:
        with connection:
            while data := connection.recv(65536):
                connection.sendall(data)

    def serve() -> None:  # every connection, the relay's readiness probe's too
        with server:
            while True:
                connection, _ = server.accept()
                threading.Thread(target=echo, args=(connection,), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    yield port


def read_exactly(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        assert chunk, "the relay closed the connection"
        data += chunk
    return data


def test_a_round_trip_pays_both_delays_and_pipelined_requests_share_one(echo_port: int) -> None:
    link = Link(free_port(), echo_port, ONE_WAY_MS)
    with link, socket.create_connection(("127.0.0.1", link.listen_port), timeout=10) as sock:
        started = time.monotonic()
        sock.sendall(b"ping")
        assert read_exactly(sock, 4) == b"ping"
        one = time.monotonic() - started

        started = time.monotonic()
        messages = [f"request-{i:03d}".encode() for i in range(50)]
        for message in messages:  # sent back to back, each its own write
            sock.sendall(message)
        echoed = read_exactly(sock, sum(len(m) for m in messages))
        many = time.monotonic() - started

    assert echoed == b"".join(messages)  # every byte, in order
    assert one >= 2 * ONE_WAY_MS / 1000
    # 50 requests in flight together: about one round trip, far from 50 of them.
    assert 2 * ONE_WAY_MS / 1000 <= many < 5 * 2 * ONE_WAY_MS / 1000
