"""``replicator demo --spark``: the bulk jobs on two embedded brokers, end to end.

dc1 holds a history in ``orders_REPLICA``; the backfill copies it into ``orders`` on dc1 and dc2
(Spark local mode); the audit then proves both clusters hold it; a tampered and an untagged
record are written to dc2's ``orders`` and a second audit reports exactly those.
"""

from __future__ import annotations

import asyncio
import time

from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from rich.console import Console

from replicator.config.loading import load_settings
from replicator.devtools.embedded import (
    EmbeddedBroker,
    embedded_clusters,
    free_port,
    replicator_environment,
)
from replicator.model.provenance import Provenance
from replicator.spark import commands
from replicator.spark.audit import Allowed
from replicator.spark.session import SparkSetup

PARTITIONS = 4
err = Console(stderr=True)


async def _history(broker: EmbeddedBroker, records: int) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap_servers)
    await admin.start()
    try:
        await admin.create_topics([NewTopic("orders_REPLICA", PARTITIONS, 1)])
    finally:
        await admin.close()
    producer = AIOKafkaProducer(
        bootstrap_servers=broker.bootstrap_servers, acks="all", linger_ms=20
    )
    await producer.start()
    try:
        now = int(time.time() * 1000) - records
        sent = [
            await producer.send(
                "orders_REPLICA",
                key=f"customer-{i % 97}".encode(),
                value=f'{{"order": {i}, "amount": {i % 1000}}}'.encode(),
                partition=i % PARTITIONS,
                timestamp_ms=now + i,
                headers=[("trace-id", f"t{i}".encode())],
            )
            for i in range(records)
        ]
        await asyncio.gather(*sent)
    finally:
        await producer.stop()


async def _tamper(broker: EmbeddedBroker) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap_servers, acks="all")
    await producer.start()
    try:
        forged = Provenance("dc1", "orders_REPLICA", 0, 0).headers()
        await producer.send_and_wait(
            "orders", key=b"customer-0", value=b"tampered", partition=0, headers=forged
        )
        await producer.send_and_wait("orders", value=b"written to orders directly", partition=1)
    finally:
        await producer.stop()


def run(records: int, master: str) -> int:
    setup = SparkSetup(master)
    with embedded_clusters("dc1", "dc2") as brokers:
        settings = load_settings(replicator_environment("dc1", brokers, free_port()))
        err.print(f"dc1: producing {records} records of history into orders_REPLICA")
        asyncio.run(_history(brokers["dc1"], records))
        commands.backfill(settings, "dc1", ["dc1", "dc2"], [], None, setup, True, False)
        err.print("audit of both clusters after the backfill:")
        clean = commands.audit(settings, ["dc1", "dc2"], [], setup, None, Allowed())
        err.print("dc2: writing a tampered copy and an untagged record into orders")
        asyncio.run(_tamper(brokers["dc2"]))
        found = commands.audit(settings, ["dc1", "dc2"], [], setup, None, Allowed())
    if clean == 0 and found == 1:
        print("OK: the backfill copied everything, the audit proved it, then caught the tampering")
        return 0
    print(f"FAILED: first audit exited {clean}, second {found}")
    return 1
