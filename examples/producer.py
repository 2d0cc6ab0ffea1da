"""An application that publishes through the replicator: it writes to ``<topic>_REPLICA``.

Nothing here knows about the other datacenters. The replicator beside this cluster copies every
record to ``<topic>`` here and on every remote cluster. Use keys as usual: the partition a record
is written to is kept everywhere, so per-key order holds in every datacenter.

    python examples/producer.py --bootstrap-servers localhost:19092 --topic orders --rate 50

Needs only aiokafka (``pip install aiokafka``). Prints one JSON summary line on stdout at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
import time

from aiokafka import AIOKafkaProducer

REPLICA_SUFFIX = "_REPLICA"


async def produce(args: argparse.Namespace) -> int:
    producer = AIOKafkaProducer(
        bootstrap_servers=args.bootstrap_servers,
        client_id=f"orders-app-{args.datacenter}",
        acks="all",  # the replicator can only copy what the local cluster has stored
        enable_idempotence=args.idempotence,  # no duplicates from the producer's own retries
        linger_ms=5,
    )
    try:
        await producer.start()
    except Exception:
        await producer.stop()
        raise
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


def main() -> int:
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
        help="idempotent producer (turn off for brokers without InitProducerId support)",
    )
    return asyncio.run(produce(parser.parse_args()))


if __name__ == "__main__":
    sys.exit(main())
