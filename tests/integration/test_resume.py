"""Reading a destination's tail on a real broker: where a (source partition, leg) resumes."""

from __future__ import annotations

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import DuplicateSequenceNumber
from aiokafka.protocol.produce import ProduceRequest

from replicator.config.loading import load_settings
from replicator.kafka.clients import committed_offsets
from replicator.kafka.producer import idempotent, make_producer
from replicator.model.provenance import LEGACY_HEADERS, Provenance, Tagger
from replicator.replication.resume import DestinationTail, Tail
from tests.integration.harness import (
    APACHE_KAFKA,
    Broker,
    Sent,
    Start,
    commit_offsets,
    count,
    create_topics,
    holds,
    oracle,
    produce,
    produce_records,
    read,
    replicator_env,
    run,
    start_clusters,
    wait_settled,
    wait_until,
)


def replicated(origin: str, offsets: range, partition: int = 0) -> list[Sent]:
    """Records as a leg from ``origin`` writes them into ``orders``: with their provenance."""
    return [
        Sent(
            "orders",
            partition,
            -1,
            b"k",
            f"{origin}-{o}".encode(),
            tuple(Provenance(origin, "orders_REPLICA", 0, o).headers()),
            1_700_000_000_000 + o,
        )
        for o in offsets
    ]


async def scan(bootstrap: str, origin: str, partition: int, floor: int | None, whole: bool) -> Tail:
    reader = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, enable_auto_commit=False, fetch_max_wait_ms=10
    )
    await reader.start()
    try:
        tail = DestinationTail(reader, timeout=30, marks_group="test.resume")
        tagger = Tagger(origin, "orders_REPLICA", 0)
        destination = TopicPartition("orders", partition)
        return await tail.last_written(destination, tagger, floor, whole=whole)
    finally:
        await reader.stop()


async def listed_end(bootstrap: str, tp: TopicPartition) -> int:
    """The log end the broker lists (ListOffsets), where a tail's backward read starts."""
    reader = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await reader.start()
    try:
        return int((await reader.end_offsets([tp]))[tp])
    finally:
        await reader.stop()


def test_the_tail_names_the_last_record_of_each_origin_and_reads_no_further_than_needed() -> None:
    """The tail reads backwards from the listed log end in windows of 1,000 records, then
    4,000 below them (then 16,000 ...), up to the high watermark, and stops at the first
    window holding a record of the origin."""
    with start_clusters("dc2") as brokers:
        destination = brokers["dc2"]
        create_topics(destination, orders=2)
        # dc2 wrote alone first, then dc1 and dc2 together, then dc2 alone again: dc1's last
        # record is 4,001 records back, inside the second window, and the 1,000 records below
        # dc1's are never read.
        alone = produce_records(destination, "orders", replicated("dc2", range(1_000)))
        mixed = [
            r
            for pair in zip(
                replicated("dc1", range(300)),
                replicated("dc2", range(1_000, 1_300)),
                strict=True,
            )
            for r in pair
        ]
        written = produce_records(destination, "orders", mixed)
        later = produce_records(destination, "orders", replicated("dc2", range(1_300, 5_300)))
        log_end = later[-1].offset + 1
        dc1_last = max(r.offset for r in written if r.value == b"dc1-299")
        assert (alone[-1].offset, dc1_last, log_end) == (999, 1_598, 5_600)
        bootstrap = destination.bootstrap_servers
        # Apache Kafka lists the log end itself; the embedded broker lists the last batch's
        # base offset + 1: every window then starts that much lower, the first one reads up to
        # the high watermark all the same.
        listed = run(listed_end(bootstrap, TopicPartition("orders", 0)))
        assert listed <= log_end
        if APACHE_KAFKA:
            assert listed == log_end
        assert listed - 5_000 <= dc1_last < listed - 1_000  # in the second window

        dc1 = run(scan(bootstrap, "dc1", 0, None, whole=False))
        assert dc1.origin_offset == 299 and dc1.log_end == log_end
        # Backwards, in chunks: the first two windows, not the whole partition.
        assert dc1.scanned == (log_end - listed) + 5_000

        dc2 = run(scan(bootstrap, "dc2", 0, None, whole=False))
        assert dc2.origin_offset == 5_299 and dc2.scanned == (log_end - listed) + 1_000

        # The mark bounds the read: nothing of dc1 was written at or after it.
        bounded = run(scan(bootstrap, "dc1", 0, later[0].offset, whole=False))
        assert bounded.origin_offset is None and bounded.scanned == log_end - later[0].offset

        # A replay counts every record of the origin the partition holds.
        counted = run(scan(bootstrap, "dc1", 0, None, whole=True))
        assert counted.origin_offset == 299 and counted.origin_records == 300
        assert counted.scanned == log_end

        empty = run(scan(bootstrap, "dc1", 1, None, whole=False))
        assert empty.origin_offset is None and empty.log_end == 0 and empty.scanned == 0


async def saved_marks(bootstrap: str, group: str, partitions: int) -> dict[int, int | None]:
    reader = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    await reader.start()
    try:
        tps = [TopicPartition("orders", p) for p in range(partitions)]
        found = await committed_offsets(reader, tps)
        return {tp.partition: offset for tp, (offset, _) in found.items()}
    finally:
        await reader.stop()


def log_ends(broker: Broker, partitions: int) -> dict[int, int]:
    stored = read(broker, "orders")
    return {p: 1 + max(r.offset for r in stored if r.partition == p) for p in range(partitions)}


def test_marks_are_saved_in_the_destination_and_a_restart_writes_nothing_twice(
    replicators: Start,
) -> None:
    with start_clusters("dc1", "dc2") as brokers:
        local = brokers["dc1"]
        create_topics(local, orders_REPLICA=3)
        env = replicator_env("dc1", brokers)
        produce(local, "orders_REPLICA", 300, 3)
        dc1 = replicators("dc1", env)
        dc1.wait_ready()
        for broker in brokers.values():
            wait_until(holds(broker, "orders", 300), 60, f"{broker.alias} complete", dc1.log)
        assert dc1.stop() == 0
        # The final commit saved each leg's mark: the end of what it wrote, in its destination.
        for broker in brokers.values():
            group = f"replicator.dc1.{broker.alias}.resume"
            marks = run(saved_marks(broker.bootstrap_servers, group, 3))
            assert marks == log_ends(broker, 3), f"{broker.alias}: {marks}"
        produce(local, "orders_REPLICA", 150, 3, tag="-after")
        dc1 = replicators("dc1", env)
        dc1.wait_ready()
        for broker in brokers.values():
            wait_until(holds(broker, "orders", 450), 60, f"{broker.alias} complete", dc1.log)
        wait_settled(dc1)
        for broker in brokers.values():
            report = oracle(read(local, "orders_REPLICA"), read(broker, "orders"), "dc1")
            assert not report.missing and not report.duplicates, f"{broker.alias}: {report}"
            assert not report.out_of_order, f"{broker.alias}: {report}"
            assert count(broker, "orders") == 450
        assert dc1.stop() == 0


def test_an_idempotent_producer_is_granted_and_a_resent_batch_is_written_once() -> None:
    """InitProducerId at a version the broker grants; a batch sent twice (a retry after a lost
    answer) is stored once. Apache Kafka answers the second copy as a success at the first
    copy's offset (it keeps the last five batches of each producer, Kafka's
    ``ProducerStateEntry.findDuplicateBatch``); the embedded broker answers
    DuplicateSequenceNumber. aiokafka takes either as the batch delivered."""
    with start_clusters("dc2") as brokers:
        destination = brokers["dc2"]
        create_topics(destination, orders=1)
        tp = TopicPartition("orders", 0)

        async def send_twice() -> list[tuple[int, int]]:
            settings = load_settings(replicator_env("dc2", brokers))
            producer = make_producer(settings.clusters["dc2"], settings, "test")
            await producer.start()
            try:
                assert idempotent(producer)
                await producer.send_and_wait("orders", b"first", partition=0)
                manager = producer._sender._txn_manager
                builder = producer.create_batch()
                for i in range(3):
                    builder.append(key=None, value=b"retried-%d" % i, timestamp=None)
                builder._set_producer_state(
                    manager.producer_id, manager.producer_epoch, manager.sequence_number(tp)
                )
                data = bytes(builder._build())
                leader = producer.client.cluster.leader_for_partition(tp)
                answers = []
                for _ in range(2):
                    request = ProduceRequest(
                        required_acks=-1,
                        timeout=10_000,
                        topics=[("orders", [(0, data)])],
                        transactional_id=None,
                    )
                    answer = await producer.client.send(leader, request)
                    _, error, offset, *_ = answer.topics[0][1][0]
                    answers.append((error, offset))
                return answers
            finally:
                await producer.stop()

        first, second = run(send_twice())
        assert first == (0, 1)  # written after b"first"
        if APACHE_KAFKA:
            assert second == first, "a duplicate is answered with the first copy's offset"
        else:
            assert second[0] == DuplicateSequenceNumber.errno
        stored = [r.value for r in read(destination, "orders")]
        assert stored == [b"first", b"retried-0", b"retried-1", b"retried-2"]


def written_by_a_pre_0_1_build(source: list[Sent], below: int) -> list[Sent]:
    """What a development build before 0.1.0 wrote for ``source``'s offsets below ``below``:
    the same records, their provenance in that build's four headers, byte for byte."""
    copies = []
    for r in source:
        if r.offset >= below:
            continue
        values = ("dc1", r.topic, str(r.partition), str(r.offset))
        legacy = tuple((k, v.encode()) for k, v in zip(LEGACY_HEADERS, values, strict=True))
        copies.append(Sent("orders", r.partition, -1, r.key, r.value, (*r.headers, *legacy), -1))
    return copies


def test_an_upgrade_resumes_after_what_a_pre_0_1_build_wrote(replicators: Start) -> None:
    """A destination left by a build that wrote four provenance headers, stopped by a crash
    10 records past its last commit, with no destination mark (such builds kept none in the
    ``.resume`` group): the upgraded replicator resumes after the last record it finds there.
    Without reading those headers, each partition looked lost and was replayed whole."""
    with start_clusters("dc1", "dc2") as brokers:
        local = brokers["dc1"]
        create_topics(local, orders_REPLICA=3)
        source = produce(local, "orders_REPLICA", 300, 3)
        for broker in brokers.values():
            create_topics(broker, orders=3)
            produce_records(broker, "orders", written_by_a_pre_0_1_build(source, below=60))
            committed = {TopicPartition("orders_REPLICA", p): 50 for p in range(3)}
            commit_offsets(local, f"replicator.dc1.{broker.alias}", committed)
        dc1 = replicators("dc1", replicator_env("dc1", brokers))
        dc1.wait_ready()
        for broker in brokers.values():
            wait_until(holds(broker, "orders", 300), 60, f"{broker.alias} complete", dc1.log)
        wait_settled(dc1)
        for broker in brokers.values():
            stored = read(broker, "orders")
            for p in range(3):
                want = [r.value for r in source if r.partition == p]
                got = [r.value for r in stored if r.partition == p]
                assert got == want, f"{broker.alias} partition {p}: {len(got)} of {len(want)}"
        assert dc1.metric("replicator_records_replayed_total") == 0
        assert dc1.metric("replicator_duplicates_written_total") == 0
        assert dc1.stop() == 0
