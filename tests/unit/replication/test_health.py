"""A leg's health view at scale: readiness while partitions start, counts by state, the bounded
``/status`` summary and its per-partition detail, lag per topic, and the gauges.

No brokers: :class:`FakeLeg` holds what :class:`~replicator.replication.health.LegHealth` reads of
a leg (the :class:`~replicator.replication.health.LegView` protocol), with real
:class:`LegPartition` objects brought to each state through their own transitions.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import test_utils
from aiokafka import TopicPartition
from structlog.testing import capture_logs

from replicator import clock
from replicator.config.topology import Leg
from replicator.replication.accounting import Duplicates, Resumptions
from replicator.replication.health import (
    DEFAULT_LIMIT,
    HALTED,
    REPLICATING,
    STALLED,
    STARTING,
    STATES,
    LegHealth,
    PartitionQuery,
)
from replicator.replication.partition import LegPartition
from replicator.replication.states import Halt
from replicator.service.http import build_app
from replicator.telemetry.metrics import Metrics
from tests.unit.model.test_batching import new_batch

LEG = Leg("dc1", "dc2")
STALL_AFTER = 30.0


@dataclass
class FakeDestination:
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    idempotent: bool | None = True


@dataclass
class FakeResets:
    recent: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class FakeLeg:
    """A connected leg with no partitions yet."""

    leg: Leg = LEG
    group: str = "replicator.dc1.dc2"
    partitions: dict[TopicPartition, LegPartition] = field(default_factory=dict)
    destination: FakeDestination = field(default_factory=FakeDestination)
    destination_error: str | None = None
    last_error: str | None = None
    start_error: str | None = None
    duplicates: Duplicates = field(default_factory=lambda: Duplicates(LEG.name, Metrics()))
    resumptions: Resumptions = field(default_factory=Resumptions)
    refused_topics: dict[str, str] = field(default_factory=dict)
    grown_topics: dict[str, int] = field(default_factory=dict)
    topic_config_sync: dict[str, object] = field(default_factory=dict)
    resets: FakeResets = field(default_factory=FakeResets)
    takeover: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        self.destination.ready.set()

    def add(
        self,
        topic: str,
        number: int,
        state: str = REPLICATING,
        reason: str | None = None,
        position: int = 0,
        kind: Halt = Halt.FAILED,
    ) -> LegPartition:
        """A partition of source topic ``<topic>_REPLICA`` into ``topic``, brought to ``state``
        (a stalled one was sent a batch :data:`STALL_AFTER` ago as :func:`later` sees it)."""
        partition = LegPartition(
            TopicPartition(f"{topic}_REPLICA", number), topic, "dc1", position, 100, 1 << 20
        )
        if state == STARTING:
            if reason is not None:
                partition.report(reason)
        else:
            partition.prepared(new_batch)
            if state == STALLED:
                partition.sending(partition.epoch, position, position + 10)
            elif state == HALTED:
                partition.halt(reason or "refused", kind)
        self.partitions[partition.tp] = partition
        return partition


def later() -> float:
    """A moment at which every batch sent so far has waited longer than the stall timeout."""
    return clock.monotonic() + 2 * STALL_AFTER


def health(leg: FakeLeg) -> tuple[LegHealth, Metrics]:
    metrics = Metrics()
    return LegHealth(leg, metrics, STALL_AFTER), metrics


def sample(metrics: Metrics, name: str, **labels: str) -> float | None:
    value: float | None = metrics.registry.get_sample_value(name, labels)
    return value


def no_log_end(_: TopicPartition) -> int | None:
    return None


def query(**params: str) -> PartitionQuery:
    parsed = PartitionQuery.parse(params.items())
    assert parsed is not None
    return parsed


# -- readiness ----------------------------------------------------------------------------------


def test_a_leg_is_not_ready_while_partitions_start_one_line_naming_why() -> None:
    leg = FakeLeg()
    for number in range(1163):
        leg.add("orders", number)
    waiting = [
        leg.add("invoices", n, STARTING, "destination not ready: KafkaTimeoutError")
        for n in range(30)
    ]
    preparing = [leg.add("refunds", n, STARTING) for n in range(7)]
    view, metrics = health(leg)

    (problem,) = view.problems()
    assert problem.startswith("leg dc1->dc2: 37 of 1200 partitions starting (")
    # The most common reason first, with an example partition and how many more share it.
    assert "invoices_REPLICA[0] and 29 more: destination not ready: KafkaTimeoutError" in problem
    assert "refunds_REPLICA[0] and 6 more: preparing the destination topic" in problem
    view.refresh(no_log_end)
    assert sample(metrics, "replicator_leg_ready", leg="dc1->dc2") == 0

    for partition in waiting + preparing:
        partition.prepared(new_batch)
    assert view.problems() == []
    view.refresh(no_log_end)
    assert sample(metrics, "replicator_leg_ready", leg="dc1->dc2") == 1


def test_a_leg_not_connected_says_so_besides_its_starting_partitions() -> None:
    leg = FakeLeg(last_error="cannot connect to dc2: timeout")
    leg.destination.ready.clear()
    leg.add("orders", 0, STARTING, "destination not ready: timeout")
    view, _ = health(leg)
    assert view.problems() == [
        "leg dc1->dc2 not connected: cannot connect to dc2: timeout",
        "leg dc1->dc2: 1 of 1 partitions starting "
        "(orders_REPLICA[0]: destination not ready: timeout)",
    ]


def test_a_leg_whose_committed_offsets_cannot_be_read_is_not_ready_saying_why() -> None:
    denied = "Describe on group replicator.dc1.dc2 denied by the ACLs of dc1"
    leg = FakeLeg(start_error=f"cannot read the committed offsets: {denied}")
    view, _ = health(leg)
    assert view.problems() == [f"leg dc1->dc2: cannot read the committed offsets: {denied}"]
    leg.start_error = None
    assert view.problems() == []


def test_problems_stay_one_bounded_line_per_condition_with_thousands_of_partitions() -> None:
    leg = FakeLeg()
    for topic in range(1000):  # a reason per topic: more reasons than a line shows
        for number in range(3):
            leg.add(
                f"t{topic:04}",
                number,
                HALTED,
                f"destination topic t{topic:04} has 1 partitions, source has 3",
                kind=Halt.BLOCKED,
            )
    leg.add("orders", 0, HALTED, "destination refused a batch: max.message.bytes")
    for number in range(2000):
        leg.add("events", number, STALLED)
    for number in range(1000):
        leg.add("events", 2000 + number)
    view, _ = health(leg)

    halted, stalled = view.problems(later())
    assert halted.startswith(
        "leg dc1->dc2: 3001 of 6001 partitions halted (3000 blocked, 1 failed;"
    )
    assert "t0000_REPLICA[0] and 2 more: blocked: destination topic t0000 has 1" in halted
    assert "998 other reasons" in halted
    assert stalled.startswith("leg dc1->dc2: 2000 of 6001 partitions stalled: unacknowledged for")
    assert "events_REPLICA[0], events_REPLICA[1], events_REPLICA[2] and 1997 more" in stalled
    assert max(len(halted), len(stalled)) < 400


def test_a_halted_partition_is_named_with_its_kind_and_reason() -> None:
    leg = FakeLeg()
    leg.add("orders", 0)
    leg.add("orders", 1, HALTED, "destination refused a batch: record exceeds max.message.bytes")
    view, _ = health(leg)
    assert view.problems() == [
        "leg dc1->dc2: 1 of 2 partitions halted (1 failed; orders_REPLICA[1]: failed: "
        "destination refused a batch: record exceeds max.message.bytes)"
    ]


# -- counts by state ----------------------------------------------------------------------------


def mixed() -> FakeLeg:
    """5 replicating (one of them fetching alone), 4 starting, 3 stalled, 2 halted."""
    leg = FakeLeg()
    for number in range(5):
        leg.add("orders", number, position=10 * number)
    leg.partitions[TopicPartition("orders_REPLICA", 4)].detach()
    for number in range(4):
        leg.add("invoices", number, STARTING, "destination not ready: timeout" if number else None)
    for number in range(3):
        leg.add("events", number, STALLED)
    leg.add("blocked", 0, HALTED, "too few partitions", kind=Halt.BLOCKED)
    leg.add("blocked", 1, HALTED, "too few partitions", kind=Halt.BLOCKED)
    return leg


def test_partitions_are_counted_by_state_in_status_and_gauges() -> None:
    view, metrics = health(mixed())
    now = later()
    expected = {STARTING: 4, REPLICATING: 5, STALLED: 3, HALTED: 2}
    status = view.status(no_log_end, now)
    assert status["partition_states"] == expected
    assert status["assigned_partitions"] == 14
    assert status["detached_partitions"] == 1
    assert status["starting_reasons"] == [
        {
            "reason": "destination not ready: timeout",
            "partitions": 3,
            "example": "invoices_REPLICA[1]",
        },
        {
            "reason": "preparing the destination topic and reading its tail",
            "partitions": 1,
            "example": "invoices_REPLICA[0]",
        },
    ]
    assert status["halted_reasons"] == [
        {"reason": "blocked: too few partitions", "partitions": 2, "example": "blocked_REPLICA[0]"}
    ]
    assert status["longest_unacknowledged_seconds"] >= STALL_AFTER
    view.refresh(no_log_end, now)
    for state in STATES:
        assert (
            sample(metrics, "replicator_leg_partitions", leg="dc1->dc2", state=state)
            == (expected[state])
        )
    assert sample(metrics, "replicator_assigned_partitions", leg="dc1->dc2") == 14
    assert sample(metrics, "replicator_topics_blocked", leg="dc1->dc2") == 1
    assert sample(metrics, "replicator_leg_ready", leg="dc1->dc2") == 0


# -- /status: a summary, detail on request ------------------------------------------------------


def test_status_is_a_summary_unless_partitions_are_asked_for() -> None:
    view, _ = health(mixed())
    status = view.status(no_log_end, later())
    assert "partitions" not in status and "partitions_truncated" not in status
    assert status["connected"] is True and status["idempotent_producer"] is True


def listed(status: dict[str, Any]) -> list[str]:
    return [f"{p['topic']}[{p['partition']}]" for p in status["partitions"]]


def test_status_lists_partitions_by_topic_and_state_in_order() -> None:
    view, _ = health(mixed())
    now = later()
    # A destination topic or a source topic; in topic and partition order.
    for topic in ("events", "events_REPLICA"):
        shown = view.status(no_log_end, now, query(topic=topic))
        assert listed(shown) == [f"events_REPLICA[{n}]" for n in range(3)]
        assert all(p["state"] == "stalled" for p in shown["partitions"])
    starting = view.status(no_log_end, now, query(state=STARTING))
    assert listed(starting) == [f"invoices_REPLICA[{n}]" for n in range(4)]
    assert starting["partitions"][1]["last_error"] == "destination not ready: timeout"
    # A partition's own state: the kind of halt, or its mode.
    assert listed(view.status(no_log_end, now, query(state="blocked"))) == [
        "blocked_REPLICA[0]",
        "blocked_REPLICA[1]",
    ]
    assert listed(view.status(no_log_end, now, query(state="fetching_alone"))) == [
        "orders_REPLICA[4]"
    ]
    both = view.status(no_log_end, now, query(state="halted,starting", topic="blocked"))
    assert listed(both) == ["blocked_REPLICA[0]", "blocked_REPLICA[1]"]
    everything = view.status(no_log_end, now, query(partitions="all"))
    assert len(everything["partitions"]) == everything["partitions_matched"] == 14
    assert everything["partitions_truncated"] == 0


def test_status_detail_stops_at_its_limit_and_counts_the_rest() -> None:
    leg = FakeLeg()
    for number in range(DEFAULT_LIMIT + 5):
        leg.add("orders", number)
    view, _ = health(leg)
    full = view.status(no_log_end, detail=query(partitions="all"))
    assert len(full["partitions"]) == DEFAULT_LIMIT
    assert (full["partitions_matched"], full["partitions_truncated"]) == (DEFAULT_LIMIT + 5, 5)
    few = view.status(no_log_end, detail=query(state="replicating", limit="3"))
    assert listed(few) == ["orders_REPLICA[0]", "orders_REPLICA[1]", "orders_REPLICA[2]"]
    assert few["partitions_truncated"] == DEFAULT_LIMIT + 2
    none = view.status(no_log_end, detail=query(partitions="all", limit="0"))
    assert none["partitions"] == [] and none["partitions_truncated"] == DEFAULT_LIMIT + 5


def test_the_status_query_takes_known_parameters_and_values_only() -> None:
    assert PartitionQuery.parse([]) is None
    parsed = PartitionQuery.parse([("topic", "a, b"), ("topic", "c"), ("state", "stalled")])
    assert parsed == PartitionQuery(frozenset("abc"), frozenset({"stalled"}), DEFAULT_LIMIT)
    for bad, named in (
        ([("state", "sleeping")], "state sleeping"),
        ([("state", "")], "state is empty"),
        ([("limit", "-1")], "limit"),
        ([("limit", "ten")], "limit"),
        ([("partitions", "some")], "partitions"),
        ([("topics", "orders")], "unknown parameter topics"),
    ):
        with pytest.raises(ValueError, match=named):
            PartitionQuery.parse(bad)


class Service:
    """The HTTP surface's view of a service with one leg."""

    def __init__(self, view: LegHealth) -> None:
        self.view = view
        self.asked: list[PartitionQuery | None] = []

    def liveness_problems(self) -> list[str]:
        return []

    def readiness_problems(self, local_only: bool = False) -> list[str]:
        return self.view.problems()

    def status(self, detail: PartitionQuery | None = None) -> dict[str, Any]:
        self.asked.append(detail)
        return {"legs": [self.view.status(no_log_end, detail=detail)]}

    def metrics_exposition(self) -> bytes:
        return b""


async def test_the_status_endpoint_passes_the_query_and_refuses_bad_ones() -> None:
    service = Service(health(mixed())[0])
    async with test_utils.TestClient(test_utils.TestServer(build_app(service))) as client:
        summary = await client.get("/status")
        assert summary.status == 200
        assert "partitions" not in (await summary.json())["legs"][0]
        detail = await client.get("/status?topic=orders&state=replicating&limit=2")
        body = await detail.json()
        assert listed(body["legs"][0]) == ["orders_REPLICA[0]", "orders_REPLICA[1]"]
        assert body["legs"][0]["partitions_truncated"] == 3
        refused = await client.get("/status?state=sleeping")
        assert refused.status == 400 and "sleeping" in (await refused.json())["error"]
        ready = await client.get("/readyz")
        answer = await ready.json()  # starting and halted (stalled only later than now)
        assert [p.split(" (")[0] for p in answer["problems"]] == [
            "leg dc1->dc2: 4 of 14 partitions starting",
            "leg dc1->dc2: 2 of 14 partitions halted",
        ]
    assert service.asked == [None, query(topic="orders", state="replicating", limit="2")]


# -- lag, per topic -----------------------------------------------------------------------------


def test_lag_is_summed_per_topic_with_the_largest_partition_apart() -> None:
    leg = FakeLeg()
    for number in range(3):
        leg.add("orders", number, position=100)
    leg.add("invoices", 0, position=5)
    leg.add("invoices", 1, STARTING, position=0)
    ends = {
        TopicPartition("orders_REPLICA", 0): 100,
        TopicPartition("orders_REPLICA", 1): 150,
        TopicPartition("orders_REPLICA", 2): 400,
        TopicPartition("invoices_REPLICA", 0): 45,
    }
    view, metrics = health(leg)
    view.refresh(ends.get)
    lag = {
        topic: sample(metrics, "replicator_commit_lag_records", leg="dc1->dc2", topic=topic)
        for topic in ("orders", "invoices")
    }
    assert lag == {"orders": 350, "invoices": 40}
    assert sample(metrics, "replicator_commit_lag_max_records", leg="dc1->dc2") == 300
    summary = view.status(ends.get)["lag"]
    assert summary == {
        "records": 390,
        "partitions_unknown": 1,  # invoices[1]: its log end is not known yet
        "max_partition": {"topic": "orders_REPLICA", "partition": 2, "records": 300},
        "topics": [{"topic": "orders", "records": 350}, {"topic": "invoices", "records": 40}],
    }
    detail = view.status(ends.get, detail=query(topic="invoices"))["partitions"]
    assert [(p["log_end_offset"], p["lag"]) for p in detail] == [(45, 40), (None, None)]


def test_a_topic_lag_series_goes_when_its_last_partition_is_released() -> None:
    leg = FakeLeg()
    orders = [leg.add("orders", n, position=0) for n in range(2)]
    leg.add("invoices", 0, position=0)
    view, metrics = health(leg)
    view.refresh(lambda _: 10)
    assert sample(metrics, "replicator_commit_lag_records", leg="dc1->dc2", topic="orders") == 20
    # A refresh that knows no log end (the leg's own, every second) keeps what was exported.
    view.refresh(no_log_end)
    assert sample(metrics, "replicator_commit_lag_records", leg="dc1->dc2", topic="orders") == 20

    released = leg.partitions.pop(orders[0].tp)
    released.stop()
    view.forget(released)
    view.refresh(lambda _: 10)
    assert sample(metrics, "replicator_commit_lag_records", leg="dc1->dc2", topic="orders") == 10
    released = leg.partitions.pop(orders[1].tp)
    released.stop()
    view.forget(released)
    view.refresh(no_log_end)
    assert sample(metrics, "replicator_commit_lag_records", leg="dc1->dc2", topic="orders") is None
    assert sample(metrics, "replicator_commit_lag_records", leg="dc1->dc2", topic="invoices") == 10

    leg.partitions.clear()
    view.refresh(no_log_end)
    assert (
        sample(metrics, "replicator_commit_lag_records", leg="dc1->dc2", topic="invoices") is None
    )
    assert sample(metrics, "replicator_commit_lag_max_records", leg="dc1->dc2") == 0


def test_no_metric_is_labelled_per_partition() -> None:
    labelled = [spec.name for spec in Metrics().catalogue if "partition" in spec.labels]
    assert labelled == []


# -- cost and transitions -----------------------------------------------------------------------


def test_one_refresh_reads_each_partition_once_at_scale() -> None:
    leg = FakeLeg()
    for topic in range(1000):
        for number in range(6):
            leg.add(
                f"t{topic:04}", number, STARTING if number == 5 and topic < 100 else REPLICATING
            )
    reads: Counter[TopicPartition] = Counter()

    def log_end(tp: TopicPartition) -> int:
        reads[tp] += 1
        return 7

    view, metrics = health(leg)
    view.refresh(log_end)
    assert len(reads) == 6000 and set(reads.values()) == {1}
    assert sample(metrics, "replicator_leg_partitions", leg="dc1->dc2", state=STARTING) == 100
    assert sample(metrics, "replicator_commit_lag_records", leg="dc1->dc2", topic="t0999") == 42
    status = view.status(log_end)
    assert status["partition_states"][REPLICATING] == 5900
    assert status["lag"]["records"] == 42_000
    assert len(status["lag"]["topics"]) == 3  # the summary stays small


def test_transitions_are_logged_once_per_leg_with_counts_and_examples() -> None:
    leg = FakeLeg()
    stalled = [leg.add("orders", n, STALLED) for n in range(500)]
    leg.add("orders", 500, STARTING)
    with capture_logs() as logs:
        view, _ = health(leg)
        now = later()
        view.refresh(no_log_end, now)
        view.refresh(no_log_end, now)  # nothing changed: nothing logged
        for partition in stalled:
            assert partition.tracker is not None
            partition.acknowledged(partition.tracker, 0)
        leg.partitions[TopicPartition("orders_REPLICA", 500)].prepared(new_batch)
        view.refresh(no_log_end, now)
    assert [(entry["event"], entry.get("partitions")) for entry in logs] == [
        ("destination stopped acknowledging", 500),
        ("destination acknowledging again", 500),
        ("every assigned partition started", 501),
    ]
    assert logs[0]["examples"] == ["orders_REPLICA[0]", "orders_REPLICA[1]", "orders_REPLICA[2]"]
    assert logs[0]["leg"] == "dc1->dc2" and logs[1]["stalled"] == 0
    assert "resumed_from_destination" not in logs[2]  # none resumed: nothing said of it


def test_partitions_resumed_from_the_destination_are_said_once_with_the_start() -> None:
    """A thousand partitions resuming after what the destination holds make one line (with
    the start of the last of them), not a thousand; the next start says only its own."""
    leg = FakeLeg()
    starting = [leg.add("orders", n, STARTING) for n in range(1_000)]
    for n in range(len(starting)):
        leg.resumptions.resumed(f"orders_REPLICA[{n}]", 15 if n % 2 else 0, 0.5 + n / 1000)
    with capture_logs() as logs:
        view, _ = health(leg)
        now = later()
        view.refresh(no_log_end, now)
        for partition in starting:
            partition.prepared(new_batch)
        view.refresh(no_log_end, now)
        restarted = leg.add("orders", 1_000, STARTING)
        view.refresh(no_log_end, now)
        leg.resumptions.resumed("orders_REPLICA[1000]", 0, 0.1)
        restarted.prepared(new_batch)
        view.refresh(no_log_end, now)
    started = [entry for entry in logs if entry["event"] == "every assigned partition started"]
    assert len(started) == 2 and len(logs) == 2
    assert started[0]["resumed_from_destination"] == 1_000
    assert started[0]["resumed_after_records_written"] == 500
    assert started[0]["records_not_written_twice"] == 7_500
    assert started[0]["slowest_tail_read_s"] == 1.499
    assert started[0]["examples"] == ["orders_REPLICA[1]", "orders_REPLICA[3]", "orders_REPLICA[5]"]
    assert started[1]["resumed_from_destination"] == 1 and started[1]["partitions"] == 1_001
    assert "records_not_written_twice" not in started[1]


def test_partitions_that_started_between_two_censuses_are_said_too() -> None:
    """Three partitions resume and start before the health first looks: never seen starting,
    their start is still said, once, with what they resumed after."""
    leg = FakeLeg()
    for n in range(3):
        leg.add("orders", n, STARTING).prepared(new_batch)
        leg.resumptions.resumed(f"orders_REPLICA[{n}]", 5, 0.01)
    with capture_logs() as logs:
        view, _ = health(leg)
        now = later()
        view.refresh(no_log_end, now)
        view.refresh(no_log_end, now)
    assert [(entry["event"], entry["partitions"]) for entry in logs] == [
        ("every assigned partition started", 3)
    ]
    assert logs[0]["records_not_written_twice"] == 15
