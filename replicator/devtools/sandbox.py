"""``replicator sandbox``: local brokers to try the replicator by hand.

Starts one embedded broker per datacenter alias (the same :class:`EmbeddedBroker` the demo uses),
or with ``--broker kafka`` one Apache Kafka node per alias (KRaft, from Maven Central's jars:
Java 17+ and Maven needed), prints the ``export REPLICATOR_...`` lines that run each datacenter's
replicator against them (each with its own HTTP port, so all of them run on one host), and keeps
the brokers up until SIGINT or SIGTERM. The environment goes to stdout, everything else to stderr,
including, once at the start, the trial broker's limits (:data:`LIMITS`: memory only, wrong end
offsets after multi-record batches, slow group assignment, no idempotent aiokafka producer, no
TLS), which is why the embedded broker is for trials and never for production; Apache Kafka's
nodes keep their data in a temporary directory, deleted when the sandbox stops.
"""

from __future__ import annotations

import json
import shlex
import signal
import socket
import sys
import textwrap
import threading
from types import FrameType

from replicator.config.values import ALIAS
from replicator.devtools.apache_kafka import KAFKA_VERSION, ApacheKafkaCluster, local_clusters
from replicator.devtools.embedded import (
    LocalBroker,
    free_port,
    replicator_environment,
)
from replicator.errors import EmbeddedBrokerError

_FIRST_HTTP_PORT = 8081  # what the deploy examples use: dc1 on 8081, dc2 on 8082, ...

WARNING = (
    "warning: the embedded brokers keep data in memory only: everything is lost when the sandbox "
    "stops. For trials, not production."
)
KAFKA_NOTE = (
    f"Apache Kafka {KAFKA_VERSION}, one KRaft node per datacenter, plaintext listeners; its data "
    "is in a temporary directory, deleted when the sandbox stops."
)

# What the trial broker (Tansu, from the embedded extra) cannot do, said where users meet it:
# each limit measured against it (DESIGN.md, "Facts about the environment").
LIMITS = (
    "limits of the trial brokers (not of the replicator):",
    "  - memory only: every topic and record is lost when the sandbox stops",
    "  - end offsets are wrong after multi-record batches (ListOffsets answers the last batch's "
    "base offset + 1): to count records, read until idle instead of trusting end offsets or "
    "high watermarks",
    "  - consumer groups are slow to get their partitions: 20-45 s after a consumer joins "
    "(measured); a new consumer or replicator reads nothing before that",
    "  - no idempotent or transactional aiokafka producer (InitProducerId answers UnknownError): "
    "use enable_idempotence=False; examples/producer.py falls back by itself, saying so (the "
    "replicator asks with a version this broker grants: its producer is idempotent here)",
    "  - no TLS: plaintext listeners only (SECURITY_PROTOCOL=SSL or SASL_SSL cannot be tried here)",
)


def limits(width: int = 80) -> str:
    """The trial brokers' limits, printed once when the sandbox starts, wrapped at ``width``."""
    head, *items = LIMITS
    wrapped = [
        textwrap.fill(
            item.removeprefix("  - "), width, initial_indent="  - ", subsequent_indent="    "
        )
        for item in items
    ]
    return "\n".join([head, *wrapped])


def parse_aliases(text: str) -> list[str]:
    """``dc1,dc2`` as a list of distinct cluster aliases; ``ValueError`` saying what is wrong."""
    aliases = [a.strip() for a in text.split(",") if a.strip()]
    if not aliases:
        raise ValueError("give at least one cluster alias, e.g. dc1,dc2")
    bad = [a for a in aliases if not ALIAS.match(a)]
    if bad:
        raise ValueError(
            f"invalid cluster alias {', '.join(map(repr, bad))}: lower-case letters, digits and '-'"
        )
    repeated = sorted({a for a in aliases if aliases.count(a) > 1})
    if repeated:
        raise ValueError(f"cluster alias given twice: {', '.join(repeated)}")
    return aliases


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def http_ports(count: int) -> list[int]:
    """Distinct HTTP ports for ``count`` replicators: 8081, 8082, ... where free."""
    ports: list[int] = []
    candidate = _FIRST_HTTP_PORT
    while len(ports) < count:
        port = candidate if _bindable(candidate) else free_port()
        if port not in ports:
            ports.append(port)
        candidate += 1
    return ports


def environments(brokers: dict[str, LocalBroker]) -> dict[str, dict[str, str]]:
    """Per datacenter, the variables that run its replicator beside its broker."""
    ports = http_ports(len(brokers))
    return {
        alias: replicator_environment(alias, brokers, port)
        for alias, port in zip(brokers, ports, strict=True)
    }


def render(envs: dict[str, dict[str, str]]) -> str:
    """The shell blocks to paste, one per datacenter."""
    blocks: list[str] = []
    for alias, env in envs.items():
        lines = [f"# datacenter {alias}: in its own shell"]
        lines += [f"export {key}={shlex.quote(value)}" for key, value in env.items()]
        if not blocks:  # once, in any datacenter: the pair of topics on every cluster
            lines.append("# then, once: replicator topics ensure --topic orders --partitions 3")
        lines.append("# then: replicator run")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def _exited(broker: LocalBroker) -> bool:
    """Whether a broker's process (any node's) has exited."""
    if isinstance(broker, ApacheKafkaCluster):
        return not all(node.running for node in broker.nodes)
    process = getattr(broker, "process", None)
    return process is not None and process.poll() is not None


def _log_of(broker: LocalBroker) -> object:
    if isinstance(broker, ApacheKafkaCluster):
        return broker.nodes[0].log_path
    return getattr(broker, "log_path", None)


def serve(aliases: list[str], as_json: bool, broker: str = "embedded") -> int:
    """Run the sandbox on ``broker`` (``embedded`` or ``kafka``) until a signal; 0 after a clean
    stop, 1 if a broker failed."""
    stop = threading.Event()

    def on_signal(signum: int, _: FrameType | None) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        with local_clusters(*aliases, broker=broker) as brokers:
            envs = environments(brokers)
            if as_json:
                clusters = {a: b.bootstrap_servers for a, b in brokers.items()}
                print(json.dumps({"clusters": clusters, "env": envs}), flush=True)
            else:
                print(render(envs), flush=True)
            for alias, started in brokers.items():
                _say(f"broker {alias}: {started.bootstrap_servers} (log: {_log_of(started)})")
            if broker == "embedded":
                _say(WARNING)
                _say(limits())
            else:
                _say(KAFKA_NOTE)
            _say("sandbox running; Ctrl-C (or SIGTERM) stops the brokers")
            while not stop.wait(0.5):
                dead = [a for a, b in brokers.items() if _exited(b)]
                if dead and not stop.is_set():
                    _say(f"broker {', '.join(dead)} exited; stopping the sandbox")
                    return 1
        _say("sandbox stopped")
        return 0
    except EmbeddedBrokerError as exc:
        _say(f"cannot start the sandbox: {exc}")
        return 1
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)
