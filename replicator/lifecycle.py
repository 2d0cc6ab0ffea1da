"""Waiting and closing in long-lived tasks: sleep until the stop event, close clients quietly,
abandon a call on stop, and how long an idle fetch waits.

Retrying is :mod:`replicator.kafka.retry`."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterable
from typing import TypeVar

import structlog

from replicator import clock
from replicator.errors import Stopped

log = structlog.get_logger(__name__)

T = TypeVar("T")


async def unless_stopped(work: Awaitable[T], stop: asyncio.Event) -> T:
    """The result of ``work``, unless ``stop`` is set first: then ``work`` is cancelled (and
    awaited) and :class:`Stopped` raised. For calls that may hang on a frozen cluster (a
    connect, a probe) that a shutdown must not wait out."""
    task = asyncio.ensure_future(work)
    stopping = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({task, stopping}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopping.cancel()
        if not task.done():
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
    if task.cancelled():
        raise Stopped()
    return task.result()


async def sleep_unless_stopped(stop: asyncio.Event, seconds: float) -> None:
    """Sleep ``seconds`` or until ``stop`` is set, whichever comes first."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), timeout=seconds)


async def close_quietly(closing: Awaitable[None], timeout: float = 5.0, what: str = "") -> None:
    """Close a client within ``timeout``; its own errors add nothing to the one reported.

    With ``what`` (a client closed at shutdown, where a timeout means unsent or uncommitted
    work), a close that fails or does not finish in time is logged.
    """
    try:
        await asyncio.wait_for(closing, timeout=timeout)
    except Exception as exc:
        if what:
            log.warning("closing did not finish cleanly", client=what, error=repr(exc))


class StopDeadline:
    """One deadline for a whole stop, set at the first stop request: every wait of the stop
    (draining sends, committing, saving marks, closing clients, leaving groups) takes only what
    is left of ``REPLICATOR_SHUTDOWN_GRACE_MS``, so a stop ends within it even with a remote
    cluster that answers nothing (each wait alone used to take the whole grace: 40-47 s).

    Before a stop, a wait (a rebalance's drain) gets the whole grace. The drain leaves a reserve
    for what follows it; a wait past the deadline still gets a moment (``CLOSE_FLOOR_S``) to
    say goodbye to a cluster that answers at once.
    """

    CLOSE_FLOOR_S = 0.5

    def __init__(self, grace_s: float, clock: Callable[[], float] = clock.monotonic) -> None:
        self._grace = grace_s
        self._clock = clock
        self._at: float | None = None

    def start(self) -> None:
        """The stop begins now (later calls keep the first deadline)."""
        if self._at is None:
            self._at = self._clock() + self._grace

    @property
    def started(self) -> bool:
        return self._at is not None

    def left(self, floor: float = CLOSE_FLOOR_S) -> float:
        """Seconds left until the deadline (the whole grace before a stop), at least ``floor``."""
        if self._at is None:
            return max(self._grace, floor)
        return max(self._at - self._clock(), floor)

    def for_drain(self) -> float:
        """What a drain may take: before a stop, the whole grace; during one, what is left but
        a reserve (a quarter of the grace, at most 5 s) for the commits and closes after it."""
        if self._at is None:
            return self._grace
        reserve = min(5.0, self._grace / 4)
        return max(self._at - self._clock() - reserve, 0.0)


class PartitionEvent(asyncio.Event):
    """An :class:`asyncio.Event` for objects kept per partition and leg: its waiters are kept in
    a list (56 bytes empty) instead of the deque asyncio gives each event (about 700 bytes).

    Thousands of partitions each hold a few events, almost always with no waiter or one: at
    6,000 partitions on two legs the deques alone took 27 MB (measured with tracemalloc).
    ``Event`` only appends, removes and iterates its waiters, which a list does alike.
    """

    def __init__(self) -> None:
        super().__init__()
        self._waiters: list[asyncio.Future[bool]] = []  # type: ignore[assignment]


async def wait_any(events: Iterable[asyncio.Event], timeout: float) -> None:
    """Wait until one of ``events`` is set, or ``timeout`` seconds."""
    waiters = [asyncio.ensure_future(event.wait()) for event in events]
    if not waiters:
        await asyncio.sleep(timeout)
        return
    try:
        await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()


# Empty fetches for this long double a fetch's wait (up to the idle maximum).
_IDLE_STEP_S = 0.5
# Periodic work that walks every partition (an idle fetch, in which aiokafka's fetcher walks
# each one; a listing of the cluster; the health census) runs at most once per this many
# milliseconds per partition walked, so its cost stays a bounded share of a core however many
# partitions there are (a walk costs 20-35 ms per 1,000 partitions here: under 2% of a core each;
# an idle fetch of 6,000 partitions costs about 200 ms to encode and decode).
WALK_MS_PER_PARTITION = 2
# A listing of the whole cluster (the shared fetch's pattern subscription refreshes every topic's
# metadata) is the costliest walk, decoding each partition's replicas: it runs at most once per
# this many milliseconds per partition listed (30 s at 6,000 partitions), so that new topics are
# found within seconds on small clusters and within tens of seconds on very large ones.
LISTING_MS_PER_PARTITION = 5


def walk_interval(
    base_s: float, partitions: int, ms_per_partition: float = WALK_MS_PER_PARTITION
) -> float:
    """How often to walk ``partitions``: every ``base_s``, or less often with very many."""
    return max(base_s, partitions * ms_per_partition / 1000)


class IdleWait:
    """How long a fetch waits for data: ``busy_ms`` while records come, growing to
    ``idle_ms`` (doubling every ``_IDLE_STEP_S`` of empty fetches) while none do; to more with
    many partitions (:meth:`fetching`), at most ``longest_ms``.

    Each fetch walks every assigned partition in aiokafka's fetcher (and, without a fetch
    session, names each one and gets an answer for each), so an idle consumer fetching every few
    milliseconds costs CPU in proportion to its partitions (measured before fetch sessions: 44%
    of a core at 1,200 partitions with 20 ms waits; fetch sessions take about half of it away,
    ``benchmarks/fetch_sessions.py``). Apache Kafka answers a waiting fetch as soon as data
    arrives, so the longer wait costs no latency there; a broker that holds the fetch (the
    embedded one) delays the first record after an idle spell by a part of it.
    """

    def __init__(self, busy_ms: int, idle_ms: int, longest_ms: int) -> None:
        self._busy = busy_ms
        self._base_idle = self._idle = max(idle_ms, busy_ms)
        # A wait that never grows (idle_ms == busy_ms) stays fixed whatever the partitions.
        self._longest = max(longest_ms, self._idle) if idle_ms > busy_ms else self._idle
        self._wait = busy_ms
        self._empty_since: float | None = None

    def fetching(self, partitions: int) -> None:
        """The fetch names ``partitions``: an idle one waits :func:`walk_interval` of them."""
        walk_ms = int(walk_interval(self._base_idle / 1000, partitions) * 1000)
        self._idle = min(self._longest, walk_ms)

    def after(self, records: bool, now: float) -> int | None:
        """A fetch came back (with ``records`` or not): the new wait, or ``None`` if unchanged."""
        if records:
            self._empty_since = None
            if self._wait == self._busy:
                return None
            self._wait = self._busy
            return self._wait
        if self._empty_since is None:
            self._empty_since = now
            return None
        if self._wait >= self._idle or now - self._empty_since < _IDLE_STEP_S:
            return None
        self._empty_since = now
        self._wait = min(self._idle, max(self._wait * 2, 1))
        return self._wait
