"""Bad input: odd records, every compression codec, and secrets that must never leak."""

from __future__ import annotations

import asyncio

from aiokafka import AIOKafkaProducer

from replicator.embedded import free_port
from tests.integration.harness import (
    Broker,
    Start,
    create_topics,
    holds,
    oracle,
    read,
    replicator_env,
    start_clusters,
    wait_until,
)

CANARY = "canary-secret-5e1d7b"


async def _produce_odd_records(broker: Broker, topic: str, codec: str | None) -> None:
    producer = AIOKafkaProducer(
        bootstrap_servers=broker.bootstrap_servers, acks="all", compression_type=codec
    )
    await producer.start()
    try:
        odd: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes]]]] = [
            (None, b"null key", []),
            (b"tombstone", None, []),
            (b"", b"", []),
            (b"k", b"v", [("h", b"")]),
            (b"k", b"x" * 5000, [("h1", b"1"), ("h1", b"2")]),
        ]
        for partition in range(2):
            for key, value, headers in odd:
                await producer.send_and_wait(
                    topic, key=key, value=value, partition=partition, headers=headers
                )
    finally:
        await producer.stop()


def test_odd_records_and_every_codec_are_replicated_intact(replicators: Start) -> None:
    codecs = [None, "gzip", "snappy", "lz4", "zstd"]
    with start_clusters("dc1", "dc2") as brokers:
        local = brokers["dc1"]
        create_topics(local, odd_REPLICA=2)
        dc1 = replicators("dc1", replicator_env("dc1", brokers))
        dc1.wait_ready()
        for codec in codecs:
            asyncio.run(_produce_odd_records(local, "odd_REPLICA", codec))
        total = len(codecs) * 2 * 5
        source = read(local, "odd_REPLICA")
        assert len(source) == total
        for broker in brokers.values():
            wait_until(holds(broker, "odd", total), 30, f"odd on {broker.alias}", dc1.log)
            stored = read(broker, "odd")
            report = oracle(source, stored, "dc1")
            assert not report.missing and not report.duplicates and not report.out_of_order
            by_origin = {(r.partition, r.offset): r for r in source}
            for record in stored:
                tag = record.provenance
                assert tag is not None
                original = by_origin[(tag.partition, tag.offset)]
                assert (record.key, record.value) == (original.key, original.value)
                assert list(record.headers[: len(original.headers)]) == list(original.headers)
        assert dc1.stop() == 0


def test_a_canary_secret_never_appears_in_logs_status_metrics_or_errors(
    replicators: Start,
) -> None:
    with start_clusters("dc1", "dc2") as brokers:
        create_topics(brokers["dc1"], orders_REPLICA=1)
        env = replicator_env(
            "dc1",
            brokers,
            log_level="DEBUG",
            clusters__dc3__bootstrap_servers=f"127.0.0.1:{free_port()}",
            clusters__dc3__security_protocol="SASL_PLAINTEXT",
            clusters__dc3__sasl_mechanism="SCRAM-SHA-512",
            clusters__dc3__sasl_username="replicator-dc1",
            clusters__dc3__sasl_password=CANARY,
        )
        dc1 = replicators("dc1", env)
        dc1.wait_serving()

        def dc3_reported() -> bool:
            status, body = dc1.get("/readyz")
            return status == 503 and any("dc3" in p for p in body["problems"])

        wait_until(dc3_reported, 30, "/readyz reporting dc3", dc1.log)
        surfaces = {
            "/readyz": str(dc1.get("/readyz")[1]),
            "/status": str(dc1.get("/status")[1]),
            "/livez": str(dc1.get("/livez")[1]),
            "/metrics": dc1.get("/metrics")[1],
        }
        assert dc1.stop() == 0
        surfaces["log"] = dc1.log()
        for name, text in surfaces.items():
            assert CANARY not in text, f"the secret leaked into {name}"
        assert "dc3" in surfaces["/status"]
