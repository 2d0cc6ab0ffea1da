"""The group member's lease: when a replica may write, and when it reads a partition new to it."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.producer.message_accumulator import BatchBuilder, MessageBatch
from aiokafka.producer.transaction_manager import TransactionManager

from replicator import clock
from replicator.errors import OwnershipUnsure
from replicator.kafka import internals
from replicator.kafka.membership import DELIVERY_MARGIN_S, MembershipLease, lease_length
from replicator.kafka.producer import _POLICY

P0, P1 = TopicPartition("orders", 0), TopicPartition("orders", 1)


def test_the_lease_is_two_heartbeats_inside_the_session_and_the_rebalance_timeout() -> None:
    # Kafka's defaults as the product sets them: 45 s session, 3 s heartbeats, 25 s rebalance.
    assert lease_length(45_000, 3_000, 25_000) == 6.0
    assert lease_length(10_000, 3_000, 10_000) == 6.0
    # A short session: two thirds of it, so the coordinator drops a silent member only after
    # its lease ran out.
    assert lease_length(3_000, 1_000, 3_000) == 2.0
    assert lease_length(1_000, 333, 1_000) == pytest.approx(0.6667, abs=1e-3)


async def test_a_member_writes_only_within_a_lease_of_its_last_accepted_heartbeat() -> None:
    lease = MembershipLease("g", 6.0)
    assert not lease.valid()  # no heartbeat accepted yet
    sent = clock.monotonic()
    lease.renewed(sent, generation=1)
    assert lease.valid()
    await asyncio.sleep(5.9)
    assert lease.valid()
    await asyncio.sleep(0.2)  # 6.1 s after the heartbeat was *sent*, however late its answer
    assert not lease.valid()
    lease.renewed(clock.monotonic(), generation=1)
    assert lease.valid()
    lease.lost()  # the coordinator answered UNKNOWN_MEMBER_ID
    assert not lease.valid()


async def test_an_older_heartbeat_answered_late_never_moves_the_lease_back() -> None:
    lease = MembershipLease("g", 6.0)
    lease.renewed(10.0 + clock.monotonic(), generation=1)
    later = lease.renewed_at
    lease.renewed(clock.monotonic(), generation=1)
    assert lease.renewed_at == later


async def test_a_fenced_member_never_writes_again() -> None:
    lease = MembershipLease("g", 6.0, instance_id="dc1-a")
    lease.renewed(clock.monotonic(), generation=3)
    lease.fence("another process joined as 'dc1-a'")
    lease.renewed(clock.monotonic(), generation=4)
    assert not lease.valid()
    assert not await lease.until_valid(30.0)
    assert lease.status()["fenced"] == "another process joined as 'dc1-a'"


async def test_a_batch_waits_for_the_next_accepted_heartbeat_up_to_its_timeout() -> None:
    lease = MembershipLease("g", 6.0)
    lease.renewed(clock.monotonic(), generation=1)
    await asyncio.sleep(7.0)  # a heartbeat late: the lease ran out

    async def heartbeat_in(seconds: float) -> None:
        await asyncio.sleep(seconds)
        lease.renewed(clock.monotonic(), generation=1)

    started = clock.monotonic()
    renewal = asyncio.create_task(heartbeat_in(2.0))
    assert await lease.until_valid(6.0)
    assert clock.monotonic() - started == pytest.approx(2.0)
    await renewal
    await asyncio.sleep(7.0)
    started = clock.monotonic()
    assert not await lease.until_valid(6.0)  # nobody answers
    assert clock.monotonic() - started == pytest.approx(6.0)


async def test_a_partition_new_to_the_member_is_read_a_lease_after_its_assignment() -> None:
    lease = MembershipLease("g", 6.0)
    closed = asyncio.Event()
    lease.assigned([P0, P1], generation=5)
    started = clock.monotonic()
    assert await lease.settled(P0, closed)
    # Any previous owner's last accepted heartbeat was sent before the assignment arrived, and
    # what it handed to the network then has landed.
    assert clock.monotonic() - started == pytest.approx(6.0 + DELIVERY_MARGIN_S)
    assert await lease.settled(P1, closed)  # the same assignment: no longer wait
    assert clock.monotonic() - started == pytest.approx(6.0 + DELIVERY_MARGIN_S)


async def test_a_partition_kept_from_the_generation_before_is_read_at_once() -> None:
    lease = MembershipLease("g", 6.0)
    closed = asyncio.Event()
    lease.assigned([P0], generation=5)
    await asyncio.sleep(10.0)
    lease.assigned([P0, P1], generation=6)  # P0 kept, P1 moved here
    started = clock.monotonic()
    assert await lease.settled(P0, closed)
    assert clock.monotonic() == started
    assert await lease.settled(P1, closed)
    assert clock.monotonic() - started == pytest.approx(6.0 + DELIVERY_MARGIN_S)


async def test_a_member_that_missed_a_generation_waits_for_every_partition() -> None:
    """Dropped (frozen past its session) and back two generations later: another member may
    have held its old partitions in between."""
    lease = MembershipLease("g", 6.0)
    closed = asyncio.Event()
    lease.assigned([P0], generation=5)
    lease.assigned([P0], generation=7)
    started = clock.monotonic()
    assert await lease.settled(P0, closed)
    assert clock.monotonic() - started == pytest.approx(6.0 + DELIVERY_MARGIN_S)


async def test_waiting_to_read_ends_when_the_partition_closes() -> None:
    lease = MembershipLease("g", 6.0)
    closed = asyncio.Event()
    lease.assigned([P0], generation=3)
    asyncio.get_running_loop().call_later(1.0, closed.set)
    started = clock.monotonic()
    assert not await lease.settled(P0, closed)
    assert clock.monotonic() - started == pytest.approx(1.0)


def _producer(lease: MembershipLease) -> Any:
    producer = AIOKafkaProducer(bootstrap_servers="127.0.0.1:1", enable_idempotence=True)
    internals.install_fencing(producer, _POLICY, lease)
    manager = TransactionManager(None, 60_000)
    manager.set_pid_and_epoch(7, 0)
    producer._sender._txn_manager = manager
    return producer


def _drained_batch(manager: TransactionManager, tp: TopicPartition, records: int) -> MessageBatch:
    builder = BatchBuilder(1 << 16, 0)
    for n in range(records):
        builder.append(key=None, value=b"v%d" % n, timestamp=None)
    batch = MessageBatch(tp, builder, ttl=60, linger_time=0)
    # As the accumulator drains it: numbered from the partition's next sequence.
    builder._set_producer_state(7, 0, manager.sequence_number(tp))
    manager.increment_sequence_number(tp, records)
    return batch


async def test_a_batch_the_lease_does_not_cover_never_reaches_the_network(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """After a freeze the sender finds the lease run out: it waits a lease length for a
    heartbeat, then fails the batch as not sent (the partition resumes from the destination),
    its sequence numbers given back, and nothing queued behind it goes out."""
    sent: list[Any] = []

    async def send(self: Any, node_id: int) -> None:
        sent.append(node_id)

    monkeypatch.setattr(internals._FencingHandler, "do", send)
    lease = MembershipLease("g", 6.0)
    lease.renewed(clock.monotonic(), generation=1)
    await asyncio.sleep(10.0)  # frozen past the lease
    producer = _producer(lease)
    sender, manager = producer._sender, producer._sender._txn_manager
    batch = _drained_batch(manager, P0, 3)
    sender._in_flight.add(0)
    sender._muted_partitions.add(P0)
    await sender._send_produce_req(0, {P0: batch})
    assert sent == []
    assert isinstance(batch.future.exception(), OwnershipUnsure)
    assert manager.sequence_number(P0) == 0
    assert P0 in sender.fenced and P0 in sender._muted_partitions
    assert lease.lapses == 1
    await producer.client.close()


async def test_a_batch_goes_out_once_a_heartbeat_renews_the_lease(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sent: list[float] = []

    async def send(self: Any, node_id: int) -> None:
        sent.append(clock.monotonic())
        for batch in self._batches.values():
            batch.done(base_offset=0)

    monkeypatch.setattr(internals._FencingHandler, "do", send)
    lease = MembershipLease("g", 6.0)
    lease.renewed(clock.monotonic(), generation=1)
    await asyncio.sleep(7.0)  # a heartbeat late: the lease ran out
    producer = _producer(lease)
    sender, manager = producer._sender, producer._sender._txn_manager
    batch = _drained_batch(manager, P0, 2)
    sender._in_flight.add(0)
    sender._muted_partitions.add(P0)
    started = clock.monotonic()
    asyncio.get_running_loop().call_later(1.5, lease.renewed, clock.monotonic() + 1.5, 1)
    await sender._send_produce_req(0, {P0: batch})
    assert sent == [pytest.approx(started + 1.5)]
    assert batch.future.result().offset == 0
    assert manager.sequence_number(P0) == 2
    assert P0 not in sender._muted_partitions
    await producer.client.close()


async def test_a_heartbeat_sent_before_a_refusal_renews_nothing() -> None:
    lease = MembershipLease("g", 6.0)
    sent = clock.monotonic()
    await asyncio.sleep(1.0)
    lease.lost()  # UNKNOWN_MEMBER_ID to a later heartbeat
    lease.renewed(sent, generation=1)  # an older heartbeat's answer, arriving late
    assert not lease.valid()
    await asyncio.sleep(0.5)
    lease.renewed(clock.monotonic(), generation=2)  # rejoined: renewed again
    assert lease.valid()


async def test_the_lease_is_overdue_a_delivery_margin_after_it_ran_out() -> None:
    lease = MembershipLease("g", 6.0)
    lease.renewed(clock.monotonic(), generation=1)
    await asyncio.sleep(6.0 + DELIVERY_MARGIN_S - 0.1)
    assert not lease.valid() and not lease.overdue()
    await asyncio.sleep(0.2)
    assert lease.overdue()


async def test_a_request_answered_long_after_the_lease_ran_out_counts_as_possible_duplicates(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Handed out under the lease, answered when the lease had run out more than the margin
    ago (the member frozen with the request in flight): it may have landed after a new owner
    read the destination, so its records are counted; one answered in time is not."""

    async def answer_in(self: Any, node_id: int) -> None:
        await asyncio.sleep(self.answer_after)
        for batch in self._batches.values():
            batch.done(base_offset=0)

    monkeypatch.setattr(internals._FencingHandler, "do", answer_in)
    late: list[tuple[TopicPartition, int]] = []
    lease = MembershipLease("g", 6.0)
    producer = _producer(lease)
    sender, manager = producer._sender, producer._sender._txn_manager
    sender.answered_late = lambda tp, records: late.append((tp, records))
    for answer_after, expected in ((1.0, []), (20.0, [(P0, 4)])):
        lease.renewed(clock.monotonic(), generation=1)
        monkeypatch.setattr(internals._FencingHandler, "answer_after", answer_after, raising=False)
        batch = _drained_batch(manager, P0, 4)
        sender._in_flight.add(0)
        sender._muted_partitions.add(P0)
        await sender._send_produce_req(0, {P0: batch})
        assert late == expected
    await producer.client.close()


async def test_a_batch_that_waited_through_a_rejoin_never_goes_out() -> None:
    """Dropped while a batch waited for the lease, then back in a new generation: the lease
    runs again, but the batch was handed over under the membership that is gone (its
    partition may be another member's now), so it fails instead of going out."""
    lease = MembershipLease("g", 6.0)
    lease.renewed(clock.monotonic(), generation=3)
    await asyncio.sleep(7.0)  # the lease ran out: heartbeats unanswered
    loop = asyncio.get_running_loop()
    loop.call_later(1.0, lease.lost)  # UNKNOWN_MEMBER_ID once the source answers again
    waited = asyncio.create_task(lease.until_valid(6.0))
    await asyncio.sleep(2.0)
    lease.renewed(clock.monotonic(), generation=5)  # rejoined
    assert not await waited
    assert lease.valid()  # a batch handed over now goes out


async def test_a_new_generation_alone_ends_a_wait_too() -> None:
    lease = MembershipLease("g", 6.0)
    lease.renewed(clock.monotonic(), generation=3)
    await asyncio.sleep(7.0)
    waited = asyncio.create_task(lease.until_valid(6.0))
    await asyncio.sleep(1.0)
    lease.renewed(clock.monotonic(), generation=4)  # a rebalance completed meanwhile
    assert not await waited


async def test_a_quick_second_rebalance_does_not_shorten_a_new_partitions_wait() -> None:
    """P0 arrives new in generation 5 and is kept in generation 6 two seconds later: its
    previous owner's lease may still run, so it still waits out the first deadline."""
    lease = MembershipLease("g", 6.0)
    closed = asyncio.Event()
    started = clock.monotonic()
    lease.assigned([P0], generation=5)
    await asyncio.sleep(2.0)
    lease.assigned([P0, P1], generation=6)
    assert await lease.settled(P0, closed)
    assert clock.monotonic() - started == pytest.approx(6.0 + DELIVERY_MARGIN_S)
    assert await lease.settled(P1, closed)
    assert clock.monotonic() - started == pytest.approx(2.0 + 6.0 + DELIVERY_MARGIN_S)


class _Coordinator:
    """What the membership hooks use of aiokafka's group coordinator."""

    def __init__(self, answers: list[int]) -> None:
        self.group_id = "replicator.dc1"
        self.generation = 4
        self.member_id = "m-1"
        self._group_instance_id = "dc1-a"
        self._answers = answers
        self.sent: list[Any] = []

    async def _send_req(self, request: Any) -> Any:
        self.sent.append(request)
        return type("Answer", (), {"error_code": self._answers.pop(0)})()

    async def _on_join_complete(self, *args: Any) -> None: ...

    async def _maybe_leave_group(self) -> None: ...


async def test_the_coordinators_answers_renew_end_or_fence_the_lease() -> None:
    """Accepted heartbeats and syncs renew; a member unknown or a generation gone ends the
    lease; a coordinator moving or a rebalance under way does neither; FENCED_INSTANCE_ID, to a
    heartbeat or to a join, fences it without raising inside the client."""
    from aiokafka.protocol.group import HeartbeatRequest, JoinGroupRequest

    lease = MembershipLease("g", 6.0, instance_id="dc1-a")
    coordinator = _Coordinator([0, 16, 27, 25, 0, 82])
    internals._MembershipHooks(coordinator, lease).install()
    heartbeat = HeartbeatRequest("replicator.dc1", 4, "m-1")
    await coordinator._send_req(heartbeat)
    assert lease.valid() and lease.generation == 4
    epoch = lease.epoch
    await asyncio.sleep(1.0)
    await coordinator._send_req(heartbeat)  # NOT_COORDINATOR: found again, same generation
    await coordinator._send_req(heartbeat)  # REBALANCE_IN_PROGRESS
    assert lease.valid() and lease.epoch == epoch
    await coordinator._send_req(heartbeat)  # UNKNOWN_MEMBER_ID
    assert not lease.valid() and lease.epoch == epoch + 1
    await asyncio.sleep(1.0)
    await coordinator._send_req(heartbeat)
    assert lease.valid()
    join = JoinGroupRequest("replicator.dc1", 45_000, 25_000, "m-1", "dc1-a", "consumer", [])
    await coordinator._send_req(join)  # FENCED_INSTANCE_ID
    assert lease.fenced is not None and "dc1-a" in lease.fenced and not lease.valid()
    # Sent as a static member's heartbeat: with the instance id where the broker grants v3.
    (v3,) = {type(r).__name__ for r in coordinator.sent[:1]}
    assert v3 == "_StaticHeartbeat"


async def test_a_new_groups_first_generation_reads_at_once() -> None:
    """Nobody held a partition before a group's first generation: nothing to wait for, so a
    first start's first record is not held back a lease length; a later generation waits. A
    static member waits even in the first generation: it may have taken over the instance id
    of a process that held the partition in that same generation (no rebalance)."""
    static = MembershipLease("g", 6.0, instance_id="dc1-a")
    static.assigned([P0], generation=1)
    started = clock.monotonic()
    assert await static.settled(P0, asyncio.Event())
    assert clock.monotonic() - started == pytest.approx(6.0 + DELIVERY_MARGIN_S)
    lease = MembershipLease("g", 6.0)
    closed = asyncio.Event()
    lease.assigned([P0], generation=1)
    started = clock.monotonic()
    assert await lease.settled(P0, closed)
    assert clock.monotonic() - started == pytest.approx(0.0)
    lease.assigned([P0, P1], generation=2)  # P1 moved here from a member of generation 1
    started = clock.monotonic()
    assert await lease.settled(P1, closed)
    assert clock.monotonic() - started == pytest.approx(6.0 + DELIVERY_MARGIN_S)
