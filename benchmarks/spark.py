"""The bulk jobs' speed: a warm backfill and a whole audit, on two embedded clusters.

For each Spark master given (``local[2]`` by default), on fresh clusters dc1 and
dc2: dc1's ``orders_REPLICA`` holds ``records`` records of 100 bytes (a key and a header each,
as an application writes them) in ``partitions`` partitions, and ``warmup_REPLICA`` a tenth of
that. Then, timed:

- ``spark start``: the session the jobs run in;
- ``backfill cold`` (``warmup`` into dc1 and dc2: starts Spark's Python workers) and
  ``backfill warm`` (``orders`` into dc1 and dc2 in the same session), each split into snapshot,
  read (the source read and classified once) and write (per destination); the rate is records
  of source data per second, each written to both clusters;
- ``audit``: ``replicator audit --topic orders`` as an operator runs it (its own process, Spark
  start-up included) over both clusters (the replica topic and dc1's and dc2's ``orders``:
  ``records`` per cluster and topic), its split as the command reports it, and its verdict
  (every record expected, delivered, nothing missing: the benchmark fails otherwise).

Each connector (``--connectors standard,shipped``: Spark's ``spark-sql-kafka-0-10`` and the
shipped ``replicator-kafka``) runs on the same records, one after the other, each in a process
of its own, and both are printed.

``python -m benchmarks.spark [--records N] [--partitions P] [--masters local[2]]
[--connectors standard,shipped]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from typing import Any

from benchmarks.brokers import add_broker_option, broker_name, choose, clusters
from benchmarks.resume import create_topics, produce_batches
from replicator.config.loading import load_settings
from replicator.devtools.embedded import (
    LocalBroker,
    free_port,
    replicator_environment,
)
from replicator.spark.backfill import BackfillResult, run_backfill
from replicator.spark.connectors import Connector
from replicator.spark.frames import ClusterInput
from replicator.spark.kafka_source import spark_options
from replicator.spark.session import SparkSetup, kafka_format, spark_session
from replicator.topics import snapshot

SUFFIX = "_REPLICA"


async def history(broker: LocalBroker, topic: str, records: int, partitions: int) -> None:
    """``records`` records of 100 bytes in ``topic`` (created, with its real topic), spread
    evenly over its partitions, as an application writes them: a key and a header each."""
    await create_topics(broker, partitions, topic, topic.removesuffix(SUFFIX))

    def record(i: int, partition: int) -> tuple[bytes, bytes, list[tuple[str, bytes]]]:
        value = f'{{"order": {i}, "partition": {partition}}}'.encode().ljust(100)
        return f"customer-{i % 97}".encode(), value, [("trace-id", f"t{i}".encode())]

    await produce_batches(
        broker.bootstrap_servers, topic, records // partitions, partitions, record
    )


def backfill(
    brokers: dict[str, LocalBroker], spark: Any, connector: Connector, topic: str, records: int
) -> dict[str, Any]:
    """Backfill dc1's ``<topic>_REPLICA`` into ``topic`` on dc1 and dc2, timed."""
    began = time.monotonic()
    clients = {a: {"bootstrap_servers": b.bootstrap_servers} for a, b in brokers.items()}
    settings = load_settings(replicator_environment("dc1", brokers, free_port()))
    options = {a: spark_options(c) for a, c in settings.clusters.items()}
    source = ClusterInput("dc1", options["dc1"], snapshot.take(clients["dc1"], [topic + SUFFIX]))
    targets = [ClusterInput(a, options[a], snapshot.take(clients[a], [topic])) for a in brokers]
    snapshot_s = time.monotonic() - began
    fmt = kafka_format(spark, connector)
    result: BackfillResult = run_backfill(spark, fmt, source, targets, SUFFIX)
    took = time.monotonic() - began
    if result.records != records or any(w != records for w in result.written.values()):
        raise SystemExit(f"backfill of {topic}: {result}")
    return {
        "records": records,
        "seconds": round(took, 2),
        "records_per_s": round(records / took),
        "split_s": {"snapshot": round(snapshot_s, 2), **result.timings},
    }


def audit(brokers: dict[str, LocalBroker], setup: SparkSetup, records: int) -> dict[str, Any]:
    """``replicator audit --topic orders`` in its own process, timed from its start."""
    env = {**os.environ, **replicator_environment("dc1", brokers, free_port())}
    command = [sys.executable, "-m", "replicator", "audit", "--topic", "orders"]
    began = time.monotonic()
    done = subprocess.run(
        [*command, "--master", setup.master, "--connector", setup.connector, "--json", "-"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    took = time.monotonic() - began
    if done.returncode != 0:
        raise SystemExit(f"audit exited {done.returncode}: {done.stderr[-2000:]}")
    report = json.loads(done.stdout)
    totals = report["totals"]
    clean = totals["expected"] == totals["delivered"] == 2 * records and totals["missing"] == 0
    if not clean:
        raise SystemExit(f"audit totals: {totals}")
    read = 3 * records  # the replica topic and both clusters' copies
    return {
        "records_read": read,
        "seconds": round(took, 2),
        "records_per_s": round(read / took),
        "split_s": report["timings"],
    }


def measure(setup: SparkSetup, records: int, partitions: int) -> dict[str, Any]:
    warmup = max(records // 10, partitions)
    with clusters("dc1", "dc2") as brokers:
        asyncio.run(history(brokers["dc1"], "warmup" + SUFFIX, warmup, partitions))
        asyncio.run(history(brokers["dc1"], "orders" + SUFFIX, records, partitions))
        for topic in ("warmup", "orders"):
            asyncio.run(create_topics(brokers["dc2"], partitions, topic))
        began = time.monotonic()
        spark = spark_session(setup, "replicator-benchmark")
        started = time.monotonic() - began
        connector = setup.connector
        try:
            cold = backfill(brokers, spark, connector, "warmup", warmup - warmup % partitions)
            warm = backfill(brokers, spark, connector, "orders", records - records % partitions)
        finally:
            spark.stop()
        checked = audit(brokers, setup, records - records % partitions)
    return {
        "master": setup.master,
        "connector": str(setup.connector),
        "spark_start_s": round(started, 2),
        "backfill_cold": cold,
        "backfill_warm": warm,
        "audit": checked,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description="Spark jobs benchmark")
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--masters", default="local[2]")
    parser.add_argument(
        "--connectors",
        default="standard,shipped",
        help="the Kafka connectors to compare, side by side on the same records (--connector)",
    )
    add_broker_option(parser)
    args = parser.parse_args()
    choose(args)
    setups = [
        SparkSetup(master, Connector(connector))
        for master in args.masters.split(",")
        for connector in args.connectors.split(",")
    ]
    if len(setups) == 1:
        runs = [measure(setups[0], args.records, args.partitions)]
    else:  # each in a process of its own: Spark's start is then always a cold one
        runs = []
        for setup in setups:
            sizes = ["--records", str(args.records), "--partitions", str(args.partitions)]
            one = [sys.executable, "-m", "benchmarks.spark", *sizes, "--masters", setup.master,
                   "--connectors", setup.connector, "--broker", args.broker,
                   "--broker-storage", args.broker_storage]  # fmt: skip
            done = subprocess.run(one, stdout=subprocess.PIPE, check=True, text=True)
            runs.extend(json.loads(done.stdout)["spark"])
    for run in runs:
        warm, checked = run["backfill_warm"], run["audit"]
        print(
            f"{run['master']} {run['connector']}: spark start {run['spark_start_s']} s; "
            f"backfill (warm) {warm['records']} records to 2 clusters in {warm['seconds']} s = "
            f"{warm['records_per_s']}/s {warm['split_s']}; audit {checked['records_read']} "
            f"records in {checked['seconds']} s = {checked['records_per_s']}/s "
            f"{checked['split_s']}",
            file=sys.stderr,
        )
    print(f"broker: {broker_name()}", file=sys.stderr)
    print(json.dumps({"broker": broker_name(), "spark": runs}, indent=2))


if __name__ == "__main__":
    main()
