"""Incremental fetch sessions (KIP-227) for the source consumers: a fetch names only what changed.

aiokafka lists every assigned, unpaused partition in every FetchRequest, and the broker answers
each of them: at thousands of partitions, idle ones cost more than the records. A fetch session
lets the broker hold the partitions and their fetch offsets between requests. The first request
of a session (id 0, epoch 0) is full, and the broker answers with a new session id; each later
one carries that id and the next epoch, and lists only the partitions added or whose fetch offset
or size changed, and those to forget (removed, paused, or holding records not handed over yet);
the broker answers only the partitions with records or a change (high watermark, log start, an
error). The rules are Apache Kafka's ``FetchSessionHandler``:

- an error of the whole session (``FETCH_SESSION_ID_NOT_FOUND``: the next request starts a new
  session; ``INVALID_FETCH_SESSION_EPOCH`` or any other: it closes this one and starts anew), a
  failed or abandoned request (a disconnect, a timeout, a cancelled fetch), or an answer naming a
  partition the session does not hold make the next request full;
- a broker that answers a full request with session id 0 keeps no session: every request is full;
- a broker below FetchRequest v7 knows no sessions: every request is full, as aiokafka sends it;
- one request at a time per session (sequential epochs, aiokafka's one fetch in flight per node):
  a second request while one is in flight is sent full without a session, the session untouched.

The fetch offset of each partition in an answer is the one the session holds for it when the
request was sent (:attr:`FetchPlan.held`), listed or not: aiokafka's own response handling reads
it from the request, which names, once answered, the partitions answered alone with those offsets
(:class:`SessionClient`), so that reading an answer costs what it holds.

What a request costs grows with what changed, not with the partitions fetched: the fetch planner
(:mod:`replicator.kafka.fetch_planner`) hands each request's partitions over as a snapshot with
the partitions changed since its previous request to the node (:class:`PlannedFetch`); a session
that holds that previous request compares those alone, and an incremental request is built for
the partitions it lists (not built whole, then narrowed). Any other request (aiokafka's own, or
one following a request never sent) is compared whole.

:class:`FetchSession` is the pure state of one node's session; :class:`SessionFetch` and
:class:`SessionClient` put it on the wire under a started consumer's fetcher
(:func:`use_fetch_sessions`, through :mod:`replicator.kafka.internals`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import aiokafka
import structlog
from aiokafka import AIOKafkaConsumer
from aiokafka.protocol.fetch import FetchRequest

from replicator import clock
from replicator.kafka import internals

log = structlog.get_logger(__name__)

NO_SESSION = 0
INITIAL_EPOCH = 0  # a full request that opens a session (and closes the one named)
FINAL_EPOCH = -1  # a full request without a session (and closing the one named)
MAX_EPOCH = 2**31 - 1
FIRST_SESSION_VERSION = 7  # FetchRequest v7 brought sessions
FETCH_SESSION_ID_NOT_FOUND = 70
INVALID_FETCH_SESSION_EPOCH = 71


# A partition, (topic, partition): a TopicPartition is one. Plain tuples, as the fetcher's request
# holds them: a session compares every partition fetched at each request.
Partition = tuple[str, int]
# What a request asks of one partition: (from offset, at most max bytes).
PartitionFetch = tuple[int, int]


@dataclass(frozen=True, slots=True)
class FetchPlan:
    """One request of a session: its ``session_id`` and ``epoch``, the partitions it lists
    (``send``: every partition when full) and forgets, and what the broker holds once it took
    it (``held``: every partition fetched, listed or not, with its fetch offset)."""

    session_id: int
    epoch: int
    send: tuple[Partition, ...]
    forget: tuple[Partition, ...]
    held: Mapping[Partition, PartitionFetch]

    @property
    def full(self) -> bool:
        """Whether the request lists every partition it fetches."""
        return self.epoch in (INITIAL_EPOCH, FINAL_EPOCH)

    @property
    def sessionless(self) -> bool:
        """A full request that neither opens nor continues a session."""
        return self.epoch == FINAL_EPOCH

    def fetch_offset(self, tp: Partition) -> int | None:
        """Where the answer's records of ``tp`` start from (``None``: not fetched)."""
        fetch = self.held.get(tp)
        return fetch[0] if fetch is not None else None


@dataclass(frozen=True, slots=True)
class PlannedFetch:
    """What the fetch planner (:mod:`replicator.kafka.fetch_planner`) tells the session of one
    request it built for a node: every partition it fetches with its offset and size
    (``wanted``, a snapshot), and the partitions whose entry was added, changed or removed
    since the planner's request ``base`` to the same node (``changed``). A session that holds
    what request ``base`` asked diffs ``changed`` alone; any other session diffs ``wanted``
    whole. ``token`` names this request, ``base`` the one before (a new generation of the
    planner's rows, after leaders moved or a new assignment, matches no session)."""

    token: tuple[int, int]
    base: tuple[int, int]
    wanted: Mapping[Partition, PartitionFetch]
    changed: frozenset[Partition]


def _next_epoch(epoch: int) -> int:
    return 1 if epoch >= MAX_EPOCH else epoch + 1


@dataclass(slots=True)
class FetchSession:
    """One node's fetch session, as the client sees it: the session id the broker gave
    (``NO_SESSION`` before), the epoch of the next request (``INITIAL_EPOCH``: the next request
    is full), and the partitions the broker holds with their fetch offsets and sizes."""

    session_id: int = NO_SESSION
    epoch: int = INITIAL_EPOCH
    held: Mapping[Partition, PartitionFetch] = field(default_factory=dict)
    # The last request answered in the session, and when (ms, wall clock): a partition it held
    # that its answer does not name had no record and no change at its fetch offset then.
    last_answer: FetchPlan | None = None
    answered_ms: int = 0
    named: frozenset[Partition] = frozenset()  # the partitions that answer named
    # The planner's request whose partitions :attr:`held` is (PlannedFetch.token), if any.
    held_token: tuple[int, int] | None = None
    _pending: FetchPlan | None = None

    def next_request(
        self,
        wanted: Mapping[Partition, PartitionFetch],
        version: int,
        planned: PlannedFetch | None = None,
    ) -> FetchPlan:
        """The request that fetches exactly ``wanted`` at FetchRequest ``version``; the session
        now waits for its answer (:meth:`answered`) or failure (:meth:`failed`). With the
        planner's ``planned`` (whose ``wanted`` it is) following the request the session holds,
        only its changed partitions are compared: the cost is what changed, not what is held."""
        held = dict(wanted) if planned is None else planned.wanted
        if version < FIRST_SESSION_VERSION:  # no sessions: full, as aiokafka sends it
            self.session_id, self.epoch, self.held = NO_SESSION, INITIAL_EPOCH, {}
            self.held_token = None
            return FetchPlan(NO_SESSION, FINAL_EPOCH, tuple(held), (), held)
        if self._pending is not None:  # one epoch at a time: this one without the session
            return FetchPlan(NO_SESSION, FINAL_EPOCH, tuple(held), (), held)
        if self.epoch == INITIAL_EPOCH:
            plan = FetchPlan(self.session_id, INITIAL_EPOCH, tuple(held), (), held)
        else:
            changed, forget = self._changes(held, planned)
            plan = FetchPlan(self.session_id, self.epoch, tuple(changed), tuple(forget), held)
        self.held = held
        self.held_token = None if planned is None else planned.token
        self._pending = plan
        return plan

    def _changes(
        self, held: Mapping[Partition, PartitionFetch], planned: PlannedFetch | None
    ) -> tuple[list[Partition], list[Partition]]:
        """The partitions to list (added, or another offset or size) and to forget."""
        before = self.held
        if planned is not None and self.held_token is not None and planned.base == self.held_token:
            candidates: Iterable[Partition] = planned.changed
            changed = [tp for tp in candidates if tp in held and before.get(tp) != held[tp]]
            forget = [tp for tp in candidates if tp not in held and tp in before]
            return changed, forget
        changed = [tp for tp, fetch in held.items() if before.get(tp) != fetch]
        forget = [tp for tp in before if tp not in held]
        return changed, forget

    def answered(
        self,
        plan: FetchPlan,
        error_code: int,
        session_id: int,
        partitions: Iterable[Partition],
    ) -> str | None:
        """Apply the broker's answer to ``plan``: its top-level error code, its session id and
        the partitions it names. What was wrong with it, if anything (the next request is then
        full); partitions the request did not fetch are to be ignored."""
        partitions = list(partitions)
        unknown = sorted({tp for tp in partitions if tp not in plan.held})
        if plan is not self._pending:  # sessionless: the session is not concerned
            return f"answered partitions not fetched: {unknown}" if unknown else None
        self._pending = None
        if error_code:
            if error_code == FETCH_SESSION_ID_NOT_FOUND:
                self._restart(NO_SESSION)
            else:
                self._restart(self.session_id)  # closes it and opens a new one
            return f"session {plan.session_id} epoch {plan.epoch}: error {error_code}"
        if unknown:
            self._restart(NO_SESSION if plan.full else self.session_id)
            return f"session {plan.session_id} epoch {plan.epoch}: not fetched {unknown}"
        if session_id == NO_SESSION:  # none opened (the broker's cache is full), or closed
            self._restart(NO_SESSION)
            return None
        if plan.full:
            self.session_id, self.epoch = session_id, 1
        else:
            self.epoch = _next_epoch(self.epoch)
        self.last_answer, self.answered_ms = plan, int(1000 * clock.wall())
        self.named = frozenset(partitions)
        return None

    def replaced(self) -> None:
        """The client's partition states were replaced (a new assignment: no high watermark
        known, positions set anew), so what the broker holds says nothing to them: the next
        request is full (closing this session), and an answer still awaited, once it comes,
        concerns no session."""
        self._pending = None
        self._restart(self.session_id)

    def quiet_since(self, tp: Partition, position: int) -> int | None:
        """When (ms) the last answer showed ``tp`` at ``position`` with no record and nothing
        changed, by leaving it out (``None``: no such answer)."""
        plan = self.last_answer
        if plan is None or plan.full or tp in self.named or plan.fetch_offset(tp) != position:
            return None
        return self.answered_ms

    def failed(self, plan: FetchPlan) -> None:
        """``plan``'s request got no answer (disconnect, timeout, cancelled): whether the broker
        took it is unknown, so the next request is full and closes this session."""
        if plan is self._pending:
            self._pending = None
            self._restart(self.session_id)

    def _restart(self, session_id: int) -> None:
        """The next request is full; no answer of the session says a partition was quiet."""
        self.session_id, self.epoch, self.held = session_id, INITIAL_EPOCH, {}
        self.held_token = None
        self.last_answer = None


# -- on the wire ----------------------------------------------------------------------------------


def _wanted(request: FetchRequest) -> dict[Partition, PartitionFetch]:
    return {
        (topic, partition): (offset, max_bytes)
        for topic, partitions in request.topics
        for partition, offset, max_bytes in partitions
    }


def by_topic(partitions: Iterable[Partition]) -> list[tuple[str, list[int]]]:
    """``partitions`` grouped by topic, in the order their topics first come."""
    grouped: dict[str, list[int]] = {}
    for topic, partition in partitions:
        grouped.setdefault(topic, []).append(partition)
    return list(grouped.items())


def _rows(
    partitions: Iterable[Partition], held: Mapping[Partition, PartitionFetch]
) -> list[tuple[str, list[tuple[int, int, int]]]]:
    """``partitions`` as a FetchRequest lists them: by topic, (partition, offset, max bytes);
    one ``held`` does not name is left out (aiokafka could not read its answer either)."""
    grouped: dict[str, list[tuple[int, int, int]]] = {}
    for topic, partition in partitions:
        fetch = held.get((topic, partition))
        if fetch is not None:
            grouped.setdefault(topic, []).append((partition, *fetch))
    return list(grouped.items())


class SessionFetch:
    """aiokafka's FetchRequest for one node, sent through that node's :class:`FetchSession`.

    Built at the version the connection negotiated (as aiokafka builds it), then narrowed to the
    session's plan: its session id and epoch, the partitions listed, those forgotten. Its
    :attr:`topics` stay every partition fetched, with the offsets the session holds: aiokafka
    reads an answer's fetch offsets from them.
    """

    API_KEY = 1

    def __init__(self, request: FetchRequest, session: FetchSession) -> None:
        self._request = request
        self._session = session
        self.plan: FetchPlan | None = None
        self.struct: Any = None  # the request as sent

    @property
    def topics(self) -> list[tuple[str, list[tuple[int, int, int]]]]:
        topics: list[tuple[str, list[tuple[int, int, int]]]] = self._request.topics
        return topics

    def prepare(self, versions: dict[int, tuple[int, int]]) -> Any:
        request = self._request
        # The version, from a request of no partition (built whole only when sent whole).
        version = internals.fetch_request_like(request, []).prepare(versions).API_VERSION
        planned = internals.planned_of(request)
        if isinstance(planned, PlannedFetch):
            plan = self._session.next_request(planned.wanted, version, planned)
        else:
            plan = self._session.next_request(_wanted(request), version)
        self.plan = plan
        if version >= FIRST_SESSION_VERSION and not plan.sessionless and not plan.full:
            listed = internals.fetch_request_like(request, _rows(plan.send, plan.held))
            struct: Any = listed.prepare(versions)
            struct.forgotten_topics_data = by_topic(plan.forget)
        else:
            struct = request.prepare(versions)
        if version >= FIRST_SESSION_VERSION and not plan.sessionless:
            struct.session_id, struct.session_epoch = plan.session_id, plan.epoch
        self.struct = struct
        return struct


@dataclass(slots=True)
class SessionStats:
    """What a consumer's fetch sessions did: requests answered (of which full), partitions
    they listed and forgot, partitions answered, the answers that reset a session, and the
    requests that got no answer (each resets its session too)."""

    requests: int = 0
    full: int = 0
    listed: int = 0
    forgotten: int = 0
    answered: int = 0
    resets: int = 0
    unanswered: int = 0


def _answered_partitions(response: Any) -> list[Partition]:
    return [(topic, p[0]) for topic, partitions in response.topics for p in partitions]


class SessionClient:
    """A fetcher's view of its ``AIOKafkaClient``: fetch requests go through the fetch session
    of the node they are sent to; every other request and attribute is the client's own.

    ``assignment`` names the consumer's current assignment: when it is another object than at
    the last fetch, the consumer's partition states were made anew, and every session starts
    over with a full request (:meth:`FetchSession.replaced`)."""

    def __init__(self, client: Any, assignment: Callable[[], object] = lambda: None) -> None:
        self.client = client
        self.sessions: dict[int, FetchSession] = {}
        self.stats = SessionStats()
        self._assignment = assignment
        self._assignment_seen: object = None

    def quiet_since(self, tp: Partition, position: int) -> int | None:
        """When (ms, wall clock) the last answer of the session of ``tp``'s leader showed it at
        ``position`` with no record and nothing changed (``None``: none did)."""
        node = self.client.cluster.leader_for_partition(tp)
        session = self.sessions.get(node) if node is not None else None
        return None if session is None else session.quiet_since(tp, position)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)

    @property
    def cluster(self) -> Any:
        """The client's metadata (read for each partition at each fetch: no fallback lookup)."""
        return self.client.cluster

    async def send(self, node_id: int, request: Any, **options: Any) -> Any:
        if not isinstance(request, FetchRequest):
            return await self.client.send(node_id, request, **options)
        if (assignment := self._assignment()) is not self._assignment_seen:
            self._assignment_seen = assignment
            for replaced in self.sessions.values():
                replaced.replaced()
        session = self.sessions.setdefault(node_id, FetchSession())
        fetch = SessionFetch(request, session)
        try:
            response = await self.client.send(node_id, fetch, **options)
        except BaseException:
            if fetch.plan is not None:
                session.failed(fetch.plan)
                self.stats.unanswered += 1
            raise
        if fetch.plan is not None:
            answered = self._answered(node_id, session, fetch.plan, response)
            # aiokafka reads each answered partition's fetch offset from the request: it names
            # those alone from now on (those it fetched), not every partition fetched.
            internals.set_fetch_topics(request, _rows(answered, fetch.plan.held))
        return response

    def _answered(
        self, node_id: int, session: FetchSession, plan: FetchPlan, response: Any
    ) -> list[Partition]:
        """Apply ``response`` to ``session`` and the stats; the partitions it names."""
        stats = self.stats
        stats.requests += 1
        stats.full += plan.full
        stats.listed += len(plan.send)
        stats.forgotten += len(plan.forget)
        answered = _answered_partitions(response)
        stats.answered += len(answered)
        if response.API_VERSION < FIRST_SESSION_VERSION:
            return answered
        problem = session.answered(plan, response.error_code, response.session_id, answered)
        if problem is None:
            return answered
        stats.resets += not plan.sessionless
        log.info("fetch session reset", node=node_id, problem=problem)
        if any(tp not in plan.held for tp in answered):  # aiokafka knows no offset for them
            response.topics = [
                (topic, [p for p in partitions if (topic, p[0]) in plan.held])
                for topic, partitions in response.topics
            ]
        return answered


def use_fetch_sessions(consumer: AIOKafkaConsumer) -> SessionClient | None:
    """Send a started ``consumer``'s fetches through fetch sessions; its :class:`SessionClient`
    (``None``: the installed aiokafka is not the supported one, fetches stay aiokafka's)."""
    if aiokafka.__version__ != internals.SUPPORTED_AIOKAFKA:
        return None
    found = internals.fetch_client(consumer)
    if isinstance(found, SessionClient):
        return found
    client = SessionClient(found, lambda: internals.assignment_of(consumer))
    internals.set_fetch_client(consumer, client)
    return client


def session_client(consumer: AIOKafkaConsumer) -> SessionClient | None:
    """``consumer``'s :class:`SessionClient`, if its fetches go through sessions."""
    found = internals.fetch_client(consumer)
    return found if isinstance(found, SessionClient) else None
