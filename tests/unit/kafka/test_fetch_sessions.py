"""Incremental fetch sessions: what each request lists and forgets, and how an answer moves the
session on (Apache Kafka's ``FetchSessionHandler`` rules), then the same on the wire: the request
aiokafka's fetcher builds, narrowed to the session's plan, and its answer applied.

The session is pure state: these tests drive it request by request, no broker.
"""

from __future__ import annotations

from typing import Any

import pytest
from aiokafka import TopicPartition
from aiokafka.errors import KafkaConnectionError
from aiokafka.protocol.fetch import FetchRequest, FetchResponse_v6, FetchResponse_v11

from replicator.kafka.fetch_sessions import (
    FETCH_SESSION_ID_NOT_FOUND,
    FINAL_EPOCH,
    INITIAL_EPOCH,
    INVALID_FETCH_SESSION_EPOCH,
    MAX_EPOCH,
    NO_SESSION,
    FetchPlan,
    FetchSession,
    Partition,
    PartitionFetch,
    PlannedFetch,
    SessionClient,
)

A0, A1, A2, B0 = (TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("a", 2),
                  TopicPartition("b", 0))  # fmt: skip
MAX = 1_048_576
V11 = 11


def at(**offsets: int) -> dict[Partition, PartitionFetch]:
    """Partitions wanted, by name: ``a0=5`` is partition 0 of topic a from offset 5."""
    return {TopicPartition(k[0], int(k[1:])): (v, MAX) for k, v in offsets.items()}


def opened(session: FetchSession, wanted: dict[Partition, PartitionFetch]) -> FetchPlan:
    """The first (full) request of ``session``, answered with session id 7."""
    plan = session.next_request(wanted, V11)
    assert session.answered(plan, 0, 7, []) is None
    return plan


def continued(session: FetchSession, wanted: dict[Partition, PartitionFetch]) -> FetchPlan:
    plan = session.next_request(wanted, V11)
    assert session.answered(plan, 0, session.session_id, []) is None
    return plan


# -- the session ----------------------------------------------------------------------------------


def planned(
    number: int, wanted: dict[Partition, PartitionFetch], *changed: Partition
) -> PlannedFetch:
    """The planner's ``number``-th request (generation 1) for a node, ``changed`` since the last."""
    return PlannedFetch((1, number), (1, number - 1), wanted, frozenset(changed))


def test_a_session_following_the_planner_compares_only_what_changed() -> None:
    """Told what changed since the request it holds, a session looks at those partitions
    alone (a planner that said nothing of a0 moving is believed: a1 is listed, a0 not);
    told of another base (a request it never sent, new rows), it compares every partition."""
    session = FetchSession()
    first = planned(1, at(a0=5, a1=0, b0=9), A0, A1, B0)
    assert session.answered(session.next_request(first.wanted, V11, first), 0, 7, []) is None
    moved = planned(2, at(a0=6, a1=3, b0=9), A1)
    plan = session.next_request(moved.wanted, V11, moved)
    assert (plan.send, plan.forget, plan.epoch) == ((A1,), (), 1)
    assert plan.held is moved.wanted and session.held_token == (1, 2)
    assert session.answered(plan, 0, 7, []) is None
    # b0 paused (its entry removed), a2 resumed: listed and forgotten from the changes.
    paused = planned(3, at(a0=6, a1=3, a2=1), B0, A2)
    plan = session.next_request(paused.wanted, V11, paused)
    assert (set(plan.send), plan.forget) == ({A2}, (B0,))
    assert session.answered(plan, 0, 7, []) is None
    # Request 4 was never sent (its node not ready): 5 follows a request this session does
    # not hold, so every partition is compared, a0 too.
    skipped = planned(5, at(a0=6, a1=3, a2=2))
    plan = session.next_request(skipped.wanted, V11, skipped)
    assert set(plan.send) == {A2}
    assert session.answered(plan, 0, 7, []) is None
    # A restarted session holds no planner request: its next request is full.
    session.replaced()
    again = planned(6, at(a0=6, a1=3, a2=2))
    plan = session.next_request(again.wanted, V11, again)
    assert plan.full and set(plan.send) == {A0, A1, A2}


def test_the_first_request_is_full_and_opens_a_session() -> None:
    session = FetchSession()
    plan = session.next_request(at(a0=5, a1=0, b0=9), V11)
    assert (plan.session_id, plan.epoch) == (NO_SESSION, INITIAL_EPOCH)
    assert plan.full and not plan.sessionless
    assert set(plan.send) == {A0, A1, B0} and plan.forget == ()
    assert session.answered(plan, 0, 7, [A0, A1, B0]) is None
    assert (session.session_id, session.epoch) == (7, 1)


def test_unchanged_partitions_are_not_listed_and_the_epoch_moves_on() -> None:
    session = FetchSession()
    opened(session, at(a0=5, a1=0, b0=9))
    plan = session.next_request(at(a0=5, a1=0, b0=9), V11)
    assert (plan.session_id, plan.epoch) == (7, 1)
    assert plan.send == () and plan.forget == () and not plan.full
    assert session.answered(plan, 0, 7, []) is None
    assert session.epoch == 2
    assert continued(session, at(a0=5, a1=0, b0=9)).epoch == 2
    assert session.epoch == 3


def test_a_moved_position_or_size_is_listed_alone() -> None:
    session = FetchSession()
    opened(session, at(a0=5, a1=0, b0=9))
    plan = continued(session, at(a0=8, a1=0, b0=9))
    assert plan.send == (A0,) and plan.forget == ()
    assert plan.held[A0] == (8, MAX)
    resized = {**at(a0=8, a1=0), B0: (9, 1024)}
    assert continued(session, resized).send == (B0,)
    assert continued(session, resized).send == ()


def test_a_partition_paused_or_removed_is_forgotten_and_listed_again_when_resumed() -> None:
    session = FetchSession()
    opened(session, at(a0=5, a1=0, b0=9))
    plan = continued(session, at(a0=5))  # a1 paused, b0 removed (or holding records)
    assert plan.send == () and set(plan.forget) == {A1, B0}
    assert set(session.held) == {A0}
    assert continued(session, at(a0=5)).forget == ()  # forgotten once
    resumed = continued(session, at(a0=5, a1=0))
    assert resumed.send == (A1,) and resumed.forget == ()


def test_a_partition_added_is_listed() -> None:
    session = FetchSession()
    opened(session, at(a0=5))
    plan = continued(session, at(a0=5, a2=3))
    assert plan.send == (A2,) and plan.held[A2] == (3, MAX)


def test_an_idle_partition_answered_takes_its_fetch_offset_from_the_session() -> None:
    """A partition not listed (unchanged since an earlier request) that received records is
    answered: its records start at the offset the session holds for it."""
    session = FetchSession()
    opened(session, at(a0=5, a1=40, b0=9))
    plan = session.next_request(at(a0=6, a1=40, b0=9), V11)
    assert plan.send == (A0,)
    assert session.answered(plan, 0, 7, [A0, A1]) is None
    assert plan.fetch_offset(A1) == 40 and plan.fetch_offset(B0) == 9
    assert plan.fetch_offset(A2) is None


def test_a_partition_left_out_of_an_answer_was_quiet_at_its_fetch_offset() -> None:
    """An incremental answer leaves out what has no record and no change: at the offset the
    session holds for it, the partition was answered, with nothing new. A full answer names
    every partition (the broker answers them all), and an offset moved since says nothing."""
    session = FetchSession()
    opened(session, at(a0=5, a1=40))
    assert session.quiet_since(A1, 40) is None  # a full answer: it named a1 itself
    plan = session.next_request(at(a0=6, a1=40), V11)
    assert session.answered(plan, 0, 7, [A0]) is None
    assert session.quiet_since(A1, 40) == session.answered_ms > 0
    assert session.quiet_since(A1, 41) is None  # moved on since: not known quiet there
    assert session.quiet_since(A2, 0) is None  # not fetched
    session.next_request(at(a0=6, a1=40), V11)
    session.failed(session._pending)  # type: ignore[arg-type]
    assert session.quiet_since(A1, 40) is None  # the session starts over


def test_an_answer_that_closes_the_session_says_nothing_of_quiet_partitions() -> None:
    session = FetchSession()
    opened(session, at(a0=5, a1=40))
    plan = session.next_request(at(a0=6, a1=40), V11)
    assert session.answered(plan, 0, NO_SESSION, [A0]) is None
    assert session.quiet_since(A1, 40) is None
    assert session.epoch == INITIAL_EPOCH


def test_a_new_assignment_makes_the_next_request_full_and_an_answer_awaited_moot() -> None:
    """New partition states (a new assignment) know no high watermark: the broker must name
    every partition again. An answer to the request in flight meanwhile moves nothing."""
    session = FetchSession()
    opened(session, at(a0=5, a1=40))
    in_flight = session.next_request(at(a0=5, a1=40), V11)
    session.replaced()
    assert session.answered(in_flight, 0, 7, []) is None
    plan = session.next_request(at(a0=5, a1=40), V11)
    assert (plan.session_id, plan.epoch) == (7, INITIAL_EPOCH)  # closes 7, opens anew
    assert set(plan.send) == {A0, A1}


@pytest.mark.parametrize(
    ("error", "next_id"),
    [(FETCH_SESSION_ID_NOT_FOUND, NO_SESSION), (INVALID_FETCH_SESSION_EPOCH, 7)],
    ids=["session not found: a new one", "epoch refused: this one closed, a new one"],
)
def test_a_session_error_makes_the_next_request_full(error: int, next_id: int) -> None:
    session = FetchSession()
    opened(session, at(a0=5, a1=0))
    plan = session.next_request(at(a0=6, a1=0), V11)
    problem = session.answered(plan, error, 0, [])
    assert problem is not None and str(error) in problem
    full = session.next_request(at(a0=6, a1=0), V11)
    assert (full.session_id, full.epoch) == (next_id, INITIAL_EPOCH)
    assert set(full.send) == {A0, A1} and full.forget == ()
    assert session.answered(full, 0, 8, [A0, A1]) is None
    assert (session.session_id, session.epoch) == (8, 1)
    assert continued(session, at(a0=6, a1=0)).send == ()


def test_a_request_without_an_answer_makes_the_next_one_full_closing_the_session() -> None:
    """A disconnect, a timeout, a cancelled fetch: whether the broker took the epoch is
    unknown."""
    session = FetchSession()
    opened(session, at(a0=5, a1=0))
    plan = session.next_request(at(a0=6, a1=0), V11)
    session.failed(plan)
    full = session.next_request(at(a0=6, a1=0), V11)
    assert (full.session_id, full.epoch) == (7, INITIAL_EPOCH) and set(full.send) == {A0, A1}


def test_an_answer_naming_a_partition_not_fetched_resets_the_session() -> None:
    session = FetchSession()
    opened(session, at(a0=5))
    plan = session.next_request(at(a0=5), V11)
    problem = session.answered(plan, 0, 7, [A0, B0])
    assert problem is not None and "b" in problem
    assert (session.session_id, session.epoch) == (7, INITIAL_EPOCH)
    first = FetchSession()
    full = first.next_request(at(a0=5), V11)
    assert first.answered(full, 0, 7, [B0]) is not None
    assert (first.session_id, first.epoch) == (NO_SESSION, INITIAL_EPOCH)


def test_a_broker_that_keeps_no_session_gets_full_requests() -> None:
    """Session id 0 in the answer to a full request: none opened (its cache is full); to an
    incremental one: the broker closed it."""
    session = FetchSession()
    plan = session.next_request(at(a0=5), V11)
    assert session.answered(plan, 0, NO_SESSION, [A0]) is None
    again = session.next_request(at(a0=5), V11)
    assert (again.session_id, again.epoch, again.send) == (NO_SESSION, INITIAL_EPOCH, (A0,))
    session.answered(again, 0, 7, [])
    closed = session.next_request(at(a0=5), V11)
    assert session.answered(closed, 0, NO_SESSION, []) is None
    assert session.next_request(at(a0=5), V11).full


def test_a_broker_below_fetch_v7_has_no_session() -> None:
    session = FetchSession()
    for _ in range(3):
        plan = session.next_request(at(a0=5, a1=0), 6)
        assert plan.sessionless and set(plan.send) == {A0, A1} and plan.forget == ()
        assert session.answered(plan, 0, NO_SESSION, [A0]) is None
    assert (session.session_id, session.epoch) == (NO_SESSION, INITIAL_EPOCH)


def test_one_request_at_a_time_a_second_goes_without_the_session() -> None:
    session = FetchSession()
    opened(session, at(a0=5, a1=0))
    first = session.next_request(at(a0=6, a1=0), V11)
    second = session.next_request(at(a0=6, a1=0, b0=1), V11)
    assert (second.session_id, second.epoch) == (NO_SESSION, FINAL_EPOCH)
    assert set(second.send) == {A0, A1, B0}
    assert session.answered(second, 0, NO_SESSION, [B0]) is None
    assert session.answered(first, 0, 7, [A0]) is None
    assert session.epoch == 2 and set(session.held) == {A0, A1}
    assert continued(session, at(a0=6, a1=0, b0=1)).send == (B0,)


def test_the_epoch_wraps_to_one() -> None:
    session = FetchSession(session_id=7, epoch=MAX_EPOCH, held=at(a0=5))
    plan = session.next_request(at(a0=5), V11)
    assert plan.epoch == MAX_EPOCH
    session.answered(plan, 0, 7, [])
    assert session.epoch == 1


# -- on the wire ----------------------------------------------------------------------------------


def fetch_request(wanted: dict[Partition, PartitionFetch]) -> FetchRequest:
    """A request as aiokafka's fetcher builds it: every fetchable partition of a node."""
    topics: dict[str, list[tuple[int, int, int]]] = {}
    for (topic, partition), (offset, max_bytes) in wanted.items():
        topics.setdefault(topic, []).append((partition, offset, max_bytes))
    return FetchRequest(500, 1, 52_428_800, 1, list(topics.items()))


def answer(
    session_id: int, partitions: list[tuple[TopicPartition, bytes]], error: int = 0
) -> FetchResponse_v11:
    topics: dict[str, list[Any]] = {}
    for tp, data in partitions:
        topics.setdefault(tp.topic, []).append((tp.partition, 0, 100, 100, 0, [], -1, data))
    return FetchResponse_v11(0, error, session_id, list(topics.items()))


class Broker:
    """The client under the fetcher: prepares each request at the versions it grants (as a
    connection does), keeps what went on the wire, answers from a script."""

    def __init__(self, answers: list[Any], fetch_versions: tuple[int, int] = (4, 11)) -> None:
        self.answers = answers
        self.versions = {1: fetch_versions}
        self.sent: list[Any] = []
        self.cluster = "the client's own"

    async def send(self, node_id: int, request: Any) -> Any:
        self.sent.append(request.prepare(self.versions))
        found = self.answers.pop(0)
        if isinstance(found, Exception):
            raise found
        return found


def listed(struct: Any) -> dict[TopicPartition, int]:
    """The partitions a request struct names, with their fetch offsets (v9+ layout)."""
    return {TopicPartition(t, p[0]): p[2] for t, partitions in struct.topics for p in partitions}


def forgotten(struct: Any) -> set[TopicPartition]:
    return {
        TopicPartition(t, p) for t, partitions in struct.forgotten_topics_data for p in partitions
    }


async def test_requests_on_the_wire_list_only_what_changed() -> None:
    broker = Broker(
        [answer(7, [(A0, b""), (A1, b"")]), answer(7, [(A1, b"records")]), answer(7, [])]
    )
    client = SessionClient(broker)
    await client.send(1, fetch_request(at(a0=5, a1=0)))
    request = fetch_request(at(a0=5, a1=0))
    response = await client.send(1, request)
    await client.send(1, fetch_request(at(a0=5)))  # a1 holds records not handed over yet
    full, idle, paused = broker.sent
    assert (full.session_id, full.session_epoch, listed(full)) == (0, 0, {A0: 5, A1: 0})
    assert (idle.session_id, idle.session_epoch, listed(idle), idle.topics) == (7, 1, {}, [])
    assert (paused.session_epoch, listed(paused), forgotten(paused)) == (2, {}, {A1})
    # aiokafka reads the answer's fetch offsets from the request it sent, after the answer:
    # it names then the partitions answered alone, with the offsets they were fetched at (not
    # every partition fetched: thousands for a few answered).
    assert [p for _, ps in request.topics for p in ps] == [(1, 0, MAX)]
    assert [p[0] for _, ps in response.topics for p in ps] == [1]
    assert client.cluster == "the client's own"
    stats = client.stats
    assert (stats.requests, stats.full, stats.listed, stats.forgotten) == (3, 1, 2, 1)
    assert (stats.answered, stats.resets) == (3, 0)


async def test_a_session_error_on_the_wire_is_followed_by_a_full_request() -> None:
    broker = Broker(
        [answer(7, []), answer(0, [], error=INVALID_FETCH_SESSION_EPOCH), answer(8, [])]
    )
    client = SessionClient(broker)
    for _ in range(3):
        await client.send(1, fetch_request(at(a0=5, b0=2)))
    _, refused, again = broker.sent
    assert (refused.session_id, refused.session_epoch, listed(refused)) == (7, 1, {})
    assert (again.session_id, again.session_epoch, listed(again)) == (7, 0, {A0: 5, B0: 2})
    assert client.stats.resets == 1 and client.sessions[1].session_id == 8


async def test_a_failed_send_is_followed_by_a_full_request() -> None:
    broker = Broker([answer(7, []), KafkaConnectionError("gone"), answer(7, [])])
    client = SessionClient(broker)
    await client.send(1, fetch_request(at(a0=5)))
    with pytest.raises(KafkaConnectionError):
        await client.send(1, fetch_request(at(a0=6)))
    await client.send(1, fetch_request(at(a0=6)))
    assert (broker.sent[2].session_id, broker.sent[2].session_epoch) == (7, 0)
    assert listed(broker.sent[2]) == {A0: 6}
    assert (client.stats.requests, client.stats.unanswered, client.stats.resets) == (2, 1, 0)


async def test_partitions_answered_but_not_fetched_are_dropped_from_the_answer() -> None:
    broker = Broker([answer(7, [(A0, b""), (B0, b"stray")])])
    client = SessionClient(broker)
    response = await client.send(1, fetch_request(at(a0=5)))
    assert [(t, [p[0] for p in ps]) for t, ps in response.topics] == [("a", [0]), ("b", [])]
    assert client.stats.resets == 1 and client.sessions[1].epoch == INITIAL_EPOCH


async def test_each_node_has_its_own_session() -> None:
    broker = Broker([answer(7, []), answer(9, []), answer(7, []), answer(9, [])])
    client = SessionClient(broker)
    for node in (1, 2, 1, 2):
        await client.send(node, fetch_request(at(a0=5)))
    assert [(s.session_id, s.session_epoch) for s in broker.sent] == [
        (0, 0),
        (0, 0),
        (7, 1),
        (9, 1),
    ]


async def test_a_broker_below_fetch_v7_gets_aiokafkas_request() -> None:
    old = FetchResponse_v6(0, [("a", [(0, 0, 10, 10, 0, [], b"")])])
    broker = Broker([old, old], fetch_versions=(4, 6))
    client = SessionClient(broker)
    for _ in range(2):
        await client.send(1, fetch_request(at(a0=5, a1=0)))
    assert [s.API_VERSION for s in broker.sent] == [6, 6]
    assert listed_v5(broker.sent[1]) == {A0: 5, A1: 0}


def listed_v5(struct: Any) -> dict[TopicPartition, int]:
    return {TopicPartition(t, p[0]): p[1] for t, partitions in struct.topics for p in partitions}


async def test_other_requests_pass_through() -> None:
    class Other:
        API_KEY = 3

    other = Other()
    broker = Broker([])
    seen: list[Any] = []

    async def send(node_id: int, request: Any) -> str:
        seen.append(request)
        return "answered"

    broker.send = send  # type: ignore[method-assign]
    assert await SessionClient(broker).send(1, other) == "answered" and seen == [other]


async def test_a_partition_listed_is_laid_out_as_its_version_lays_it_out() -> None:
    """v7 and v8 have no leader epoch; v9 and later have one (a consumer's: -1)."""
    for versions, moved in (
        ((4, 8), ("a", [(0, 6, -1, MAX)])),
        ((4, 10), ("a", [(0, -1, 6, -1, MAX)])),
    ):
        broker = Broker([answer(7, []), answer(7, [])], fetch_versions=versions)
        client = SessionClient(broker)
        await client.send(1, fetch_request(at(a0=5, a1=0)))
        await client.send(1, fetch_request(at(a0=6)))
        incremental = broker.sent[1]
        assert (incremental.API_VERSION, incremental.topics) == (versions[1], [moved])
        assert incremental.forgotten_topics_data == [("a", [1])]
        assert len(broker.sent[0].topics[0][1]) == 2


async def test_a_partition_whose_leader_moves_is_added_there_and_forgotten_here() -> None:
    broker = Broker([answer(7, []), answer(9, []), answer(7, []), answer(9, [])])
    client = SessionClient(broker)
    await client.send(1, fetch_request(at(a0=5, a1=3)))
    await client.send(2, fetch_request(at(b0=0)))
    await client.send(1, fetch_request(at(a0=5)))  # a1's leader is now node 2
    await client.send(2, fetch_request(at(b0=0, a1=3)))
    here, there = broker.sent[2], broker.sent[3]
    assert (listed(here), forgotten(here)) == ({}, {A1})
    assert (listed(there), forgotten(there)) == ({A1: 3}, set())
    assert (there.session_id, there.session_epoch) == (9, 1)


async def test_a_new_assignment_on_the_wire_is_followed_by_a_full_request() -> None:
    broker = Broker([answer(7, []), answer(7, []), answer(7, []), answer(8, [])])
    assignments = iter(["first", "first", "first", "second"])
    client = SessionClient(broker, lambda: next(assignments))
    for _ in range(4):
        await client.send(1, fetch_request(at(a0=5, a1=3)))
    assert [(s.session_id, s.session_epoch) for s in broker.sent] == [
        (0, 0),
        (7, 1),
        (7, 2),
        (7, 0),
    ]
    assert listed(broker.sent[3]) == {A0: 5, A1: 3}


async def test_a_quiet_partition_is_found_through_its_leaders_session() -> None:
    broker = Broker([answer(7, [(A0, b""), (A1, b"")]), answer(7, [(A0, b"records")])])
    broker.cluster = Leaders({A0: 1, A1: 1})  # type: ignore[assignment]
    client = SessionClient(broker)
    await client.send(1, fetch_request(at(a0=5, a1=3)))
    assert client.quiet_since(A1, 3) is None
    await client.send(1, fetch_request(at(a0=5, a1=3)))
    assert client.quiet_since(A1, 3) == client.sessions[1].answered_ms
    assert client.quiet_since(A0, 5) is None  # named: aiokafka's own answer time holds
    assert client.quiet_since(B0, 0) is None  # no leader known


class Leaders:
    def __init__(self, leaders: dict[TopicPartition, int]) -> None:
        self.leaders = leaders

    def leader_for_partition(self, tp: TopicPartition) -> int | None:
        return self.leaders.get(tp)
