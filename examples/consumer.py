"""An application that reads through the replicator: it consumes ``<topic>``.

``<topic>`` holds the records written to ``<topic>_REPLICA`` in every datacenter. The provenance
header ``replicator: <cluster>/<topic>/<partition>/<offset>`` says where each record was first
written, so the app can treat local and remote records differently if it needs to (most apps
need not).

    python examples/consumer.py --bootstrap-servers localhost:29092 --topic orders

Needs only aiokafka. Prints a JSON line per ``--report-every`` seconds: records per origin cluster.
``--idle-seconds N`` stops once N seconds pass without a record (after the first one: a group
can take a while to get its partitions) and prints the final counts: reading until idle is how to
count what a topic holds where end offsets cannot be trusted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
import time
from collections import Counter

from aiokafka import AIOKafkaConsumer

PROVENANCE = "replicator"  # value: <cluster>/<topic>/<partition>/<offset>, ASCII


def origin(headers: list[tuple[str, bytes | None]]) -> tuple[str, str, int, int] | None:
    """Where a record was first written: (cluster, topic, partition, offset), or ``None`` if it
    carries no readable provenance (it was not replicated)."""
    for name, value in headers:
        if name == PROVENANCE and value:
            # "/" cannot appear in a cluster alias or a topic name: four fields, no escaping
            fields = value.decode("ascii", "replace").split("/")
            if len(fields) == 4 and fields[2].isdigit() and fields[3].isdigit():
                return fields[0], fields[1], int(fields[2]), int(fields[3])
    return None


def origin_cluster(headers: list[tuple[str, bytes | None]]) -> str:
    """The cluster a record was first written to (``unknown`` if it was not replicated)."""
    found = origin(headers)
    return found[0] if found else "unknown"


async def consume(args: argparse.Namespace) -> int:
    consumer = AIOKafkaConsumer(
        args.topic,
        bootstrap_servers=args.bootstrap_servers,
        group_id=args.group,
        auto_offset_reset="earliest",
        enable_auto_commit=True,
    )
    await consumer.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    per_origin: Counter[str] = Counter()
    total = 0
    last_record: float | None = None  # when the latest record arrived

    def idle() -> bool:
        quiet = last_record is not None and time.monotonic() - last_record >= args.idle_seconds
        return bool(args.idle_seconds) and quiet

    def report() -> None:
        print(json.dumps({"topic": args.topic, "consumed": total, "by_origin": per_origin}))

    next_report = time.monotonic() + args.report_every
    try:
        while not stop.is_set() and (args.count == 0 or total < args.count) and not idle():
            batches = await consumer.getmany(timeout_ms=500)
            for records in batches.values():
                for record in records:
                    per_origin[origin_cluster(list(record.headers))] += 1
                    total += 1
                    last_record = time.monotonic()
            if time.monotonic() >= next_report:
                report()
                next_report += args.report_every
    finally:
        await consumer.stop()
    report()
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap-servers", required=True)
    parser.add_argument("--topic", default="orders", help="the real topic X (never X_REPLICA)")
    parser.add_argument("--group", default="orders-app")
    parser.add_argument("--count", type=int, default=0, help="stop after this many, 0 = never")
    parser.add_argument("--report-every", type=float, default=10.0, help="seconds")
    parser.add_argument(
        "--idle-seconds",
        type=float,
        default=0.0,
        help="stop once this long passes without a record (after the first); 0 = never",
    )
    return asyncio.run(consume(parser.parse_args()))


if __name__ == "__main__":
    sys.exit(main())
