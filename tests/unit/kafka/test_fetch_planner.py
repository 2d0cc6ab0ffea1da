"""The fetch planner decides as aiokafka's own walk decides, on every state both can see.

aiokafka's ``Fetcher._get_actions_per_node`` is the oracle: one fetcher, states built with
aiokafka's own ``SubscriptionState`` and changed through the consumer's calls (pause, resume,
seek, an offset reset), the fetcher's buffer (records held back, consumed), its requests in
flight, and its metadata (leaders moved or gone); after each change both decide, and they agree
on the fetch requests (node, partitions, offsets, sizes), the offset resets, the wait, the
metadata refresh, and whether a resume wakes the loop (with one future, however many partitions
are paused). No broker: the fetcher's loop never runs.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiokafka import TopicPartition
from aiokafka.client import AIOKafkaClient
from aiokafka.consumer.fetcher import Fetcher, FetchError, OffsetResetStrategy
from aiokafka.consumer.subscription_state import SubscriptionState
from aiokafka.errors import KafkaError
from aiokafka.protocol.metadata import MetadataResponse_v1
from hypothesis import given, settings
from hypothesis import strategies as st

from replicator.kafka import internals
from replicator.kafka.fetch_planner import FetchPlanner, install_planner
from replicator.kafka.fetch_sessions import FetchSession, PlannedFetch, _wanted

TOPICS = {"a": 6, "b": 4}
ALL = [TopicPartition(topic, p) for topic, count in TOPICS.items() for p in range(count)]
NODES = (0, 1, 2)
HELD_BACK_S = 1000.0  # records buffered this long ago back their node off for ~this long


def run(coro: Coroutine[Any, Any, None]) -> None:
    asyncio.run(coro)


def metadata(leaders: dict[TopicPartition, int | None]) -> MetadataResponse_v1:
    """Every partition of ``TOPICS`` led by its node in ``leaders`` (-1: none; ``None``: the
    partition missing from the metadata)."""
    topics = [
        (
            0,
            topic,
            False,
            [
                (0, p, leaders[TopicPartition(topic, p)], [0], [0])
                for p in range(count)
                if leaders.get(TopicPartition(topic, p), 0) is not None
            ],
        )
        for topic, count in TOPICS.items()
    ]
    return MetadataResponse_v1([(n, "localhost", 9092 + n, None) for n in NODES], 0, topics)


@dataclass
class Rig:
    """One fetcher (its loop stopped) with a planner installed, and aiokafka's walk beside it."""

    client: AIOKafkaClient
    subscription: SubscriptionState
    fetcher: Fetcher
    planner: FetchPlanner
    parts: internals.FetcherParts
    resets: list[Any] = field(default_factory=list)
    # Per node, a fetch session fed the planner's requests with what changed since the last
    # (as the session client feeds it) and one fed each request whole: they must agree.
    sessions: dict[int, tuple[FetchSession, FetchSession]] = field(default_factory=dict)
    unsent: bool = False  # the next wake's requests are not sent (their node not ready)

    @property
    def assignment(self) -> Any:
        return self.subscription.subscription.assignment

    def state(self, tp: TopicPartition) -> Any:
        return self.assignment.state_value(tp)

    def compare(self) -> internals.FetchActions:
        """Both decide; they agree. The planner's decision."""
        expected = internals.aiokafka_actions(self.parts, self.assignment)
        found: internals.FetchActions = self.fetcher._get_actions_per_node(self.assignment)
        assert requests(found[0]) == requests(expected[0])
        assert resets(found[1]) == resets(expected[1])
        assert found[2] == pytest.approx(expected[2], abs=0.5)
        assert found[3] == expected[3]
        assert len(found[4]) <= 1
        if expected[4]:  # a resume that would wake aiokafka's loop wakes the planner's
            assert found[4]
        self.sessions_agree(found[0])
        return found

    def sessions_agree(self, fetches: list[tuple[int, Any]]) -> None:
        """Each request's planned partitions are the request's; a session told only what
        changed since the planner's last request lists and forgets what one comparing the
        whole request does (also after requests never sent, and new rows after leaders moved
        or a new assignment)."""
        unsent, self.unsent = self.unsent, False
        for node, request in fetches:
            planned = internals.planned_of(request)  # None: aiokafka's walk built it
            assert planned is None or isinstance(planned, PlannedFetch)
            if planned is not None:
                assert dict(planned.wanted) == _wanted(request)
            if unsent:
                continue
            told, whole = self.sessions.setdefault(node, (FetchSession(), FetchSession()))
            if planned is None:
                by_changes = told.next_request(_wanted(request), 11)
            else:
                by_changes = told.next_request(planned.wanted, 11, planned)
            by_whole = whole.next_request(_wanted(request), 11)
            assert set(by_changes.send) == set(by_whole.send)
            assert set(by_changes.forget) == set(by_whole.forget)
            assert (by_changes.full, by_changes.epoch) == (by_whole.full, by_whole.epoch)
            assert told.answered(by_changes, 0, 7, []) is None
            assert whole.answered(by_whole, 0, 7, []) is None


def requests(actions: list[tuple[int, Any]]) -> dict[int, tuple[Any, ...]]:
    found: dict[int, tuple[Any, ...]] = {}
    for node, request in actions:
        assert node not in found
        listed = sorted(
            (topic, *fields) for topic, partitions in request.topics for fields in partitions
        )
        options = {k: v for k, v in vars(request).items() if k not in ("_topics", "planned")}
        found[node] = (tuple(listed), tuple(sorted(options.items())))
    return found


def resets(by_node: dict[int, list[TopicPartition]]) -> dict[int, list[TopicPartition]]:
    return {node: sorted(tps) for node, tps in by_node.items() if tps}


async def rig(reset: str = "none", assigned: list[TopicPartition] = ALL) -> Rig:
    client = AIOKafkaClient(bootstrap_servers="localhost:9")
    client.cluster.update_metadata(metadata({tp: tp.partition % 3 for tp in ALL}))
    subscription = SubscriptionState()
    subscription.assign_from_user(assigned)
    fetcher = Fetcher(
        client, subscription, auto_offset_reset=reset, isolation_level="read_committed"
    )
    fetcher._fetch_task.cancel()
    await asyncio.sleep(0)
    parts = internals.fetcher_parts_of(fetcher, subscription)
    return Rig(client, subscription, fetcher, install_planner(parts), parts)


# -- the operations a random sequence is made of -------------------------------------------------


def buffered(tp: TopicPartition, held_back: bool) -> FetchError:
    """A fetch result kept for ``tp``: backing its node off (``held_back``) or not any more."""
    return FetchError(error=KafkaError("kept"), backoff=HELD_BACK_S if held_back else 0.0)


def apply(r: Rig, op: tuple[Any, ...]) -> None:
    kind, tp, value = op
    assigned = tp in r.assignment.tps
    if kind == "pause" and assigned:
        r.subscription.pause(tp)
    elif kind == "resume" and assigned:
        r.subscription.resume(tp)
    elif kind == "seek" and assigned:
        r.fetcher.seek_to(tp, value)
    elif kind == "reset" and assigned:
        r.resets.append(r.fetcher.request_offset_reset([tp], OffsetResetStrategy.EARLIEST))
    elif kind == "buffer" and assigned and tp not in r.fetcher._records:
        r.fetcher._records[tp] = buffered(tp, value % 2 == 0)
    elif kind == "consume" and r.fetcher._records.pop(tp, None) is not None:
        state = r.state(tp) if assigned else None
        if state is not None and state.has_valid_position:  # records handed over
            state.consumed_to(state.position + 1 + value % 5)
    elif kind == "in_flight":
        r.fetcher._in_flight.symmetric_difference_update({value % 3})
    elif kind == "leaders":
        moved = {t: (t.partition + value) % 3 for t in ALL}
        moved[tp] = -1 if value % 2 else None  # one partition without a leader, or unknown
        r.client.cluster.update_metadata(metadata(moved))
    elif kind == "assign":
        r.subscription.assign_from_user([t for t in ALL if (hash(t) + value) % 3])
        r.fetcher._records.clear()  # as the fetcher's loop does at a new assignment
    elif kind == "unsent":
        r.unsent = True


OPS = st.tuples(
    st.sampled_from(
        [
            "pause",
            "pause",
            "resume",
            "seek",
            "seek",
            "reset",
            "buffer",
            "consume",
            "in_flight",
            "leaders",
            "assign",
            "unsent",
        ]
    ),
    st.sampled_from(ALL),
    st.integers(min_value=0, max_value=1000),
)


@settings(max_examples=500, deadline=None)
@given(
    st.lists(st.tuples(OPS, st.booleans()), max_size=40),
    st.sampled_from(["none", "earliest"]),
    st.booleans(),
)
def test_the_planner_decides_as_aiokafka_after_any_changes(
    ops: list[Any], reset: str, positioned: bool
) -> None:
    """After each change, or after several without a wake between them (records buffered and
    handed over before the loop wakes, a pause and a resume in a row); from an assignment
    without positions, or with every partition at one (``positioned``), as a leg's source
    consumer starts."""

    async def scenario() -> None:
        r = await rig(reset)
        r.compare()
        for n, tp in enumerate(ALL if positioned else ()):
            r.fetcher.seek_to(tp, 10 * n)
        r.compare()
        for op, wakes in ops:
            apply(r, op)
            if wakes:
                r.compare()
        r.compare()
        for waiting in r.resets:
            waiting.cancel()

    run(scenario())


# -- what the oracle cannot say ------------------------------------------------------------------


def test_paused_partitions_wait_on_one_future_that_any_resume_completes() -> None:
    async def scenario() -> None:
        r = await rig()
        for tp in ALL:
            r.fetcher.seek_to(tp, 5)
            r.subscription.pause(tp)
        (waiter,) = r.compare()[4]
        assert len(internals.aiokafka_actions(r.parts, r.assignment)[4]) == len(ALL)
        assert r.compare()[4] == [waiter]  # the same future until a resume
        r.subscription.resume(ALL[3])
        assert waiter.done()
        fetched = r.compare()
        assert [tp for _, req in fetched[0] for tp in req.topics] == [("a", [(3, 5, 1048576)])]
        assert fetched[4] and fetched[4][0] is not waiter

    run(scenario())


def test_a_wake_visits_what_changed_not_the_paused_partitions() -> None:
    async def scenario() -> None:
        r = await rig()
        for tp in ALL:
            r.fetcher.seek_to(tp, 5)
            r.subscription.pause(tp)
        r.compare()  # the first wake of an assignment visits every partition
        before = r.planner.stats.visited
        r.subscription.resume(ALL[0])
        r.fetcher._records[ALL[1]] = buffered(ALL[1], held_back=True)
        r.fetcher._get_actions_per_node(r.assignment)
        # The partition resumed (its row), the one buffered (its row; the records decided).
        assert r.planner.stats.visited - before == 3

    run(scenario())


def test_a_position_lost_in_a_fetch_answer_is_reset_when_the_consumer_resets_by_itself() -> None:
    """``auto_offset_reset`` other than none: an answer out of range loses the position of a
    partition fetched (paused since), and its reset is asked as aiokafka asks it."""

    async def scenario() -> None:
        r = await rig("earliest")
        for tp in ALL:
            r.fetcher.seek_to(tp, 5)
        sent = r.compare()[0]
        r.fetcher._in_flight.update(node for node, _ in sent)
        r.compare()
        r.subscription.pause(ALL[4])
        r.state(ALL[4]).await_reset(OffsetResetStrategy.EARLIEST)  # as the answer's handling does
        r.fetcher._in_flight.clear()
        assert resets(r.compare()[1]) == {ALL[4].partition % 3: [ALL[4]]}

    run(scenario())


def test_a_preferred_read_replica_leaves_the_wake_to_aiokafka() -> None:
    async def scenario() -> None:
        r = await rig()
        for tp in ALL:
            r.fetcher.seek_to(tp, 5)
        r.fetcher._preferred_read_replica[ALL[0]] = (2, float("inf"))
        fetched = r.compare()
        assert r.planner.stats.delegated == 1
        (to_replica,) = [request for node, request in fetched[0] if node == 2]
        assert ALL[0].partition in [fields[0] for fields in dict(to_replica.topics)["a"]]

    run(scenario())


def test_a_new_assignment_is_planned_from_its_own_states() -> None:
    async def scenario() -> None:
        r = await rig()
        for tp in ALL:
            r.fetcher.seek_to(tp, 5)
            r.subscription.pause(tp)
        r.compare()
        r.subscription.assign_from_user(ALL[:3])  # unpaused, no position: resets asked
        assert sorted(tp for tps in r.compare()[1].values() for tp in tps) == ALL[:3]
        r.subscription.pause(ALL[0])  # told before the next wake
        for tp in ALL[:3]:
            r.fetcher.seek_to(tp, 7)
        assert len(r.compare()[0]) == 2

    run(scenario())
