"""An application that publishes through the replicator: it writes to ``<topic>_REPLICA``.

Nothing here knows about the other datacenters. The replicator beside this cluster copies every
record to ``<topic>`` here and on every remote cluster. Use keys as usual: the partition a record
is written to is kept everywhere, so per-key order holds in every datacenter.

    python examples/producer.py --bootstrap-servers localhost:19092 --topic orders --rate 50

Needs only aiokafka (``pip install aiokafka``). Prints one JSON summary line on stdout at the end.

The producer is idempotent (no duplicates from its own retries). A broker that refuses one (it
answers ``InitProducerId`` with an error, as the embedded trial broker of ``replicator sandbox``
does) gets one line on stderr saying so and a plain ``acks=all`` producer instead;
``--no-idempotence`` asks for that from the start.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import signal
import sys
import time
from collections.abc import Callable
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka import errors as kafka_errors

REPLICA_SUFFIX = "_REPLICA"

# Errors that say nothing about idempotence: the cluster is not there, or refused the login.
_NOT_ABOUT_IDEMPOTENCE = (
    kafka_errors.KafkaConnectionError,
    kafka_errors.NodeNotReadyError,
    kafka_errors.RequestTimedOutError,
    kafka_errors.AuthenticationFailedError,
    kafka_errors.SaslAuthenticationFailed,
)


def refuses_idempotence(error: BaseException) -> bool:
    """Whether an idempotent producer failed to start because the broker refused it a producer
    id (``InitProducerId``), not because the cluster was unreachable or refused the login."""
    return isinstance(error, kafka_errors.KafkaError) and not isinstance(
        error, _NOT_ABOUT_IDEMPOTENCE
    )


def producer_options(args: argparse.Namespace, idempotence: bool) -> dict[str, Any]:
    return {
        "bootstrap_servers": args.bootstrap_servers,
        "client_id": f"orders-app-{args.datacenter}",
        "acks": "all",  # the replicator can only copy what the local cluster has stored
        "enable_idempotence": idempotence,  # no duplicates from the producer's own retries
        "linger_ms": 5,
    }


async def start_producer(
    args: argparse.Namespace, factory: Callable[..., AIOKafkaProducer] = AIOKafkaProducer
) -> AIOKafkaProducer:
    """A started producer: idempotent if asked and the broker grants it, else ``acks=all``."""
    producer = factory(**producer_options(args, args.idempotence))
    # aiokafka logs a refused InitProducerId as an error of its own: said once, below, instead.
    sender_log = logging.getLogger("aiokafka.producer.sender")
    level = sender_log.level
    if args.idempotence:
        sender_log.setLevel(logging.CRITICAL)
    try:
        await producer.start()
        return producer
    except Exception as error:
        await producer.stop()
        if not (args.idempotence and refuses_idempotence(error)):
            raise
        reason = type(error).__name__
    finally:
        sender_log.setLevel(level)
    print(
        f"the broker at {args.bootstrap_servers} refused an idempotent producer "
        f"(InitProducerId: {reason}); producing without idempotence (acks=all; a retry may "
        "write a record twice)",
        file=sys.stderr,
        flush=True,
    )
    producer = factory(**producer_options(args, False))
    try:
        await producer.start()
    except Exception:
        await producer.stop()
        raise
    return producer


async def produce(args: argparse.Namespace) -> int:
    producer = await start_producer(args)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    topic = args.topic + REPLICA_SUFFIX
    sent = 0
    started = time.monotonic()
    in_flight: list[asyncio.Future[object]] = []
    try:
        while not stop.is_set() and (args.count == 0 or sent < args.count):
            order = {"order": sent, "datacenter": args.datacenter, "created": time.time()}
            key = f"customer-{sent % args.customers}".encode()
            in_flight.append(await producer.send(topic, json.dumps(order).encode(), key=key))
            sent += 1
            if len(in_flight) >= 1000:  # a refused record fails the app, it is not counted
                await asyncio.gather(*in_flight)
                in_flight.clear()
            if args.rate:
                delay = started + sent / args.rate - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
        await asyncio.gather(*in_flight)
    finally:
        await producer.stop()
    print(json.dumps({"topic": topic, "produced": sent}))
    return 0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap-servers", required=True)
    parser.add_argument("--topic", default="orders", help="the real topic X; writes X_REPLICA")
    parser.add_argument("--datacenter", default="dc1", help="written into each order")
    parser.add_argument(
        "--rate", type=float, default=10.0, help="records/s, 0 = as fast as possible"
    )
    parser.add_argument("--count", type=int, default=0, help="stop after this many, 0 = never")
    parser.add_argument("--customers", type=int, default=100, help="distinct keys")
    parser.add_argument(
        "--idempotence",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="idempotent producer (the default falls back to a plain one, saying so, when "
        "the broker refuses it)",
    )
    return parser.parse_args(argv)


def main() -> int:
    return asyncio.run(produce(parse_args()))


if __name__ == "__main__":
    sys.exit(main())
