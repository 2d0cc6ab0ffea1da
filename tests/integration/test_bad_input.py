"""Bad input: odd records, every compression codec, and secrets that must never leak."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer

from replicator.kafka.decoding import as_fetched, use_decoded_records
from replicator.kafka.internals import HeaderKey
from replicator.kafka.readers import StoredRecord, read_topic
from tests.fault_figures import FAULT_SUMMARY, FaultFigures
from tests.integration.harness import (
    Broker,
    Start,
    create_topics,
    holds,
    oracle,
    peak_rss_mb,
    produce,
    read,
    replicator_env,
    run,
    scram_cluster,
    start_clusters,
    wait_settled,
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


_WATCH_S = 30  # how long the refused destination is watched for retries (backing off)
# The watch starts at the first attempt, and lasts this much longer: the attempt of its 30th
# second (2 + 4 + 8 + 16 s of backoff) is logged some milliseconds after the 30th second.
_LOG_SLACK_S = 2
_ATTEMPT = "cannot reach the destination"
_REFUSALS_MAX = 30


def test_wrong_credentials_are_reported_clearly_without_a_retry_storm_or_a_leak(
    replicators: Start,
) -> None:
    """dc3 requires SASL/SCRAM and refuses the replicator's credentials, whose password is a
    canary: dc1's own leg goes on, dc3 is reported with a clear reason, attempts back off, and
    the canary never appears in logs (DEBUG), /readyz, /status, /livez or /metrics."""
    with scram_cluster("dc3") as dc3, start_clusters("dc1") as brokers:
        create_topics(brokers["dc1"], orders_REPLICA=1)
        env = replicator_env(
            "dc1",
            brokers,
            log_level="DEBUG",
            clusters__dc3__bootstrap_servers=dc3.bootstrap_servers,
            clusters__dc3__security_protocol="SASL_PLAINTEXT",
            clusters__dc3__sasl_mechanism="SCRAM-SHA-512",
            clusters__dc3__sasl_username="replicator-dc1",
            clusters__dc3__sasl_password=CANARY,
        )
        dc1 = replicators("dc1", env)
        dc1.wait_serving()

        def attempt_lines() -> list[str]:
            return [
                line for line in dc1.log().splitlines() if _ATTEMPT in line and "dc1->dc3" in line
            ]

        # The watch runs from the first attempt (logged at once) while the rest is checked.
        wait_until(lambda: bool(attempt_lines()), 30, "a first attempt on dc3", dc1.log)
        watch_ends = time.monotonic() + _WATCH_S + _LOG_SLACK_S
        refused_before = dc3.refusals()
        sent = produce(brokers["dc1"], "orders_REPLICA", 100, partitions=1)
        wait_until(holds(brokers["dc1"], "orders", len(sent)), 60, "the local leg", dc1.log)

        def dc3_reported() -> bool:
            status, body = dc1.get("/readyz")
            return status == 503 and any(
                "dc3" in p and "authentication refused" in p for p in body["problems"]
            )

        wait_until(dc3_reported, 30, "/readyz reporting dc3's refusal", dc1.log)
        time.sleep(max(0.0, watch_ends - time.monotonic()))
        # dc1's own leg, read back after the watch: every record once, in order.
        local = oracle(
            read(brokers["dc1"], "orders_REPLICA"), read(brokers["dc1"], "orders"), "dc1"
        )
        attempts = attempt_lines()
        refused_after = dc3.refusals()
        surfaces = {
            "/readyz": str(dc1.get("/readyz")[1]),
            "/status": str(dc1.get("/status")[1]),
            "/livez": str(dc1.get("/livez")[1]),
            "/metrics": dc1.get("/metrics")[1],
        }
        rss = peak_rss_mb(dc1)
        assert dc1.stop() == 0
        surfaces["log"] = dc1.log_path.read_text(errors="replace")
    assert local.source_records == len(sent), local
    assert not local.missing and not local.duplicates and not local.out_of_order, local
    for name, text in surfaces.items():
        assert CANARY not in text, f"the secret leaked into {name}"
    assert "dc3" in surfaces["/status"]
    # The same refusal is logged again only every 30 s: a storm would not add lines, so the
    # count of attempts the lines carry is checked (backing off 2, 4, 8, 16 s...: about 5 in
    # 30 s, where a fixed 2 s retry makes 15).
    assert 1 <= len(attempts) <= 7, f"{len(attempts)} lines in {_WATCH_S} s"
    made = max(int(json.loads(line)["attempts"]) for line in attempts)
    assert made <= 7, f"{made} connection attempts to dc3 in {_WATCH_S} s"
    figure = f"{made} attempts logged in {_WATCH_S} s"
    if refused_before is not None and refused_after is not None:
        # Counted by the broker itself: every login it refused in the watch, whichever client
        # of the replicator tried (the leg's producer and reader, the readiness probe, and the
        # one connection per failure that finds the cause). A storm at a fixed 2 s would be
        # 15 attempts of each.
        refused = refused_after - refused_before
        assert refused <= _REFUSALS_MAX, f"dc3 refused {refused} logins in {_WATCH_S} s"
        figure += f", {refused} logins refused by dc3"
    print(f"wrong credentials: {figure}")
    # dc3 refuses every login, so it holds nothing by design: the row is dc1's own leg.
    FAULT_SUMMARY.append(
        FaultFigures.measured("wrong credentials (dc3), dc1 leg", [local], rss, figure)
    )


async def _produce_with_one_large_record(broker: Broker) -> None:
    """100 records on each of 3 partitions; the 50th of partition 1 is 50 KB."""
    producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap_servers, acks="all")
    await producer.start()
    try:
        for i in range(100):
            for partition in range(3):
                large = partition == 1 and i == 50
                value = b"L" * 50_000 if large else f"p{partition}-{i}".encode()
                await producer.send_and_wait(
                    "orders_REPLICA", key=b"k", value=value, partition=partition
                )
    finally:
        await producer.stop()


@pytest.mark.parametrize("policy", ["halt", "dead-letter"])
def test_a_record_too_large_for_the_destination_follows_the_policy(
    replicators: Start, policy: str
) -> None:
    """dc2's ``orders`` accepts batches up to 20,000 bytes (max.message.bytes); one source
    record is 50 KB. dc1's own ``orders`` has no such limit and takes everything."""
    with start_clusters("dc1", "dc2") as brokers:
        local, remote = brokers["dc1"], brokers["dc2"]
        create_topics(local, orders_REPLICA=3)
        create_topics(remote, {"max.message.bytes": "20000"}, orders=3)
        run(_produce_with_one_large_record(local))
        dc1 = replicators("dc1", replicator_env("dc1", brokers, record_too_large_policy=policy))
        wait_until(holds(local, "orders", 300), 60, "the local leg complete", dc1.log)
        source = read(local, "orders_REPLICA")
        if policy == "halt":

            def reported() -> bool:
                status, body = dc1.get("/readyz")
                return status == 503 and any(
                    "orders_REPLICA[1]" in p and "max.message.bytes" in p for p in body["problems"]
                )

            wait_until(reported, 60, "/readyz reporting the partition", dc1.log)
            wait_until(holds(remote, "orders", 250), 30, "the rest on dc2", dc1.log)
            report = oracle(source, read(remote, "orders"), "dc1")
            # Partition 1 stops at the large record (offset 50), in order; nothing is skipped.
            assert [m for m in report.missing if m[0] != 1] == []
            assert [m for m in report.missing if m[0] == 1] == [(1, o) for o in range(50, 100)]
            assert not report.out_of_order

            def halted() -> list[dict[str, Any]]:
                legs = {leg["leg"]: leg for leg in dc1.get("/status?state=halted")[1]["legs"]}
                return [p for p in legs["dc1->dc2"]["partitions"] if p["state"] == "failed"]

            assert [p["partition"] for p in halted()] == [1]
            # The summary counts it and says why, without listing partitions.
            legs = {leg["leg"]: leg for leg in dc1.get("/status")[1]["legs"]}
            summary = legs["dc1->dc2"]
            assert "partitions" not in summary
            assert summary["partition_states"]["halted"] == 1
            (reason,) = summary["halted_reasons"]
            assert reason["example"] == "orders_REPLICA[1]", reason
            assert "max.message.bytes" in reason["reason"], reason
            # Everything before the large record is committed; nothing from it on.
            wait_until(lambda: halted()[0]["committed_offset"] == 50, 10, "the commit", dc1.log)
            held_at = halted()[0]["committed_offset"]
            accounted = {
                (r.partition, r.offset) for r in source if r.partition == 1 and r.offset >= held_at
            }
            outcome = f"{len(accounted)} held at partition 1 from offset {held_at}"
        else:
            wait_until(holds(remote, "orders", 299), 60, "dc2 without the large record")
            report = oracle(source, read(remote, "orders"), "dc1")
            assert report.missing == [(1, 50)] and not report.out_of_order, report
            parked = read(local, "replicator.dead-letter")
            assert len(parked) == 1 and parked[0].value == b"L" * 50_000
            provenance = parked[0].provenance
            assert provenance is not None
            assert (provenance.topic, provenance.partition, provenance.offset) == (
                "orders_REPLICA",
                1,
                50,
            )
            headers = dict(parked[0].headers)
            assert headers["replicator-dead-letter-destination"] == b"dc2/orders"
            assert b"max.message.bytes" in (headers["replicator-dead-letter-reason"] or b"")
            assert dc1.metric("replicator_records_dead_lettered_total", leg="dc1->dc2") == 1
            dc1.wait_ready(timeout=30)
            accounted = {(provenance.partition, provenance.offset)}
            outcome = f"{len(accounted)} parked, went on"
        assert dc1.metric("replicator_send_errors_total", error="RecordTooLarge") == 1
        # Read back at the end: dc1 holds every record once, in order; dc2 every record once
        # but those the policy accounts for (held from the large record on, or parked).
        local_report = oracle(source, read(local, "orders"), "dc1")
        remote_report = oracle(source, read(remote, "orders"), "dc1")
        unaccounted = sorted(set(remote_report.missing) - accounted)
        duplicates = local_report.duplicates + remote_report.duplicates
        FAULT_SUMMARY.append(
            FaultFigures(
                f"record too large, policy {policy}",
                local_report.source_records,
                len(local_report.missing) + len(unaccounted),
                duplicates,
                peak_rss_mb(dc1),
                outcome,
            )
        )
        assert not local_report.missing and not local_report.out_of_order, local_report
        assert not unaccounted, f"missing on dc2, neither held nor parked: {unaccounted}"
        assert not remote_report.out_of_order, remote_report
        assert duplicates == 0, f"dc1: {local_report}; dc2: {remote_report}"
        assert dc1.stop() == 0


class _NotUtf8(str):
    """A header key whose bytes on the wire are not UTF-8 (the format allows it; Java clients
    write and read such keys): aiokafka's own builder would encode the text."""

    def encode(self, encoding: str = "utf-8", errors: str = "strict") -> bytes:
        return b"\xff\xfe-trace"


async def _produce_one_undecodable_record(broker: Broker, before: int, after: int) -> None:
    """Partition 0 of ``orders_REPLICA``: ``before`` records, one whose header key is not UTF-8,
    then ``after`` records; partitions 1 and 2: ``before + 1 + after`` records each."""
    from aiokafka.record.default_records import _DefaultRecordBatchBuilderPy

    producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap_servers, acks="all")
    await producer.start()
    try:
        for i in range(before + 1 + after):
            for partition in range(3):
                if partition == 0 and i == before:
                    batch = producer.create_batch()
                    batch._builder = _DefaultRecordBatchBuilderPy(2, 0, 0, -1, -1, -1, 1 << 20)
                    batch.append(
                        timestamp=None, key=b"k", value=b"poison", headers=[(_NotUtf8("x"), b"1")]
                    )
                    await (await producer.send_batch(batch, "orders_REPLICA", partition=0))
                    continue
                value = f"p{partition}-{i}".encode()
                await producer.send_and_wait(
                    "orders_REPLICA", key=b"k", value=value, partition=partition
                )
    finally:
        await producer.stop()


def read_keeping_raw_keys(cluster: Broker, topic: str) -> list[StoredRecord]:
    """Every record of ``topic`` as the replicator's own fetch path decodes it (a header key
    that is not UTF-8 kept as its bytes; aiokafka's consumer cannot read such a record)."""
    assert use_decoded_records()
    return run(read_topic(cluster.bootstrap_servers, topic, key_deserializer=as_fetched))


def test_a_header_key_that_is_not_utf8_is_copied_as_its_bytes(replicators: Start) -> None:
    """One record of partition 0 has a header key that is not UTF-8 (legal on the wire; Java
    clients write such keys). It reaches both destinations with that key's bytes unchanged,
    after the records before it and before those after it; nothing halts, nothing is
    counted undecodable."""
    before, after = 50, 150
    total = 3 * (before + 1 + after)
    with start_clusters("dc1", "dc2") as brokers:
        local, remote = brokers["dc1"], brokers["dc2"]
        create_topics(local, orders_REPLICA=3)
        run(_produce_one_undecodable_record(local, before, after))
        dc1 = replicators("dc1", replicator_env("dc1", brokers))
        dc1.wait_ready()

        def holds_all(cluster: Broker) -> Callable[[], bool]:
            return lambda: len(read_keeping_raw_keys(cluster, "orders")) >= total

        for cluster in (local, remote):
            wait_until(holds_all(cluster), 60, f"every record on {cluster.alias}", dc1.log)
        wait_settled(dc1)
        for cluster in (local, remote):
            copied = read_keeping_raw_keys(cluster, "orders")
            assert len(copied) == total
            for partition in range(3):
                origins = [r.provenance for r in copied if r.partition == partition]
                assert [o.offset for o in origins if o is not None] == list(range(total // 3))
            (odd,) = [r for r in copied if r.partition == 0 and r.value == b"poison"]
            keys = [k for k, _ in odd.headers]
            assert isinstance(keys[0], HeaderKey) and keys[0].raw == b"\xff\xfe-trace"
            assert keys[1:] == ["replicator"] and dict(odd.headers)["replicator"] == (
                f"dc1/orders_REPLICA/0/{before}".encode()
            )
        for leg in ("dc1->dc1", "dc1->dc2"):
            assert dc1.metric("replicator_records_undecodable_total", leg=leg) == 0
        assert dc1.get("/readyz")[0] == 200
        assert dc1.stop() == 0
