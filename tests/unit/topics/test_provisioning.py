"""Start-up and steady state at scale, as decisions without a broker: destination topics
prepared in batches through the provisioner's seam (:class:`TopicAdmin`) with an in-memory
cluster that counts the requests it is sent (however many partitions and topics start together,
a round costs the same handful of requests; per-topic outcomes reach exactly that topic's
partitions), the coalescer behind every batched question, the shared fetch's idle wait, and whom
the shared fetch waits for."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import InvalidPartitionsError
from structlog.testing import capture_logs

from replicator.config.values import ConfigSync
from replicator.errors import ClusterUnavailable, TopicMismatch, TopicMissing, TopicRefused
from replicator.kafka.admin import BrokerErrors, ConfigEntry, TopicSpec
from replicator.kafka.clients import assign_keeping_topics, pace_metadata
from replicator.kafka.coalesce import Coalescer
from replicator.lifecycle import IdleWait
from replicator.replication.fanout import PartitionFanout
from replicator.replication.partition import LegPartition
from replicator.topics.provisioning import TopicLayout, TopicProvisioner
from tests.unit.model.test_batching import new_batch


class MemoryAdmin:
    """One cluster's topics in memory, answering the provisioner's batched requests."""

    def __init__(self, alias: str, topics: dict[str, int] | None = None) -> None:
        self.alias = alias
        self.topics: dict[str, int] = dict(topics or {})
        self.configs: dict[str, dict[str, str]] = {}
        self.requests: Counter[str] = Counter()
        self.refuse_creation: dict[str, tuple[int, str]] = {}  # topic -> (error code, message)
        self.refuse_growth: dict[str, BaseException] = {}
        self.unavailable = False

    def _ask(self, request: str) -> None:
        if self.unavailable:
            raise ClusterUnavailable(f"{self.alias} does not answer")
        self.requests[request] += 1

    async def layouts(self) -> dict[str, TopicLayout]:
        self._ask("Metadata")
        await asyncio.sleep(0)
        return {name: TopicLayout(count, 1) for name, count in self.topics.items()}

    async def config_entries(self, topics: list[str]) -> dict[str, list[ConfigEntry]]:
        if not topics:
            return {}
        self._ask("DescribeConfigs")
        return {
            t: [
                ConfigEntry(name, value, False, 1, False)
                for name, value in self.configs.get(t, {}).items()
            ]
            for t in topics
            if t in self.topics
        }

    async def create(self, specs: list[TopicSpec]) -> dict[str, BrokerErrors]:
        self._ask("CreateTopics")
        errors: dict[str, BrokerErrors] = {}
        for spec in specs:
            refusal = self.refuse_creation.get(spec.name)
            if refusal is not None:
                errors[spec.name] = [refusal]
                continue
            self.topics.setdefault(spec.name, spec.partitions)
            self.configs[spec.name] = dict(spec.configs)
            errors[spec.name] = []
        return errors

    async def grow(self, counts: dict[str, int]) -> dict[str, BaseException | None]:
        self._ask("CreatePartitions")
        found: dict[str, BaseException | None] = {}
        for topic, count in counts.items():
            found[topic] = self.refuse_growth.get(topic)
            if found[topic] is None or isinstance(found[topic], InvalidPartitionsError):
                self.topics[topic] = max(self.topics[topic], count)  # (by another client)
        return found

    async def alter(self, configs: dict[str, dict[str, str | None]]) -> None:
        self._ask("IncrementalAlterConfigs")
        for topic, changes in configs.items():
            held = self.configs.setdefault(topic, {})
            for name, value in changes.items():
                if value is None:
                    held.pop(name, None)
                else:
                    held[name] = value


def provisioner(
    source: MemoryAdmin, destination: MemoryAdmin, preserve: bool = True
) -> TopicProvisioner:
    return TopicProvisioner(source, destination, None, preserve_partitions=preserve)


async def start_partitions(topics: TopicProvisioner, layout: dict[str, int]) -> list[Any]:
    """Every partition of every topic asks at once, as senders starting together do."""
    asks = [
        topics.ensure(source, source.removesuffix("_REPLICA"), number)
        for source, count in layout.items()
        for number in range(count)
    ]
    return await asyncio.gather(*asks, return_exceptions=True)


@pytest.mark.parametrize("topic_count", [2, 200])
async def test_a_wave_of_partitions_costs_one_round_whatever_its_size(topic_count: int) -> None:
    layout = {f"t{i}_REPLICA": 6 for i in range(topic_count)}
    source = MemoryAdmin("dc1", layout)
    destination = MemoryAdmin("dc2")
    topics = provisioner(source, destination)

    with capture_logs() as logs:
        answers = await start_partitions(topics, layout)

    assert all(answer.partitions == 6 for answer in answers), answers[:3]
    assert destination.topics == {t.removesuffix("_REPLICA"): 6 for t in layout}
    assert topics.rounds == 1
    # Said per topic when few, once for the wave when many (each topic then at debug).
    said = [(e["event"], e["log_level"]) for e in logs if e["log_level"] != "debug"]
    if topic_count <= 3:
        assert said == [("destination topic created", "info")] * topic_count
    else:
        assert said == [("destination topics created", "info")]
        summary = next(e for e in logs if e["event"] == "destination topics created")
        assert (summary["topics"], summary["partitions"]) == (topic_count, 6 * topic_count)
        assert summary["examples"] == ["t0", "t1", "t2"]
    # One metadata request per cluster (and one more after creating), one DescribeConfigs per
    # cluster, one CreateTopics: the same for 12 partitions as for 1,200.
    assert source.requests == Counter({"Metadata": 1, "DescribeConfigs": 1})
    assert destination.requests == Counter({"Metadata": 2, "CreateTopics": 1, "DescribeConfigs": 1})
    # Ready topics are answered from memory afterwards.
    await start_partitions(topics, layout)
    assert topics.rounds == 1


async def test_short_topics_are_grown_together_and_a_refusal_stays_with_its_topic() -> None:
    layout = {"a_REPLICA": 4, "b_REPLICA": 4, "c_REPLICA": 4}
    source = MemoryAdmin("dc1", layout)
    destination = MemoryAdmin("dc2", {"a": 2, "b": 2, "c": 4})
    destination.refuse_growth["b"] = NotImplementedError("no CreatePartitions")
    topics = provisioner(source, destination)

    answers = await start_partitions(topics, layout)

    by_topic: dict[str, set[str]] = {}
    for (source_topic, count), chunk in zip(
        layout.items(), [answers[i : i + 4] for i in range(0, 12, 4)], strict=True
    ):
        assert len(chunk) == count
        by_topic[source_topic] = {type(a).__name__ for a in chunk}
    assert by_topic == {
        "a_REPLICA": {"DestinationTopic"},
        "b_REPLICA": {"TopicMismatch"},
        "c_REPLICA": {"DestinationTopic"},
    }
    assert destination.topics["a"] == 4 and destination.topics["b"] == 2
    assert destination.requests["CreatePartitions"] == 1
    assert topics.grown == {"a": 2}
    assert "adding partitions was refused" in topics.refused["b"]
    # Remembered: asked again, b is refused without a request; the others are ready.
    before = sum(destination.requests.values())
    with pytest.raises(TopicMismatch):
        await topics.ensure("b_REPLICA", "b", 0)
    assert sum(destination.requests.values()) == before


@pytest.mark.parametrize("destination_count", [1, 3, 4, 6])
async def test_a_destination_is_grown_to_its_source_never_shrunk_never_past_it(
    destination_count: int,
) -> None:
    source = MemoryAdmin("dc1", {"a_REPLICA": 4})
    destination = MemoryAdmin("dc2", {"a": destination_count})
    topics = provisioner(source, destination)

    answer = await topics.ensure("a_REPLICA", "a", 0)

    assert answer.partitions == max(destination_count, 4)
    assert destination.topics["a"] == max(destination_count, 4)
    assert destination.requests["CreatePartitions"] == (1 if destination_count < 4 else 0)
    assert topics.grown == ({"a": 4 - destination_count} if destination_count < 4 else {})


async def test_a_topic_another_replicator_grew_first_is_used_not_counted_as_grown() -> None:
    source = MemoryAdmin("dc1", {"a_REPLICA": 4})
    destination = MemoryAdmin("dc2", {"a": 2})
    destination.refuse_growth["a"] = InvalidPartitionsError("already has 4 partitions")
    topics = provisioner(source, destination)
    ready = await topics.ensure("a_REPLICA", "a", 3)
    assert ready.partitions == 4 and destination.requests["CreatePartitions"] == 1
    assert topics.grown == {} and topics.refused == {}


async def test_a_flow_placing_by_key_uses_a_short_topic_as_it_is() -> None:
    source = MemoryAdmin("dc1", {"a": 6})
    destination = MemoryAdmin("dc2", {"a": 2})
    topics = provisioner(source, destination, preserve=False)
    ready = await topics.ensure("a", "a", 5)
    assert ready.partitions == 2 and ready.source_partitions == 6
    assert destination.requests["CreatePartitions"] == 0


async def test_creation_refused_for_good_is_remembered_retriable_is_not() -> None:
    layout = {"x_REPLICA": 2, "y_REPLICA": 2}
    source = MemoryAdmin("dc1", layout)
    destination = MemoryAdmin("dc2")
    destination.refuse_creation["x"] = (42, "invalid request")  # InvalidRequest: for good
    destination.refuse_creation["y"] = (41, "not controller")  # NotController: retriable
    topics = provisioner(source, destination)

    answers = await start_partitions(topics, layout)

    assert [type(a) for a in answers] == [TopicRefused] * 4
    assert not answers[0].retriable and answers[2].retriable
    assert set(topics.refused) == {"x"}
    del destination.refuse_creation["y"]
    assert (await topics.ensure("y_REPLICA", "y", 1)).partitions == 2


async def test_a_source_topic_not_in_the_metadata_is_missing_and_retried() -> None:
    source = MemoryAdmin("dc1", {})
    destination = MemoryAdmin("dc2")
    topics = provisioner(source, destination)
    with pytest.raises(TopicMissing):
        await topics.ensure("late_REPLICA", "late", 0)
    source.topics["late_REPLICA"] = 3
    assert (await topics.ensure("late_REPLICA", "late", 0)).partitions == 3
    assert topics.rounds == 2


async def test_a_round_that_fails_fails_each_caller_with_its_own_error() -> None:
    layout = {"a_REPLICA": 3}
    source = MemoryAdmin("dc1", layout)
    destination = MemoryAdmin("dc2")
    destination.unavailable = True
    topics = provisioner(source, destination)
    answers = await start_partitions(topics, layout)
    assert [type(a) for a in answers] == [ClusterUnavailable] * 3
    assert len({id(a) for a in answers}) == 3  # not one instance raised in three tasks


async def test_a_partition_beyond_the_count_seen_checks_its_topic_again() -> None:
    source = MemoryAdmin("dc1", {"a_REPLICA": 2})
    destination = MemoryAdmin("dc2")
    topics = provisioner(source, destination)
    await topics.ensure("a_REPLICA", "a", 1)
    source.topics["a_REPLICA"] = 4  # the source grew
    grown = await topics.ensure("a_REPLICA", "a", 3)
    assert grown.partitions == 4 and destination.topics["a"] == 4 and topics.rounds == 2


async def test_config_sync_alters_every_changed_topic_in_one_request() -> None:
    source = MemoryAdmin("dc1", {"a_REPLICA": 1, "b_REPLICA": 1})
    destination = MemoryAdmin("dc2")
    topics = provisioner(source, destination)
    await start_partitions(topics, {"a_REPLICA": 1, "b_REPLICA": 1})
    assert await topics.sync_configs()  # the first round learns the sources' overrides
    source.configs["a_REPLICA"] = {"retention.ms": "1000"}
    source.configs["b_REPLICA"] = {"cleanup.policy": "compact"}
    assert await topics.sync_configs()
    assert destination.requests["IncrementalAlterConfigs"] == 1
    assert destination.configs["a"]["retention.ms"] == "1000"
    assert destination.configs["b"]["cleanup.policy"] == "compact"


# -- the coalescer itself -------------------------------------------------------------------


async def test_callers_of_one_wave_share_a_round_and_all_go_on_together() -> None:
    asked: list[list[int]] = []

    async def fetch_many(keys: list[int]) -> dict[int, int | BaseException]:
        asked.append(sorted(keys))
        await asyncio.sleep(0.01)
        return {k: (ValueError(k) if k == 3 else k * 10) for k in keys}

    many: Coalescer[int, int] = Coalescer(fetch_many)

    async def two_steps(key: int) -> int:
        first = await many.get(key)
        return await many.get(key + 100) + first  # the next question of the same wave

    results = await asyncio.gather(*(two_steps(k) for k in range(50)), return_exceptions=True)
    assert isinstance(results[3], ValueError)
    assert results[7] == 70 + 1070
    # Everyone answered by the first round asks the second question together: two rounds.
    assert many.rounds == 2 and asked[0] == list(range(50))
    assert asked[1] == [k + 100 for k in range(50) if k != 3]


async def test_a_cancelled_leader_leaves_its_keys_to_the_next_caller() -> None:
    started = asyncio.Event()
    release = asyncio.Event()

    async def fetch_many(keys: list[str]) -> dict[str, str | BaseException]:
        started.set()
        await release.wait()
        return {k: k.upper() for k in keys}

    many: Coalescer[str, str] = Coalescer(fetch_many)
    leader = asyncio.ensure_future(many.get("a"))
    await started.wait()
    follower = asyncio.ensure_future(many.get("b"))
    await asyncio.sleep(0)
    leader.cancel()
    release.set()
    assert await follower == "B"
    with pytest.raises(asyncio.CancelledError):
        await leader


async def test_rounds_hold_at_most_max_batch_keys() -> None:
    sizes: list[int] = []

    async def fetch_many(keys: list[int]) -> dict[int, int | BaseException]:
        sizes.append(len(keys))
        return {k: k for k in keys}

    many: Coalescer[int, int] = Coalescer(fetch_many, max_batch=100)
    assert await asyncio.gather(*(many.get(k) for k in range(250))) == list(range(250))
    assert sizes == [100, 100, 50]


# -- the shared fetch at scale: its idle wait, and whom it waits for -------------------------


def test_the_idle_wait_grows_while_fetches_are_empty_and_falls_back_at_once() -> None:
    wait = IdleWait(20, 1000, 10_000)
    assert wait.after(False, 0.0) is None  # the first empty fetch starts the clock
    assert wait.after(False, 0.2) is None  # not empty for long enough
    grown = [wait.after(False, 0.6 + 0.5 * step) for step in range(8)]
    assert grown == [40, 80, 160, 320, 640, 1000, None, None]
    assert wait.after(True, 5.0) == 20  # the first record: back to the busy wait
    assert wait.after(True, 5.1) is None
    fixed = IdleWait(20, 20, 10_000)  # the idle maximum at the busy wait: never changes
    fixed.fetching(6000)
    assert all(fixed.after(False, t) is None for t in (0.0, 1.0, 2.0, 3.0))


def test_an_idle_fetch_of_many_partitions_waits_two_ms_per_partition_up_to_the_longest() -> None:
    def grown_to(wait: IdleWait) -> int:
        last = 0
        for step in range(40):
            last = wait.after(False, 0.5 * step) or last
        return last

    few = IdleWait(20, 1000, 10_000)
    few.fetching(240)  # fewer partitions than the idle maximum's milliseconds: unchanged
    assert grown_to(few) == 1000
    many = IdleWait(20, 1000, 10_000)
    many.fetching(3000)
    assert grown_to(many) == 6000
    more = IdleWait(20, 1000, 10_000)
    more.fetching(6000)
    assert grown_to(more) == 10_000  # 12 s of partitions: the longest wait bounds it
    most = IdleWait(20, 1000, 5000)  # half a short request timeout bounds it
    most.fetching(20_000)
    assert grown_to(most) == 5000


async def test_a_cluster_of_many_partitions_is_listed_at_most_every_5_ms_per_partition() -> None:
    consumer = AIOKafkaConsumer(bootstrap_servers="localhost:9")  # never started: no request
    try:
        cluster = consumer._client.cluster
        cluster._partitions = {f"t{i}": dict.fromkeys(range(6)) for i in range(1000)}
        assert pace_metadata(consumer, 3.0) == 30.0  # 6,000 partitions: every 30 s, not 3
        assert consumer._client._metadata_max_age_ms == 30_000
        cluster._partitions = {f"t{i}": dict.fromkeys(range(6)) for i in range(40)}
        assert pace_metadata(consumer, 3.0) == 3.0  # 240: the configured age
        assert consumer._client._metadata_max_age_ms == 3000
    finally:
        await consumer.stop()


async def test_reassigning_the_destination_reader_keeps_every_topic_in_its_metadata() -> None:
    """A log-bounds round in flight must not lose the topics it learnt to a reassignment of the
    shared reads (it would learn them again one metadata request at a time)."""
    consumer = AIOKafkaConsumer(bootstrap_servers="localhost:9")  # never started: no request
    try:
        consumer._client._topics = {"a", "b", "c"}  # learnt for a round of log bounds
        reads = [TopicPartition("a", 0), TopicPartition("d", 1)]
        assign_keeping_topics(consumer, reads)
        assert consumer.assignment() == set(reads)
        assert consumer._client._topics == {"a", "b", "c", "d"}
        consumer.assign(reads)  # aiokafka's own: the metadata would cover a and d only
        assert consumer._client._topics == {"a", "d"}
    finally:
        await consumer.stop()


def test_the_feed_waits_for_a_starting_partition_only_while_its_destination_answers() -> None:
    tp = TopicPartition("orders_REPLICA", 0)
    local = LegPartition(tp, "orders", "dc1", 0, 100, 1 << 20)
    remote = LegPartition(tp, "orders", "dc1", 0, 100, 1 << 20)
    up = {id(local): True, id(remote): False}  # the remote destination is down
    fanout = PartitionFanout(tp, [local, remote], 0, lambda p: up[id(p)])
    assert fanout.blocking() == [local]
    up[id(remote)] = True
    assert fanout.blocking() == [local, remote]
    local.prepared(new_batch)
    assert fanout.blocking() == [remote]


async def test_mirror_sync_lowers_and_removes_in_one_incremental_request() -> None:
    source = MemoryAdmin("dc1", {"a": 1})
    source.configs["a"] = {"retention.bytes": "2000", "segment.ms": "600000"}
    destination = MemoryAdmin("dc2")
    topics = TopicProvisioner(source, destination, None, sync=ConfigSync.MIRROR)
    await topics.ensure("a", "a", 0)
    assert destination.configs["a"] == {"retention.bytes": "2000", "segment.ms": "600000"}
    destination.configs["a"]["retention.ms"] = "1000"  # given on purpose: a source default
    source.configs["a"] = {"retention.bytes": "1000"}  # lowered; segment.ms back to its default
    assert await topics.sync_configs()
    assert destination.configs["a"] == {"retention.bytes": "1000"}
    assert destination.requests["IncrementalAlterConfigs"] == 1
    assert await topics.sync_configs()  # nothing left to change: no request
    assert destination.requests["IncrementalAlterConfigs"] == 1
