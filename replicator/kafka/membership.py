"""A feed's group membership as a lease: who may write a partition's records, and from when.

Without transactions nothing stops a member the group no longer counts (frozen past its
session, cut off from the source cluster but not from the destination, its event loop blocked)
from writing on until its next heartbeat tells it so; a new owner that read the destination's
tail meanwhile writes those records again. The lease closes that window from both sides:

- **The old owner stops first.** Each heartbeat the coordinator answers without error renews
  the lease from the moment that heartbeat was *sent*; the destination producer hands a batch
  to the network only while the lease runs (:meth:`MembershipLease.valid`, checked in the
  producer's sender, so after a freeze nothing queued goes out before the check). The lease is
  :func:`lease_length` long: two heartbeat intervals, well inside the session and the
  rebalance timeout, so a member stops writing before the coordinator could give its
  partitions to anyone else. A heartbeat refused (member unknown, generation gone, instance
  fenced) ends it at once (:meth:`MembershipLease.lost`).
- **The new owner reads late enough.** A partition the member did not hold in the generation
  just before (a restart, a partition moved to it) is read at the destination only once a lease
  length and :data:`DELIVERY_MARGIN_S` have passed since the assignment arrived
  (:meth:`MembershipLease.settled`): any previous owner's last accepted heartbeat was sent
  before the coordinator handed the partition over, so its lease has run out by then, and a
  request it handed to the network just before has landed. A partition kept from the member's
  previous generation waits for nothing: nobody else held it in between; nor does a dynamic
  member's partition of the group's first generation (a group new to the coordinator: every
  member joined in its first rebalance, nobody held anything before), which keeps a first
  start's first record seconds away. A static member waits even then: a process that takes
  over another's instance id joins the generation that process was in, without a rebalance.

What remains, bounded: a produce request handed to the network just before the old owner's
lease ran out that takes longer to land than the time between that moment and the new owner's
read. When the old member was dropped by the coordinator (frozen, cut off, its loop blocked)
that time is at least its session (45 s by default) plus the margin; when another process took
its instance id it can be as short as :data:`DELIVERY_MARGIN_S`. The old owner sees the one
sign it can: a request answered (or given up) more than the margin after its lease ran out
(:meth:`MembershipLease.overdue`); its records are counted as possible duplicates
(``replicator_duplicates_possible_total{reason="answered_after_the_lease"}``).
``docs/concepts/exactly-once.md`` says so, and the audit finds any such record.

The lease is driven by the group client (:func:`replicator.kafka.internals.install_membership`)
and read by the producer's sender and the data path's resume (as its ``Ownership``); it is the
one object that holds membership state, changed only by the named transitions below.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterable
from dataclasses import dataclass, field

from aiokafka import TopicPartition

from replicator import clock

# What a produce request handed to the network just before an old owner's lease ran out may take
# to land: a new owner reads the destination this much later than the lease alone asks.
DELIVERY_MARGIN_S = 2.0
_FIRST_GENERATION = 1  # a new group's first generation (Kafka's classic group protocol)


def lease_length(session_timeout_ms: int, heartbeat_interval_ms: int, rebalance_ms: int) -> float:
    """Seconds a member may write after a heartbeat it sent was accepted: two heartbeat
    intervals (one may be late without a stall), at most two thirds of the session or the
    rebalance timeout, whichever is shorter (the coordinator drops a silent member after one
    of those)."""
    bound = min(session_timeout_ms, rebalance_ms) * 2 / 3
    return min(2 * heartbeat_interval_ms, bound) / 1000


@dataclass
class MembershipLease:
    """One group member's lease (see the module's docstring). ``length``: seconds."""

    group: str
    length: float
    instance_id: str | None = None
    renewed_at: float | None = None  # monotonic send time of the last accepted heartbeat
    generation: int = -1  # the generation the lease belongs to
    fenced: str | None = None  # why the member may never write again (its identity taken)
    # Assigned partitions the member did not hold in the generation before, with the monotonic
    # time before which their destination is not read.
    _fresh_until: dict[TopicPartition, float] = field(default_factory=dict)
    _held: frozenset[TopicPartition] = frozenset()
    _held_generation: int = -1
    _changed: asyncio.Event = field(default_factory=asyncio.Event)
    _valid_until: float = -math.inf  # monotonic: the end of the lease
    _lost_at: float = -math.inf  # the last refusal: heartbeats sent before it renew nothing
    lapses: int = 0  # times a batch found the lease run out (counted, shown in /status)
    # Changes with every refusal and every new generation: a batch that waited for the lease
    # goes out only under the epoch it waited in (after a rejoin its partition may be another's).
    epoch: int = 0

    # -- transitions ------------------------------------------------------------------------

    def renewed(self, sent_at: float, generation: int) -> None:
        """The coordinator accepted a heartbeat (or a group sync) sent at ``sent_at``."""
        if self.fenced is not None or sent_at <= self._lost_at:
            return  # fenced for good, or an answer to a heartbeat older than a refusal
        if generation != self.generation:
            self.generation = generation
            self.epoch += 1
        if self.renewed_at is None or sent_at > self.renewed_at:
            self.renewed_at = sent_at
            self._valid_until = sent_at + self.length
        self._wake()

    def lost(self) -> None:
        """The coordinator no longer counts this member in the generation (it rejoins)."""
        self._end()

    def fence(self, reason: str) -> None:
        """Another process joined the group under this member's instance id: never write."""
        self.fenced = reason
        self._end()

    def _end(self) -> None:
        now = clock.monotonic()
        self.renewed_at = None
        self.epoch += 1
        self._lost_at = now
        self._valid_until = min(self._valid_until, now)
        self._wake()

    def assigned(self, partitions: Iterable[TopicPartition], generation: int) -> None:
        """The group handed ``partitions`` over in ``generation``: those not held in the
        generation just before wait a lease length and the delivery margin before their
        destination is read."""
        now = clock.monotonic()
        kept = self._held if generation == self._held_generation + 1 else frozenset()
        taken = frozenset(partitions)
        until = now + self.length + DELIVERY_MARGIN_S
        # The group's first generation, joined as a dynamic member: nobody held a partition
        # before it (a static member may be taking over one that did, in the same generation).
        new_group = generation == _FIRST_GENERATION and self.instance_id is None
        fresh = {} if new_group else {tp: until for tp in taken - kept}
        # A partition kept from a generation in which it was still new keeps waiting: a quick
        # second rebalance does not shorten what its previous owner's lease may still run.
        for tp in taken & kept:
            if self._fresh_until.get(tp, 0.0) > now:
                fresh[tp] = self._fresh_until[tp]
        self._fresh_until = fresh
        self._held, self._held_generation = taken, generation
        self._wake()

    # -- questions --------------------------------------------------------------------------

    def valid(self) -> bool:
        """Whether the member may hand a batch to the network now."""
        return self.fenced is None and clock.monotonic() < self._valid_until

    def overdue(self) -> bool:
        """Whether the lease ran out more than :data:`DELIVERY_MARGIN_S` ago: what a request
        handed out under it lands only now may have landed after a new owner read the
        destination (a possible duplicate, counted by the producer's owner)."""
        return clock.monotonic() > self._valid_until + DELIVERY_MARGIN_S

    async def until_valid(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the lease to run again in the epoch the wait began
        in; whether it does (``False`` at once when the member is refused or rejoins: what waited
        was handed over under a membership that is gone)."""
        deadline = clock.monotonic() + timeout
        epoch = self.epoch
        while not self.valid():
            left = deadline - clock.monotonic()
            if left <= 0 or self.fenced is not None or self.epoch != epoch:
                return False
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), left)
            except TimeoutError:
                return self.valid() and self.epoch == epoch
        return self.epoch == epoch

    async def settled(self, tp: TopicPartition, closed: asyncio.Event) -> bool:
        """Wait until ``tp``'s destination may be read by this member (no previous owner can
        still write it); ``False`` if ``closed`` came first or the member was fenced."""
        while not closed.is_set():
            if self.fenced is not None:
                return False
            left = self._fresh_until.get(tp, 0.0) - clock.monotonic()
            if left <= 0:
                return True
            waiting = asyncio.ensure_future(closed.wait())
            try:
                await asyncio.wait([waiting], timeout=left)
            finally:
                waiting.cancel()
        return False

    def status(self) -> dict[str, object]:
        """What ``/status`` shows of the membership."""
        return {
            "group": self.group,
            "instance_id": self.instance_id,
            "lease_s": self.length,
            "lease_valid": self.valid(),
            "lease_lapses": self.lapses,
            "fenced": self.fenced,
        }

    def _wake(self) -> None:
        self._changed.set()


class AlwaysOwned:
    """The ownership of a member that shares its partitions with nobody (the in-memory fakes,
    a flow without a group)."""

    async def settled(self, tp: TopicPartition, closed: asyncio.Event) -> bool:
        return not closed.is_set()
